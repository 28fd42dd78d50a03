"""Decode loops: a loop that grows a sequence one token (frame, sample) per iteration from
what a model returns for it, whatever the model's type.

``logits = self.inference.logits(tokens, audio)`` then ``tokens, done =
self.decoder.update(tokens, logits)``, or ``logits = model(idx)[:, -1]``,
``nxt = torch.multinomial(logits.softmax(-1), 1)``, ``idx = torch.cat([idx, nxt], 1)``: the
call is given the sequence, its result is used as logits (so named, or sampled from), and the
sequence is made again from that result. Each iteration is one inference step. The model may
be a parameter or an attribute of unknown type: the shape says what it is.

A denoising loop (``denoising.denoises``) samples without logits: ``for i in indices: t =
th.tensor([i] * n); out = self.p_sample(model, img, t); img = out["sample"]``, once per
diffusion time step: the model's output is the next step's input.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.mentions import mentions
from torchlint.analysis.names import dotted
from torchlint.analysis.token_reads import returns_a_token

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Ops that pick from a distribution: what a decoder does with logits.
_SAMPLERS = frozenset({"argmax", "topk", "multinomial", "sample", "softmax", "log_softmax", "argsort", "Categorical", "gumbel_softmax"})
LOGIT_WORDS = ("logit", "prob", "score")
# Methods of a tensor (or list): their result is the same data reshaped, not a model's output.
_TENSOR_METHODS = frozenset({
    "view", "reshape", "float", "half", "bfloat16", "double", "long", "int", "to", "cuda", "cpu", "clone", "detach",
    "contiguous", "unsqueeze", "squeeze", "flatten", "permute", "transpose", "expand", "repeat", "repeat_interleave",
    "softmax", "log_softmax", "argmax", "topk", "max", "min", "sum", "mean", "tolist", "item", "numpy", "append",
    "extend", "size", "dim", "type", "masked_fill", "index_select", "gather", "new_zeros", "new_ones", "copy",
})
_BUILTINS = frozenset(dir(builtins))
_LIBRARIES = ("torch", "numpy", "np", "math", "random", "itertools", "functools", "einops")


def decodes(ctx: FileContext, loop: cst.CSTNode) -> bool:
    """Is ``loop`` a decode loop (see the module's docstring)? Not in a ``forward`` (a loop
    over time steps there runs within the model's step)."""
    if type(loop) not in (cst.For, cst.While):
        return False
    function = ctx.tree.enclosing_function(loop)
    if function is not None and function.name.value in ("forward", "__call__"):
        return False
    nodes, ordered = decode_body(ctx, loop)
    if _feeds_back(ctx, loop, nodes, ordered):
        return True
    # The sampled tokens copied element by element into the next input by loops nested in the
    # iteration (kospeech's beam search: `for b, row in enumerate(ids): for i, s in enumerate(row):
    # chosen[b, i] = current_vs[b, s]`, then `beams = torch.cat([beams, chosen...])`): those
    # element writes make `chosen` from the sampled values, as an assignment in the body would.
    own = set(map(id, nodes))
    writes = [n for n in ctx.loops.own_nodes(loop.body, enter=lambda n: type(n) is cst.For) if id(n) not in own
              and type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Subscript]
    if writes and _feeds_back(ctx, loop, nodes, sorted([*ordered, *writes], key=ctx.tree.index)):
        return True
    # The next input built row by row from the sampled tokens (`for i, state in enumerate(rows):
    # column.append(sampled[i])`, then `ids = torch.tensor(column)`: nanochat's Engine): the
    # rows' loop is the iteration's too, its appends what the column is made from. Only for a
    # call whose result is itself named logits (`logits = self.model.forward(ids)`): through
    # nested loops, names made from anything spread far (a top-k filter's `cur_score`).
    if not any(type(n) in (cst.For, cst.While) and n is not loop for n in nodes):
        return False
    # The model run in a loop nested in the iteration, over what the iteration holds (ChatRWKV's
    # `PIPELINE.generate`: `while len(tokens) > 0: out, state = self.model.forward(tokens[:n], state)`,
    # the prompt in chunks at first, then the one new token), its output sampled in the iteration's
    # own body (`token = self.sample_logits(out)`, then `tokens = [token]`): the nested loop feeds the
    # token, the iteration decodes it. (Only samplers of the iteration's own body: what a nested loop
    # samples, a top-k filter's or a scoring pass's, says nothing of the iteration.)
    own_samplers = _own_samplers(ctx, nodes)
    nested = list(ctx.loops.own_nodes(loop.body, enter=lambda n: type(n) in (cst.For, cst.While)))
    ordered = sorted((n for n in nested if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)), key=ctx.tree.index)
    if own_samplers and _feeds_back(ctx, loop, nested, ordered, samplers=own_samplers, nested_only=frozenset(map(id, nodes))):
        return True
    if not any(type(n) is cst.For and n is not loop for n in nodes):
        return False
    nodes = list(ctx.loops.own_nodes(loop.body, enter=lambda n: type(n) is cst.For))
    ordered = sorted((n for n in nodes if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign) or _appends(n)), key=ctx.tree.index)
    return _feeds_back(ctx, loop, nodes, ordered, named=True)


