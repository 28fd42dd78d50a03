"""Decode loops that run their model over the whole sequence again for every token.

``for _ in range(n): idx_cond = idx[:, -block:]; logits = self(idx_cond); ...; idx =
torch.cat((idx, idx_next), dim=1)``: a decode loop (:mod:`analysis.decoding`) whose model
call is given the sequence the loop grows from that call's own output (or a crop of it),
with no cache: no key-value cache or past state passed (``past_key_values=``,
``kv_cache=``, ``input_pos``, ``start_pos``, an RNN's ``hidden`` carried from the call's
result), no cache kept by the model (a forward of this file that takes one, a ``self.cache_k``
the file updates), and not only the new token fed (``idx[:, -1:]``, ``tokens[:, prev:cur]``).
Each decoded token then re-runs the model over the whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.cache_switches import CacheSwitch, cache_switches
from torchlint.analysis.decoding import (
    LOGIT_WORDS, assignment_of, derived, mentions, may_run_a_model, targets, used_as_logits, decode_body, sampler_calls,
)
from torchlint.analysis.hypotheses import CONCATENATIONS, NewRecord, field_name, index_key, new_records, pieces, subscripts
from torchlint.analysis.decoder_caches import POSITION_NAMES, cache_word, file_keeps_a_cache, forward_takes_a_cache, passes_a_cache
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Calls that hand their input on whole: a move, a cast, a reshape, a batch dimension.
_SAME_DATA = frozenset({"to", "cuda", "long", "int", "float", "contiguous", "clone", "detach", "unsqueeze", "view", "reshape", "type", "t"})
# A call that is a whole generation itself (its own loop, its own cache): Hugging Face's `generate`.
_WHOLE_GENERATIONS = frozenset({"generate"})
_TENSOR_OF = frozenset({"torch.tensor", "torch.as_tensor", "torch.LongTensor", "torch.Tensor", "torch.IntTensor", "torch.stack"})


@dataclass(frozen=True, slots=True)
class PrefixRerun:
    """A model call given the whole sequence its loop grows, and how the loop grows it."""

    call: cst.Call
    sequence: str  # the name the loop grows (`idx`)
    grown_at: cst.CSTNode  # the statement that grows it (`idx = torch.cat((idx, idx_next), dim=1)`)
    # A parameter of the loop's function, off by default, that turns its cache path on
    # (`use_kv_caching=False`): the call reruns the prefix at the function's defaults.
    switch: str = ""
    # A cache the call is handed anyway (`cache=`), with the prefix of its buffer: it keeps no work of that prefix.
    cache: str = ""


def concatenated(ctx: FileContext, calls: list[cst.Call]) -> dict[str, cst.Assign]:
    """The names that these calls rebind to themselves with something added at the end
    (``idx = torch.cat((idx, nxt), dim=1)``), each with its assignment."""
    found: dict[str, cst.Assign] = {}
    for call in calls:
        if ctx.qname(call.func) not in CONCATENATIONS or not call.args or type(call.args[0].value) not in (cst.Tuple, cst.List):
            continue
        node, elements = ctx.tree.parent(call), call.args[0].value.elements
        if type(node) is not cst.Assign or len(node.targets) != 1 or len(elements) < 2:
            continue
        name = dotted(_joined_target(ctx, call, node.targets[0].target))
        if name is not None and dotted(elements[0].value) == name and any(dotted(e.value) != name for e in elements[1:]):
            found[name] = node  # (not `samples = torch.cat((samples, samples))`: a batch doubled, deit's cosub, grows by nothing made)
    return found


def _joined_target(ctx: FileContext, call: cst.Call, target: cst.BaseExpression) -> cst.BaseExpression:
    """What a concatenation's assignment binds the joined tensor to: the target itself, or the first of
    ``seq, shapes = pack([seq, tok], 'b *')`` (einops' pack returns the packed shapes with it)."""
    if ctx.qname(call.func) == "einops.pack" and type(target) in (cst.Tuple, cst.List) and target.elements:  # type: ignore[union-attr]
        return target.elements[0].value  # type: ignore[union-attr]
    return target


def reruns_prefix(ctx: FileContext, loop: cst.CSTNode) -> PrefixRerun | None:
    """The model call of decode loop ``loop`` that is given the whole sequence the loop
    grows by what that call returns, with no cache (see the module's docstring), or None;
    also one that does so at its function's defaults, where a parameter off by default turns
    the cache on (``use_kv_caching=False``: bark's ``generate_text_semantic``)."""
    if not ctx.loops.decodes(loop) or ctx.loops.denoises(loop) or file_keeps_a_cache(ctx):
        return None
    nodes, ordered = decode_body(ctx, loop)
    runs = sorted((n for n in nodes if type(n) is cst.Call and may_run_a_model(ctx, n) and ctx.method_name(n) not in _WHOLE_GENERATIONS),
                  key=ctx.tree.index)
    found = _rerun(ctx, loop, nodes, ordered, runs, None)
    for switch in cache_switches(ctx, runs, ordered) if found is None else ():
        found = _rerun(ctx, loop, nodes, ordered, runs, switch)
        if found is not None:
            return found
    return found


def _rerun(ctx: FileContext, loop: cst.For | cst.While, nodes: list[cst.CSTNode], ordered: list[cst.CSTNode], runs: list[cst.Call],
           switch: CacheSwitch | None) -> PrefixRerun | None:
    """``reruns_prefix`` of the loop's body, at the switch's default where one is given."""
    # `if past: model(x[:, -1:], past_key_values=past) else: model(x)`: the first pass fills the cache
    # (kept only for a model given the prefix of a buffer the loop writes: it runs over that prefix again
    # whatever it is handed, `_prefix_of_a_buffer`)
    cached = any(passes_a_cache(ctx, call, set(), positions=False, switch=switch) for call in runs) \
        or _keeps_a_cache_name([s for s in ordered if switch is None or not targets(s) <= switch.state])
    moving = {name for statement in ordered for name in targets(statement)} | (mentions(loop.target) if type(loop) is cst.For else frozenset())
    # (a prefix bounded by an enclosing loop's variable holds the row this loop writes: `row[:, :i + 1]`
    # around `row[:, i, j] = sample` of VQ-VAE-2's per-pixel sampling)
    moving |= {name for outer in ctx.loops.enclosing_loops(loop) if type(outer) is cst.For
               and ctx.tree.enclosing_function(outer) is ctx.tree.enclosing_function(loop) for name in mentions(outer.target)}
    sequences = _carried(ctx, concatenated(ctx, [n for n in nodes if type(n) is cst.Call]), ordered)
    # What the model made, not through the sequence itself (`mask = mask_after(out)`, then
    # `out = out.masked_fill(mask)`, makes nothing the model is given)
    unlooped = [s for s in ordered if not targets(s) & sequences]
    samplers = sampler_calls(nodes)
    records = new_records(nodes, ordered)
    for call in runs:
        statement = assignment_of(ctx, call)
        if statement is None or ctx.guards.rare(call, stop=loop):
            continue  # (a branch that runs once, or ends the loop: `if done.all(): mask = mask_after(out); break`)
        made = targets(statement)
        if all("mask" in name.rsplit(".", 1)[-1].lower() for name in made):
            continue  # `slf_attn_mask = get_subsequent_mask(ys)`: a causal mask the size of the sequence, not the model
        outputs = derived(unlooped, made)
        if not used_as_logits(call, outputs, samplers) or _post_processes(ctx, call, runs, unlooped):
            continue
        fields = _grown_fields(ctx, records, ordered, derived(ordered, made, rounds=1), moving)
        grown = _grown_by(ctx, nodes, outputs) | {name: (at, False) for name, at in fields.items()}
        if not grown or _passes_a_field(call, records, made):
            continue
        # (a cache by name where the model is given the prefix of the buffer again: it keeps no work of that prefix)
        given = _cache_given(ctx, call, made) if cached or passes_a_cache(ctx, call, made, switch=switch) else ""
        if given is None:
            continue
        # (at the switch's default, what it opts in does not run: `x_input = x[:, [-1]]` under `if use_kv_caching:`)
        before = [s for s in ordered if ctx.tree.index(s) < ctx.tree.index(call) and not ctx.tree.is_inside(call, s)
                  and (switch is None or ctx.guards.opt_in(s) != switch.flag)]
        for arg in call.args:
            sequence = _whole(ctx, arg.value, grown, before, moving, 0, off=switch.flag if switch is not None else "")
            if sequence is None or forward_takes_a_cache(ctx, call) or given and not grown[sequence][1]:
                continue  # (a cache beside a sequence grown whole: `model(x, past_key_values=past)` may take the new token from it)
            return PrefixRerun(call, sequence, grown[sequence][0], switch.flag if switch is not None else "", given)
    return None


def _cache_given(ctx: FileContext, call: cst.Call, made: set[str]) -> str | None:
    """What the model call is handed that only names a cache and that the call returns again (``out,
    cache = model(x, cache=cache)``), where the call is given no start position nor a ``**`` mapping:
    ``"cache"``, or None (a cache it may decode from). A model given the prefix of a buffer the loop writes
    (``row[:, :i + 1]``) then runs over that prefix again whatever the cache keeps (VQ-VAE-2's PixelSNAIL:
    the condition's features). Not a state filled in place (fairseq's ``incremental_states``, with
    ``tokens[:, :step + 1]``): such a decoder takes the new token from the prefix itself."""
    named = ""
    for arg in call.args:
        keyword = arg.keyword.value if arg.keyword is not None else ""
        given = (dotted(arg.value) or "").rsplit(".", 1)[-1]
        if arg.star or keyword == "use_cache" or keyword in POSITION_NAMES or given.lower() in POSITION_NAMES:
            return None
        if cache_word(keyword) or cache_word(given):
            if not mentions(arg.value) & made or "incremental" in (keyword + given).lower():
                return None
            named = named or keyword or given
    return named or None


def _carried(ctx: FileContext, grown: dict[str, cst.Assign], ordered: list[cst.CSTNode]) -> set[str]:
    """The names of ``grown`` that the loop carries from one pass to the next: not one the pass
    binds afresh before it grows it (``relevant_logits = logits[0, 0, :V]``, then
    ``relevant_logits = torch.hstack((relevant_logits, eos_logit))``: bark's logits, not a sequence)."""
    return {name for name, at in grown.items()
            if not any(s is not at and ctx.tree.index(s) < ctx.tree.index(at) and name in targets(s, items=False) for s in ordered)}


def _post_processes(ctx: FileContext, call: cst.Call, runs: list[cst.Call], unlooped: list[cst.CSTNode]) -> bool:
    """Is ``call`` given what a model call before it made in this iteration (``scores =
    self.postprocess_next_token_scores(scores=next_token_logits, input_ids=input_ids)``: a
    repetition penalty reads the whole sequence, but the model ran before it)?"""
    start = ctx.tree.index(call)
    given = set().union(*(mentions(arg.value) for arg in call.args)) if call.args else set()
    for run in runs:
        statement = assignment_of(ctx, run) if ctx.tree.index(run) < start else None
        if statement is not None and not ctx.tree.is_inside(call, statement):
            made = derived([s for s in unlooped if ctx.tree.index(s) < start], targets(statement))
            # (logits by name: a causal mask made by a helper this iteration, `tgt_mask =
            # generate_square_subsequent_mask(ys.size(0))`, is the decoder's input, not its output)
            if any(word in name.rsplit(".", 1)[-1].lower() for name in made & given for word in LOGIT_WORDS):
                return True
    return False


def _keeps_a_cache_name(ordered: list[cst.CSTNode]) -> bool:
    """Does the body bind a cache by name (``past_key_values = outputs.past_key_values``)?"""
    return any(cache_word(name) for s in ordered for name in targets(s, items=False) if not name.startswith("self."))


def _grown_by(ctx: FileContext, nodes: list[cst.CSTNode], outputs: set[str]) -> dict[str, tuple[cst.CSTNode, bool]]:
    """The sequences the body grows by what the model returned: each with its statement and
    whether it grows in place into a buffer made before (``tokens[:, t] = nxt``), where only
    a prefix slice of it (``tokens[:, :t]``) is the tokens decoded so far."""
    found: dict[str, tuple[cst.CSTNode, bool]] = {}
    for name, node in concatenated(ctx, [n for n in nodes if type(n) is cst.Call]).items():
        if any(mentions(e.value) & outputs for e in node.value.args[0].value.elements[1:]):  # type: ignore[attr-defined]
            found[name] = (node, False)
    for node in nodes:
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("append", "extend") \
                and len(node.args) == 1 and (name := dotted(node.func.value)) is not None and mentions(node.args[0].value) & outputs:
            found.setdefault(name, (node, False))  # `tokens.append(nxt)`, then `model(torch.tensor([tokens]))`
        elif type(node) is cst.Assign and mentions(node.value) & outputs:
            for target in node.targets:
                if type(target.target) is cst.Subscript and (name := dotted(target.target.value)) is not None:
                    found.setdefault(name, (node, True))
            if type(node.value) is cst.Call and ctx.qname(node.value.func) not in CONCATENATIONS:
                # `gen_seq, scores = self._best(gen_seq, dec_output, scores, step)`: a helper writes the
                # next token into the buffer it is given (attention-is-all-you-need's beam search)
                given = set().union(*(mentions(arg.value) for arg in node.value.args)) if node.value.args else set()
                for name in targets(node, items=False) & given:
                    found.setdefault(name, (node, True))
    return found


def _grown_fields(ctx: FileContext, records: list[NewRecord], ordered: list[cst.CSTNode], fresh: set[str],
                  moving: set[str]) -> dict[str, cst.CSTNode]:
    """The fields of the current hypothesis that the next one gets whole with a token this pass's
    model call made (``fresh``) added: ``new_hyp['yseq'][:, :n] = hyp['yseq']`` and
    ``new_hyp['yseq'][:, n] = int(best[0, j])``, or ``torch.cat([hyp.yseq, tok])``. Each by
    each name the current record reads it by, with the statement that adds the token."""
    found: dict[str, cst.CSTNode] = {}
    for record in records:
        for key, names in record.current.items():
            held = {name: (record.parts[key][0][0], False) for name in names}  # (`_whole` asks only the names)
            whole = added = None
            bases = {name.split("[", 1)[0].rsplit(".", 1)[0] if "[" in name or "." in name else name for name in names}
            for statement, value in record.parts[key]:
                before = [s for s in ordered if ctx.tree.index(s) < ctx.tree.index(statement)]
                for piece in pieces(ctx, value):
                    if whole is None and _whole(ctx, piece, held, before, moving, 0) in names:
                        whole = statement
                    elif added is None and type(piece) not in (cst.List, cst.Tuple, cst.BinaryOperation) \
                            and (mentions(piece) - bases - {record.name}) & fresh:
                        added = statement
            if whole is not None and added is not None:
                found.update((name, added) for name in names)
    return found


def _passes_a_field(call: cst.Call, records: list[NewRecord], made: set[str]) -> bool:
    """Is the call given a field of the current hypothesis that holds a cache: one named for it
    (``hyp['cache']``), or one the next hypothesis gets from what this call returns (``out,
    state = model(ys, hyp['state'])``, then ``new_hyp['state'] = state``)?"""
    carried = {name for record in records for key, names in record.current.items()
               if any(mentions(value) & made for _, value in record.parts[key]) for name in names}
    for arg in call.args:
        for node in subscripts(arg.value):
            key = index_key(node)
            if isinstance(key, str) and cache_word(key) or field_name(node) in carried:
                return True
        if mentions(arg.value) & carried:
            return True  # `hyp.state`, a tuple's `state`
    return False


def _whole(ctx: FileContext, expr: cst.BaseExpression, grown: dict[str, tuple[cst.CSTNode, bool]], before: list[cst.CSTNode],
           moving: set[str], depth: int, prefix: bool = False, off: str = "") -> str | None:
    """The grown sequence ``expr`` holds whole (or cropped to a window from its end), or
    None: ``idx``, ``idx_cond`` bound before to ``idx if ... else idx[:, -block:]``,
    ``torch.tensor([tokens])``, ``tokens[:, :t]`` of a buffer; not ``idx[:, -1:]`` nor
    ``tokens[:, prev:cur]`` (the new tokens only). ``prefix``: a slice from the start was taken;
    ``off``: a parameter at its default, off (``x[:, -1:] if cached else x`` is ``x``)."""
    if depth > 8:
        return None
    name = dotted(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    if name is not None:
        if name in grown:
            return name if prefix or not grown[name][1] else None
        latest = next((s for s in reversed(before) if type(s) is not cst.AugAssign and name in targets(s, items=False)), None)
        value = _bound_value(latest, name)
        if value is None:
            return None
        return _whole(ctx, value, grown, before[:before.index(latest)], moving, depth + 1, prefix, off)  # type: ignore[arg-type]
    if type(expr) is cst.IfExp and off and ctx.guards.opt_in(expr.body) == off:  # the flag at its default takes the `else`
        return _whole(ctx, expr.orelse, grown, before, moving, depth + 1, prefix, off)
    if type(expr) is cst.IfExp:  # `idx if idx.size(1) <= block else idx[:, -block:]`: both are the sequence
        body = _whole(ctx, expr.body, grown, before, moving, depth + 1, prefix, off)
        return body if body is not None and body == _whole(ctx, expr.orelse, grown, before, moving, depth + 1, prefix, off) else None
    if type(expr) is cst.Subscript and (field := field_name(expr)) is not None and field in grown:
        return field  # `hyp['yseq']`: a beam search's hypothesis keeps its sequence in a record
    if type(expr) is cst.Subscript:
        kind = _window(expr, moving)
        return _whole(ctx, expr.value, grown, before, moving, depth + 1, prefix or kind == "prefix", off) if kind else None
    if type(expr) in (cst.List, cst.Tuple) and len(expr.elements) == 1:  # `torch.tensor([tokens])`
        return _whole(ctx, expr.elements[0].value, grown, before, moving, depth + 1, prefix, off)
    if type(expr) is cst.Call and expr.args:
        if type(expr.func) is cst.Attribute and expr.func.attr.value in _SAME_DATA and ctx.qname(expr.func) is None:
            return _whole(ctx, expr.func.value, grown, before, moving, depth + 1, prefix, off)
        if ctx.qname(expr.func) in _TENSOR_OF:
            return _whole(ctx, expr.args[0].value, grown, before, moving, depth + 1, prefix, off)
    return None


def _bound_value(statement: cst.CSTNode | None, name: str) -> cst.BaseExpression | None:
    """What ``statement`` binds ``name`` to: ``x = v``, or the matching element of ``text, image =
    out[:, :n], out[:, n:]`` (DALLE-pytorch's ``generate_images`` gives its model both halves); None
    for anything else (an unpacked call's result is not known element by element)."""
    if type(statement) is not cst.Assign or len(statement.targets) != 1:
        return None
    target, value = statement.targets[0].target, statement.value
    if dotted(target) == name:
        return value
    if type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List) \
            and len(target.elements) == len(value.elements) \
            and not any(type(e) is cst.StarredElement for e in (*target.elements, *value.elements)):  # type: ignore[union-attr]
        return next((v.value for t, v in zip(target.elements, value.elements) if dotted(t.value) == name), None)  # type: ignore[union-attr]
    return None


def _window(expr: cst.Subscript, moving: set[str]) -> str | None:
    """What a subscript of the sequence keeps, by its last index: "all" (``[None]``, ``[:, :]``,
    a crop to the last ``block`` tokens ``[:, -block:]``), "prefix" (``[:, :t]``, up to a
    position the loop moves), or None (the last token ``[:, -1:]``, one position ``[:, -1]``,
    a window whose start the loop moves: ``[:, prev_pos:cur_pos]``)."""
    last = expr.slice[-1].slice
    if type(last) is cst.Slice and last.lower is None and last.upper is None and last.step is None and len(expr.slice) > 1:
        # `row[:, :i + 1, :]`: the axis the loop grows need not be the last; a trailing `:` keeps it all
        return _window(cst.Subscript(expr.value, expr.slice[:-1]), moving)
    if type(last) is cst.Index:
        return "all" if type(last.value) is cst.Name and last.value.value == "None" or type(last.value) is cst.Ellipsis else None
    lower, upper = last.lower, last.upper
    if lower is not None and mentions(lower) & moving:
        return None  # the window starts where the last pass ended: a cached step
    if type(lower) is cst.UnaryOperation and type(lower.operator) is cst.Minus and type(lower.expression) is cst.Integer \
            and lower.expression.value == "1":
        return None  # `[:, -1:]`: the newest token only
    if type(lower) is cst.Integer and lower.value not in ("0",):
        return None  # `[:, 5:]`: not the tokens decoded so far
    return "prefix" if upper is not None and mentions(upper) & moving else "all"