def _own_samplers(ctx: FileContext, nodes: list[cst.CSTNode]) -> list[cst.Call]:
    """The calls among ``nodes`` that sample a token: a sampling op, or a helper of the file that
    picks one from the logits it is given (ChatRWKV's ``token = sample_logits(out)``)."""
    return sampler_calls(nodes) + [n for n in nodes if type(n) is cst.Call and _picks_a_token(ctx, n)]


def _feeds_back(ctx: FileContext, loop: cst.For | cst.While, nodes: list[cst.CSTNode], ordered: list[cst.CSTNode], named: bool = False,
                samplers: list[cst.Call] | None = None, nested_only: frozenset[int] = frozenset()) -> bool:
    """Is a call in ``nodes`` that may run a model used as logits (with ``named``: bound to a
    name of logits; with ``samplers``: sampled from by those), and given what the body made from
    them the iteration before? (Not the calls whose ids are in ``nested_only``.)"""
    models = [n for n in nodes if type(n) is cst.Call and id(n) not in nested_only and may_run_a_model(ctx, n)]
    if not models:
        return False  # (no call that may run a model: most loops, asked before what the body grows or samples is found)
    grown = grown_in_place(nodes)  # `seq.append(x)`, `tokens[:, t] = x`
    if samplers is None:
        # (a helper of the file that picks the token from the logits it is given, ChatRWKV's `token = sample_logits(out)`, samples too)
        samplers = _own_samplers(ctx, nodes)  # once, not per call
    for call in models:
        statement = assignment_of(ctx, call)
        if statement is None:
            continue
        if named and not any(word in name.rsplit(".", 1)[-1].lower() for name in targets(statement) for word in LOGIT_WORDS):
            continue
        made = derived(ordered, targets(statement))
        if not used_as_logits(call, made, samplers) and not _samples_inside(ctx, call):
            continue
        # (the loop's own variables are new each iteration: `for _, sample in itr:` carries no
        # `sample` over, even where an inner `for sample in samples:` rebinds the name)
        inputs = carried_inputs(call, ordered, ctx) - (mentions(loop.target) if type(loop) is cst.For else frozenset())
        if inputs & made or any(name in inputs and mentions(value) & made for name, value in grown):
            return True
        read = {name for name in inputs if "." in name}  # (an attribute the model is given: what a strategy may keep)
        if read and _read_back(nodes, read, _handed_to_objects(ctx, nodes, made, read)):
            return True
    return False


def _handed_to_objects(ctx: FileContext, nodes: list[cst.CSTNode], made: set[str], read: set[str]) -> set[str]:
    """The objects whose method the body hands what the model returned (``strategy.advance(log_probs)``):
    a decode strategy that picks the token and keeps it. Not ``self`` (every attribute of the caller
    would be made from it), a library's module (``torchvision.ops.nms(boxes, scores)``), nor a
    tensor's or list's own method. Only objects whose attribute the model is given (``read``): the rest
    cannot feed it, and are not asked about."""
    owners = {name.rsplit(".", cut)[0] for name in read for cut in range(1, name.count(".") + 1)}
    found: set[str] = set()
    for node in nodes:
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute or node.func.attr.value in _TENSOR_METHODS:
            continue
        owner = dotted(node.func.value)
        if owner not in owners or owner == "self" or owner.split(".")[0] in _LIBRARIES or ctx.qname(node.func) is not None:
            continue
        if any(mentions(arg.value) & made for arg in node.args):
            found.add(owner)
    return found


def _read_back(nodes: list[cst.CSTNode], read: set[str], owners: set[str]) -> bool:
    """Is the model given (``read``: the attribute chains it is given) an attribute of one of ``owners``
    (``strategy.current_predictions``, ``self.strategy.current``), read as a value, not called
    (``hyp.copy()`` of a settings dict ``hyp.update(...)`` filled is no token)?"""
    kept = {name for name in read if any(name.startswith(owner + ".") for owner in owners)}
    return bool(kept) and bool(kept - {dotted(n.func) for n in nodes if type(n) is cst.Call})


def decode_body(ctx: FileContext, loop: cst.For | cst.While) -> tuple[list[cst.CSTNode], list[cst.CSTNode]]:
    """The nodes one iteration of a decode loop runs (not those of nested scopes), and its
    assignments in source order (a beam search's hypothesis loops and appends too)."""
    nodes = list(ctx.loops.own_nodes(loop.body))
    # A beam search runs the model once per hypothesis, in `for hyp in hyps:` over what this
    # loop rebinds (`hyps = kept`): the `for` loops in its body (hypotheses, then candidates) are
    # this iteration's too. `for hyp in hyps:` binds what the model is given, and
    # `kept.append(new)` then `hyps = kept` makes the next hypotheses from what the model scored.
    # (Only there: a `for i in range(out.shape[2])` elsewhere makes `i` of no model's output.)
    rebound = {name for n in nodes if type(n) is cst.Assign for name in targets(n, items=False)}
    searches = any(type(n) is cst.For and dotted(n.iter) in rebound for n in nodes)
    if searches:
        nodes = list(ctx.loops.own_nodes(loop.body, enter=lambda n: type(n) is cst.For))
    ordered = sorted((n for n in nodes if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)
                      or searches and (type(n) is cst.For or _appends(n))), key=ctx.tree.index)
    return nodes, ordered


def assignment_of(ctx: FileContext, call: cst.Call) -> cst.CSTNode | None:
    """The assignment whose value holds ``call`` (``out = f(x)[0]``), if any."""
    statement = ctx.tree.parent(call)
    while statement is not None and type(statement) not in (cst.Assign, cst.AnnAssign):
        if type(statement) in (cst.SimpleStatementLine, cst.IndentedBlock):
            return None
        statement = ctx.tree.parent(statement)
    return statement


def may_run_a_model(ctx: FileContext, call: cst.Call) -> bool:
    """A call that may run a model: ``model(x)``, ``self.model.decoder(x)``,
    ``self.inference.logits(x)``; not a builtin, a library function or a tensor method."""
    func = call.func
    if type(func) not in (cst.Name, cst.Attribute):
        return False
    qualified = ctx.qname(func)
    if qualified is not None and qualified.split(".")[0] in _LIBRARIES:
        return False
    if type(func) is cst.Name:
        return func.value not in _BUILTINS
    return func.attr.value not in _TENSOR_METHODS and func.attr.value not in _SAMPLERS


def _appends(node: cst.CSTNode) -> bool:
    """``seq.append(v)``: ``seq`` is made from ``v`` too."""
    return type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "append" and len(node.args) == 1


def _value(statement: cst.CSTNode) -> cst.BaseExpression | None:
    """What an assignment binds: its value; a ``for``'s iterable; what ``seq.append(v)`` adds."""
    if type(statement) is cst.For:
        return statement.iter
    if type(statement) is cst.Call:
        return statement.args[0].value
    return statement.value  # type: ignore[attr-defined]


def targets(statement: cst.CSTNode, items: bool = True) -> set[str]:
    """The names an assignment binds; with ``items``, ``seq`` for ``seq[i] = v`` too."""
    if type(statement) is cst.Call:  # `seq.append(v)`
        name = dotted(statement.func.value)  # type: ignore[attr-defined]
        return {name} if name is not None else set()
    assigned = [t.target for t in statement.targets] if type(statement) is cst.Assign else [statement.target]  # type: ignore[attr-defined]
    found: set[str] = set()
    for target in assigned:
        parts = [target]
        while any(type(part) in (cst.Tuple, cst.List) for part in parts):  # `(sem, coarse), (kv, embed) = ...`: each name
            parts = [e.value for part in parts for e in (part.elements if type(part) in (cst.Tuple, cst.List) else ())] \
                + [part for part in parts if type(part) not in (cst.Tuple, cst.List)]
        parts = [part.value if type(part) is cst.Subscript else part for part in parts if items or type(part) is not cst.Subscript]
        found.update(name for part in parts if (name := dotted(part)) is not None)
    return found


def derived(ordered: list[cst.CSTNode], seeds: set[str], rounds: int = 2) -> set[str]:
    """The names the loop's body makes from ``seeds``, through its assignments (twice round:
    a value carried to the next iteration; once: what this iteration makes of them)."""
    made = set(seeds)
    for _ in range(rounds):
        for statement in ordered:
            if mentions(_value(statement)) & made:
                made |= targets(statement) if type(statement) is not cst.AugAssign else {dotted(statement.target) or ""}  # type: ignore[attr-defined]
    return made


def grown_names(ctx: FileContext, loop: cst.CSTNode) -> set[str]:
    """The sequences ``loop``'s body grows in place on each pass (``tokens.append(tok)``,
    ``extend``, ``tokens[:, t] = tok``, ``tokens += [tok]``): not the same data twice."""
    nodes = list(ctx.loops.own_nodes(loop.body))  # type: ignore[attr-defined]
    names = {name for name, _ in grown_in_place(nodes)}
    names |= {name for n in nodes if type(n) is cst.AugAssign and (name := dotted(n.target)) is not None}
    return names - _made_afresh(loop)


def _made_afresh(loop: cst.CSTNode) -> set[str]:
    """Names the loop's body binds anew on every pass, from something else than themselves
    (``row = logits[0, -1]``, then ``row[order[cut:]] = -inf``): what an item write changes
    there is this pass's value, not a sequence carried from pass to pass."""
    body = loop.body  # type: ignore[attr-defined]
    found: set[str] = set()
    for statement in body.body if type(body) is cst.IndentedBlock else ():
        for small in statement.body if type(statement) is cst.SimpleStatementLine else ():
            if type(small) is cst.Assign and len(small.targets) == 1 and (name := dotted(small.targets[0].target)) is not None \
                    and name not in mentions(small.value):
                found.add(name)
    return found


def grown_in_place(nodes: list[cst.CSTNode]) -> list[tuple[str, cst.CSTNode]]:
    """Sequences the body grows in place: ``seq.append(v)``/``extend`` and ``tokens[:, t] = v``."""
    found: list[tuple[str, cst.CSTNode]] = []
    for node in nodes:
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("append", "extend") and node.args:
            name = dotted(node.func.value)
            if name is not None:
                found.append((name, node.args[0].value))
        elif type(node) is cst.Assign:
            for target in node.targets:
                if type(target.target) is cst.Subscript and (name := dotted(target.target.value)) is not None:
                    found.append((name, node.value))
    return found


def sampler_calls(nodes: list[cst.CSTNode]) -> list[cst.Call]:
    """The calls among ``nodes`` that sample a token (``torch.multinomial``, ``.argmax(-1)``...)."""
    return [n for n in nodes if type(n) is cst.Call and _sampler_name(n) in _SAMPLERS]


def _sampler_name(call: cst.Call) -> str:
    """The name a call samples by: a method of any expression too (``out.logits[:, -1].argmax(-1)``)."""
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else dotted(func) or ""


def used_as_logits(call: cst.Call, made: set[str], samplers: list[cst.Call]) -> bool:
    """Named logits or probabilities (``logits = ...``, ``self.inference.logits(...)``), or
    sampled from in the body (``torch.multinomial(probs)``, ``out.argmax(-1)``: ``samplers``,
    the body's calls of :data:`_SAMPLERS`)."""
    method = call.func.attr.value if type(call.func) is cst.Attribute else ""
    if any(word in name.rsplit(".", 1)[-1].lower() for name in (*made, method) for word in LOGIT_WORDS):
        return True
    return any(mentions(node) & made for node in samplers)


def _samples_inside(ctx: FileContext, call: cst.Call) -> bool:
    """Does ``call`` run a function of this file that samples from a model and returns the
    sample (``tok = self.sampler.next_token(seq)``, whose ``next_token`` runs ``self.net(seq)``
    and returns ``torch.multinomial(probs, 1)``)? Every ``def`` of the name must: a method
    name is all the call says of its class."""
    func = call.func
    name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
    functions = ctx.functions.all_named(name) if name else []
    return bool(functions) and all(_returns_a_sample(ctx, function) for function in functions)


def _picks_a_token(ctx: FileContext, call: cst.Call) -> bool:
    """Does ``call`` run a function of this file that returns a token it samples (every ``def``
    of the name: a method name is all the call says of its class)?"""
    func = call.func
    name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
    functions = ctx.functions.all_named(name) if name else []
    return bool(functions) and all(returns_a_token(ctx, function) for function in functions)


def _returns_a_sample(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """A model call in ``function`` whose output a sampler picks from, and a ``return`` of what
    was picked (not a ``forward``: a model's own loop over time steps runs within its step)."""
    if function.name.value in ("forward", "__call__") or type(function.body) is not cst.IndentedBlock:
        return False
    nodes = list(ctx.loops.own_nodes(function.body))
    ordered = sorted((n for n in nodes if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)), key=ctx.tree.index)
    samplers = sampler_calls(nodes)
    returns = [n for n in nodes if type(n) is cst.Return and n.value is not None]
    for call in (n for n in nodes if type(n) is cst.Call and may_run_a_model(ctx, n)):
        statement = assignment_of(ctx, call)
        if statement is None:
            continue
        made = derived(ordered, targets(statement)) | targets(statement)
        picked = {name for sampler in samplers if mentions(sampler) & made
                  for n in ordered if ctx.tree.is_inside(sampler, n) for name in targets(n)}
        if any(mentions(r.value) & picked or any(ctx.tree.is_inside(sampler, r) and mentions(sampler) & made for sampler in samplers)
               for r in returns):
            return True
    return False


def carried_inputs(call: cst.Call, ordered: list[cst.CSTNode], ctx: FileContext) -> set[str]:
    """What the call is given from the iteration before: the names its arguments read, and
    those they were made from earlier in the body (``idx_cond = idx[:, -block:]`` then
    ``model(idx_cond)``: ``idx``), less what the body sets before the call (``score =
    f(raw); order = argsort(score); score = score[order]`` feeds nothing forward)."""
    inputs = set().union(*(mentions(arg.value) for arg in call.args)) if call.args else set()
    start = ctx.tree.index(call)
    made_here: set[str] = set()
    for statement in reversed([s for s in ordered if ctx.tree.index(s) < start]):
        bound = targets(statement) if type(statement) is not cst.AugAssign else set()
        if bound & inputs:
            value = mentions(_value(statement))
            inputs |= value
            # `img = img_orig * mask + (1 - mask) * img` before the call still carries `img` forward
            made_here |= bound if ctx.tree.is_inside(call, statement) else bound - value
    return inputs - made_here


def generation_before(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode | None:
    """The decode loop (or ``.generate(...)`` call) of ``node``'s function that runs before it, with ``node`` in no loop of
    that function (FastChat's ``generate_stream``: the token loop, then ``torch.cuda.empty_cache()``
    at its end): ``node`` runs once per generation, however many tokens that decodes. None
    where there is no such loop, or ``node`` may repeat in a loop of its own."""
    function = ctx.tree.enclosing_function(node)
    if function is None:
        return None
    for ancestor in ctx.tree.ancestors(node):
        if ancestor is function:
            break
        if type(ancestor) in (cst.For, cst.While, cst.CompFor, cst.Lambda):
            return None  # (repeated by a loop of its own: the hot-loop analysis's case)
    at = ctx.tree.index(node)
    for loop in ctx.tree.own_loops(function):
        if ctx.tree.index(loop) >= at:
            break  # (in source order: the rest start after it)
        if not ctx.tree.is_inside(node, loop) and ctx.loops.decodes(loop):
            return loop
    # a library's generation (gorilla's `output_ids = model.generate(...)`, then `torch.cuda.empty_cache()`): the same
    # once per sequence (its calls in the function's own statements, not a nested scope's, a loop's or a lambda's)
    return next((call for call in ctx.loops.own_calls(function.body) if ctx.tree.index(call) < at and runs_generate(ctx, call)), None)


def runs_generate(ctx: FileContext, call: cst.Call) -> bool:
    """A call of ``.generate(...)``: a Hugging Face style model's (or fairseq's generator's) whole generation."""
    return ctx.method_name(call) == "generate"
