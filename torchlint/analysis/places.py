"""Where a node sits in its step: the loops that repeat it within the step (over decoded
tokens, beams, blocks, parameters, batch rows) and whether device work is queued after it.

The impact model (analysis/impact.py) weighs a device read by both: a read repeated within
a step, or one the rest of the step's kernels wait behind, costs more than one read at the
step's end, and a read right after a sync costs almost nothing.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_elements import may_hold_values
from torchlint.analysis.host_consumers import environment_step
from torchlint.analysis.loop_shapes import over_input_chunks, yields_each_pass
from torchlint.analysis.members import CONTAINERS
from torchlint.analysis.module_tensors import DICT_VIEWS, PER_TENSOR, tensors_method
from torchlint.analysis.multiplicity import ENV_STEP, FEW_ITEMS, INPUT_CHUNK, SEQUENTIAL, Repeat, Where
from torchlint.analysis.names import dotted, is_range
from torchlint.analysis.positions import plain_code
from torchlint.analysis.step_position import StepPositions
from torchlint.analysis.step_syncs import read_value
from torchlint.analysis.subtree_calls import IN_SCOPE, INTO_LOOPS, OWN

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_FEW = FEW_ITEMS  # a loop over at most this many fixed items (the splits of a dataset) is "a few"
# What a loop whose reads after the first are copies (``Repeat.copies``) may call besides reads and
# host work: views, and copies the host waits for. Only a range over rows, or a loop over a dict's
# values (a loss dict's, read for the log), is asked (`_repeat`): not a loop over parameters, elements
# of a device tensor, tokens or blocks, of which there may be thousands, nor one over items whose
# values it cannot see (``out[mask].cpu()`` per split).
_VIEWS_AND_COPIES = frozenset({"unsqueeze", "squeeze", "view", "transpose", "permute", "expand", "narrow", "select", "detach",
                               "to", "cuda", "cpu", "size", "dim", "numel"})
_HOST_TENSORS = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})  # made on the host (a copy when moved)
_BATCH_ROW_WORDS = ("batch", "bs", "bsz", "n_samples", "num_samples")
_DECODE_WORDS = ("len", "token", "step", "seq", "new", "gen", "frame", "sample")  # with a model call in the loop
_DECODE_BOUNDS = ("max_len", "max_length", "max_new_tokens", "new_tokens", "max_tokens", "max_seq_len", "gen_len", "num_tokens", "n_tokens", "max_decode", "decode_len")
# Loop variables and iterables that name what a loop goes over, most specific first.
_NAMED_KINDS = (("beam", "beam"), ("cand", "candidate"), ("hyp", "hypothesis"), ("topk", "candidate"), ("top_k", "candidate"),
                ("token", "token"), ("block", "block"), ("blk", "block"), ("layer", "layer"), ("head", "head"), ("stage", "stage"),
                ("node_type", "node type"), ("edge_type", "edge type"), ("relation", "relation"),
                ("param_group", "parameter group"), ("param", "parameter"),  # `for p in model_params`, fp16_util's master params
                ("metric", "metric"), ("losses", "metric"))  # `for k, v in metrics.items()`: a step's logged values


_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


def _dict_values(iterable: cst.BaseExpression) -> bool:
    """``losses.items()``, ``losses.values()``: a dict's values, named (a loss dict, metrics)."""
    return type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and iterable.func.attr.value in ("items", "values") \
        and not iterable.args

class Places(StepPositions):
    """The multiplicity and position facts of one file (``ctx.places``); where in the step:
    :class:`~torchlint.analysis.step_position.StepPositions`."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        # Every finding of a function asks about the statements after and before it: each
        # statement's calls, and whether it queues device work, are found once per file
        # (a scan per finding was quadratic in the function's length).
        self._queues_work: dict[tuple[int, int], bool] = {}
        self._block_positions: dict[int, dict[int, int]] = {}
        self._chains: dict[tuple[int, int], tuple[tuple[cst.CSTNode, int], ...]] = {}  # (statement, stop) -> the levels around it
        # A block's first statement that queues device work, and its last one per stop: the
        # statements before or after one are a block's prefix or suffix, level by level. Each
        # is (its position, or -1 while not found, how far the scan has gone): a question
        # scans only as far as it asks, from the block's start or end, and the next goes on.
        self._first_work: dict[int, tuple[int, int]] = {}
        self._last_work: dict[tuple[int, int], tuple[int, int]] = {}
        # Every read or call site after a statement asks of its calls, in the order Python
        # finishes them, until one drains the queue or may queue work: each answer found once.
        self._drained: dict[tuple[int, str | None], bool] = {}
        self._quiet_calls: dict[int, bool] = {}
        self._call_facts: dict[tuple[int, str], bool] = {}  # (id of a call, "queue" or "device") -> its answer
        # Whether a statement runs a generation, or calls a function of this file that decodes:
        # asked by every read before or after it in its function.
        self._generations: dict[int, bool] = {}
        self._decoder_calls: dict[int, bool] = {}
        self._token_statements: dict[int, bool] = {}  # whether a statement holds a token read (asked by each read before it)
        self._update_loops: dict[int, cst.CSTNode] = {}  # id of a hot loop -> update_loop's answer (asked per read in it)
        self._repeat_of: dict[int, Repeat] = {}  # id of a loop -> what it goes over

    # --- how many times per step ----------------------------------------------------
    def repeats(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> tuple[tuple[str, Repeat], ...]:
        """The loops around ``node`` inside ``stop`` (the hot loop, else the function),
        outermost first, each with its key (``Loops.loop_key``; "" for a comprehension)."""
        loops = self.ctx.loops
        found = []
        for loop in loops.enclosing_loops(node):
            if loop is stop:
                break
            repeat = self.repeat_of(loop)
            if repeat.count == 1:
                continue  # `for _, mask in data('test_mask')`, `for x in (batch,)`: it runs once, it multiplies nothing
            if repeat.kind not in SEQUENTIAL and (yields_each_pass(self.ctx.tree, loop) or self._first_item_only(loop)):
                # a generator's `while True: ...; yield batch` runs one pass per item its consumer takes, and
                # `next(x for x in xs if ...)` runs until its first: the consumer's loop counts the items
                # (a decode or rollout loop that yields its tokens keeps its own)
                continue
            key = loops.loop_key(loop) if type(loop) in (cst.For, cst.While) else ""
            found.append((key, repeat))
        return tuple(reversed(found))

    def _first_item_only(self, loop: cst.CSTNode) -> bool:
        """``next(p for p in params if p.grad is not None)``: a generator expression given to ``next``."""
        parent = self.ctx.tree.parent(loop)
        if type(loop) is not cst.GeneratorExp or type(parent) is not cst.Arg:
            return False
        call = self.ctx.tree.parent(parent)
        return type(call) is cst.Call and dotted(call.func) == "next" and call.args[0] is parent

    def repeat_of(self, loop: cst.CSTNode) -> Repeat:
        """What a loop goes over, and how many times when the code says."""
        # Asked of each loop around every call the summary places and every finding: once per loop.
        known = self._repeat_of.get(id(loop))
        if known is None:
            known = self._repeat_of[id(loop)] = self._repeat(loop)
        return known

    def _repeat(self, loop: cst.CSTNode) -> Repeat:
        if type(loop) in (cst.For, cst.While) and self._accumulates(loop):
            # `for pass_idx in range(num_passes): ...; loss.backward()` inside the step that updates:
            # each iteration is a forward and backward of part of the step's batch, whatever its bound is named
            return Repeat("micro-batch", self._range_count(loop.iter) if type(loop) is cst.For else None)  # type: ignore[attr-defined]
        if type(loop) in (cst.For, cst.While) and self._steps_an_environment(loop):
            # an RL rollout (`for step in range(num_steps): ... envs.step(action)`): each iteration feeds the
            # next as a decoder's token does, but what it makes is an environment step, not a token
            return Repeat(ENV_STEP, self._range_count(loop.iter) if type(loop) is cst.For else None)  # type: ignore[attr-defined]
        if type(loop) is cst.While:
            # (a `while True:` that draws its own batches, `batch = next(dataloader_iter, None)`, goes over batches, whatever
            # model it runs: open_clip's FSDP evaluation)
            tokens = self.ctx.loops.decodes(loop) or self._calls_a_model(loop) and not self._draws_batches(loop)
            return Repeat("decoded token" if tokens else "iteration")
        comp_for = loop if type(loop) is cst.For else loop.for_in  # a comprehension's first `for`
        iterable, target = comp_for.iter, comp_for.target
        names = " ".join(filter(None, (dotted(e) for e in _parts(target)))).lower()
        code = plain_code(self.ctx.module, iterable).lower()
        if tensors_method(iterable, views=DICT_VIEWS, wrappers=PER_TENSOR) is not None:
            return Repeat("parameter")
        if "topk(" in code or "argsort(" in code:
            # `for logprob, token in zip(*logprobs.topk(k))`: the k best, whatever they are named (not `for k in topk`,
            # an accuracy's few cut-offs: a parameter of a few values, `_few_items`)
            return Repeat("candidate")
        count = self._range_count(iterable)
        if self.ctx.loops.denoises(loop):
            return Repeat("denoising step", count)  # before the words: `range(num_sample_steps)` decodes no token
        if is_range(iterable):
            bound = self._bound_code(iterable.args[-1 if len(iterable.args) < 3 else 1].value)
            if any(word in names for word in ("beam", "cand", "hyp")):
                return Repeat(_named_kind(names) or "iteration", count)
            if ".size(0)" in bound or ".shape[0]" in bound or "len(" in bound and "batch" in bound or any(word in bound for word in _BATCH_ROW_WORDS):
                copies = self._copies_only(loop)
                return Repeat("batch row", count, copies=copies, models=not copies and not self._light(loop))
            # (`len(x)` is a count, not a sequence length: `range(len(d_en))` decodes nothing by its name)
            words = bound.replace("len(", "(")
            if any(word in bound for word in _DECODE_BOUNDS) or any(word in words for word in _DECODE_WORDS) and self._calls_a_model(loop) \
                    or self.ctx.loops.decodes(loop):
                return Repeat("decoded token", count)
            if over_input_chunks(self.ctx.tree, loop):
                return Repeat(INPUT_CHUNK, count)  # a streaming encoder's chunks of frames, not tokens it made
            if self._indexes_top_k(loop, names):
                return Repeat("candidate", count)  # `for j in range(beam): ids[0, j]` of `torch.topk(...)`: the k best
            kind = _named_kind(names + " " + bound)
            if kind is None:  # `for bib in range(len(mel_input_length))`: rows, most often
                return Repeat("iteration", count, copies=self._copies_only(loop))
            return Repeat("decoded token" if kind == "token" else kind, count)  # `range(max_returned_tokens - n)`
        kind = self._decoded(_named_kind(names), loop)
        if kind is None and self._over_device_tensor(iterable, loop):
            kind = "element"  # `for w in words` on a device tensor, `for x in hyp["yseq"][0]`: one 0-d device tensor per element
        kind = kind or self._decoded(_named_kind(code), loop)
        if kind is None and type(iterable) is cst.Attribute and dotted(iterable.value) == "self":
            kind = "member"
        few = self._few_items(iterable, loop)
        if few is not None:
            return Repeat(kind or "iteration", few, few=self._light(loop))
        # (a loop or comprehension over a dict's values that only reads them, `{k: v.item() for k, v in
        # losses.items()}`: after the first read, each waits only for its own copy)
        # (or over what an environment's step returned, one item per environment, `for idx, d in enumerate(done)`:
        # a batch's rows, each episode's end logged with a read after the first one's copy)
        # (or over a list or dict its function is handed, `[float(v) for v in values]` with `values: list`: a caller's metrics)
        copies = kind in (None, "metric") and (_dict_values(iterable) or self._per_environment(iterable, loop) or self._handed_in(iterable, loop)) \
            and self._copies_only(loop)
        return Repeat(kind or "iteration", self._container_size(iterable, loop), copies=copies)

    def _handed_in(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``iterable`` a parameter of the function around ``at`` annotated as a container
        (``values: list``; a bare ``padded`` may be a batch tensor, its rows each a wait)?"""
        bound = self.ctx.bindings.reaching(iterable.value, at) if type(iterable) is cst.Name else None
        return bound is not None and bound.kind == "param" and type(bound.node) is cst.Param and bound.node.annotation is not None \
            and may_hold_values(bound.node)

    def _per_environment(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``iterable`` (through ``enumerate``/``zip``) a name bound by the last assignment before
        ``at`` to what an environment's step returned (``next_obs, reward, done, info = envs.step(a)``)?"""
        while type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("enumerate", "zip") and iterable.args:
            iterable = iterable.args[0].value
        if type(iterable) is not cst.Name:
            return False
        bound = self.ctx.bindings.reaching(iterable.value, at)
        return bound is not None and bound.kind == "assign" and environment_step(bound.value)

    def _few_items(self, iterable: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> int | None:
        """How many items a loop over a few fixed ones goes over: a literal list, tuple or set
        (``[data.train_mask, data.val_mask, data.test_mask]``), a dict literal's keys, values or
        items (``y_true = {'train': [], 'valid': [], 'test': []}``), a name bound once to one, through
        ``enumerate``/``zip``, or an object called with the keys it yields (PyG's ``data('train_mask',
        'val_mask')``; one key, ``data('test_mask')``, yields one pair: the loop runs once); None for
        anything else or more than ``_FEW`` items."""
        if depth > 3:
            return None
        node_type = type(iterable)
        if node_type is cst.Call:
            func = iterable.func
            if type(func) is cst.Name and func.value in ("enumerate", "zip", "list", "sorted", "reversed") and iterable.args and self.ctx.qname(func) is None:
                return self._few_items(iterable.args[0].value, at, depth + 1)
            if type(func) is cst.Attribute and func.attr.value in ("keys", "values", "items") and not iterable.args:
                return self._few_items(func.value, at, depth + 1)
            if 1 <= len(iterable.args) <= _FEW and all(type(a.value) is cst.SimpleString and a.keyword is None and not a.star for a in iterable.args) \
                    and self.ctx.qname(func) is None:
                return len(iterable.args)  # PyG's `data('train_mask', 'val_mask', 'test_mask')`: one (key, value) per key
            return None
        if node_type in (cst.List, cst.Tuple, cst.Set, cst.Dict):
            elements = iterable.elements
            if any(type(e) in (cst.StarredElement, cst.StarredDictElement) for e in elements):
                return None
            return len(elements) if 0 < len(elements) <= _FEW else None
        if node_type is cst.Name:
            bound = self.ctx.bindings.lookup(iterable.value, at)
            # (a parameter defaulted to a few values, `def accuracy(output, target, topk=(1, 5))`: its callers pass
            # cut-offs of the same kind; the loop runs a few times per call)
            if len(bound) == 1 and bound[0].kind in ("assign", "param") and bound[0].element is None and bound[0].value is not None:
                return self._few_items(bound[0].value, bound[0].node, depth + 1)
        return None

    def _light(self, loop: cst.CSTNode) -> bool:
        """Does the loop's body queue only small tensor ops: no model, no backward or
        optimizer step, no helper of the project whose own work is unknown here?"""
        loops = self.ctx.loops
        return not any(loops.is_step_call(n) or loops._calls_a_trainer(n) or self._maybe_a_model(n) or self._runs_a_helper(n)
                       for n in loops.loop_calls(loop))

    def _copies_only(self, loop: cst.CSTNode) -> bool:
        """Does the loop's body queue nothing a read in it would wait for, but its own copy: only
        reads, views, host work and uploads (``int(lengths[i].item() / 2)``, ``np.random.randint``,
        ``clips.append(x[i, :, a:b])``, ``torch.from_numpy(y).to(device)``; a fill by assignment,
        ``trg[i, :n] = 1``, is one tiny kernel)? No op of its own that the next read must wait for
        (``torch.median(d)`` before a mask's read, ``torch.cat(...)``, ``x[i] * 2``), no model, no
        unknown call."""
        # Asked of each loop once (``repeat_of`` is memoised): a scan of its calls.
        if type(loop) in _COMPREHENSIONS:  # its element (and key) is its body: `{k: v.item() for k, v in losses.items()}`
            parts = (loop.key, loop.value) if type(loop) is cst.DictComp else (loop.elt,)  # type: ignore[attr-defined]
            calls = [call for part in parts for call in self.ctx.loops.own_calls(part, IN_SCOPE)]
            return all(self._quiet(call) or read_value(self.ctx, call) is not None or self._copy_or_view(call) or self._asks_the_host(call)
                       for call in calls) \
                and not any(self.device_operators(part) or self._unread_operands(part) for part in parts)
        if type(loop) is not cst.For:
            return False
        return all(self._quiet(call) or read_value(self.ctx, call) is not None or self._copy_or_view(call)
                   for call in self.ctx.loops.loop_calls(loop)) and not self.device_operators(loop)

    def _unread_operands(self, part: cst.CSTNode) -> bool:
        """Does an operator in ``part`` take anything but values read to the host and host values
        (``(v * 2).item()`` queues a kernel on each item, whatever ``v`` is; ``v.item() / n`` does not)?"""
        ctx = self.ctx
        for node in ctx.tree.descendants(part):
            if type(node) is cst.BinaryOperation and not all(
                    read_value(ctx, side) is not None or ctx.values.python_value(side, node)
                    or type(side) is cst.Call and self._asks_the_host(side) for side in (node.left, node.right)):
                return True
        return False

    def _asks_the_host(self, call: cst.Call) -> bool:
        """A call of another module's function given nothing (dinov2's ``distributed.get_global_size()``
        dividing each loss read): given no tensor, it has none to queue work on."""
        qualified = self.ctx.qname(call.func)
        return not call.args and qualified is not None and not qualified.startswith("torch.")

    def _copy_or_view(self, call: cst.Call) -> bool:
        """``x.unsqueeze(0)``, ``t.detach()``, ``y.to(device)``, ``torch.from_numpy(a)``: a view, or a copy the host waits for."""
        qualified = self.ctx.qname(call.func)
        if qualified is not None:
            return qualified in _HOST_TENSORS
        return type(call.func) is cst.Attribute and call.func.attr.value in _VIEWS_AND_COPIES

    def _indexes_top_k(self, loop: cst.CSTNode, index: str) -> bool:
        """Does ``loop``'s body index the result of a ``topk`` with its variable
        (``local_best_ids[0, j]`` after ``scores, ids = torch.topk(logp, beam)``)?"""
        ctx = self.ctx
        if type(loop) is not cst.For or not index:
            return False
        for node in ctx.loops.own_nodes(loop.body):
            if type(node) is not cst.Subscript or type(node.value) is not cst.Name or not any(
                    type(e.slice) is cst.Index and dotted(e.slice.value) == index for e in node.slice):
                continue
            bound = ctx.bindings.reaching(node.value.value, node)
            value = bound.value if bound is not None and bound.kind == "assign" else None
            if type(value) is cst.Call and ((ctx.qname(value.func) or "") == "torch.topk" or ctx.method_name(value) == "topk"):
                return True
        return False

    def _over_device_tensor(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``words``, ``enumerate(words)``, ``zip(words, ...)``, ``seq[0, 1:]`` with ``words``,
        ``seq`` a device tensor."""
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("enumerate", "zip") and iterable.args:
            iterable = iterable.args[0].value
        return type(iterable) in (cst.Name, cst.Attribute, cst.Subscript) and self.ctx.syncs.device_tensor(iterable, at)

    def _draws_batches(self, loop: cst.While) -> bool:
        """Does the loop's body draw from an iterator with the builtin ``next(...)`` (a loader's batches)?"""
        return any(type(call.func) is cst.Name and call.func.value == "next" and self.ctx.qname(call.func) is None
                   for call in self.ctx.loops.loop_calls(loop))

    def _steps_an_environment(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (not a loop nested in it, but its comprehensions: dreamerv3's
        ``results = [e.step(a) for e, a in zip(envs, action)]``) step an environment (``envs.step(action)``)?"""
        loops, tree = self.ctx.loops, self.ctx.tree
        return any(environment_step(call, tree) and next((each for each in loops.enclosing_loops(call) if type(each) in (cst.For, cst.While)), None) is loop
                   for call in loops.own_calls(loop.body, IN_SCOPE))  # type: ignore[attr-defined]

    def _decoded(self, kind: str | None, loop: cst.CSTNode) -> str | None:
        """A loop over tokens (not a range of them) decodes them only when it runs a model:
        ``for token in tokens`` inside a decode step goes over that step's tokens (one per sequence)."""
        if type(loop) is cst.For and (kind == "token" and self._calls_a_model(loop) or self.ctx.loops.decodes(loop)):
            return "decoded token"
        return kind

    def _bound_code(self, bound: cst.BaseExpression) -> str:
        """A range's bound as code, with what a local name was set to once (``n_audio =
        tokens.shape[0] // beam_size``: the batch's rows)."""
        code = plain_code(self.ctx.module, bound).lower()
        if type(bound) is cst.Name:
            bindings = self.ctx.bindings.lookup(bound.value, bound)
            value = getattr(bindings[0], "value", None) if len(bindings) == 1 and bindings[0].kind == "assign" else None
            if value is not None:
                code += " " + plain_code(self.ctx.module, value).lower()
        return code

    def step_unit(self, loop: cst.CSTNode) -> str:
        """What one iteration of hot ``loop`` is, for messages: "decoded token" for a decode
        loop, "denoising step" for a diffusion sampler's, "environment step" for an RL rollout's, else "step"."""
        if self.ctx.loops.where(loop) is Where.INFER and self.repeat_of(loop).kind in ("decoded token", "denoising step", ENV_STEP):
            return self.repeat_of(loop).kind
        return "step"

    def _range_count(self, iterable: cst.BaseExpression) -> int | None:
        if not is_range(iterable) or len(iterable.args) != 1:
            return None
        count = self.ctx.constants.int_value(iterable.args[0].value, iterable)
        return count if count is not None and count > 0 else None

    def _container_size(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> int | None:
        members = self._members(iterable, at)
        return members[1] if members is not None else None

    def _members(self, container: cst.BaseExpression, at: cst.CSTNode) -> tuple[bool, int | None, str] | None:
        """``self.blocks`` built as ``nn.ModuleList([Block() for _ in range(12)])`` (the same
        class N times: True) or of a literal list (``[A(), B()]``: several classes, False),
        how many members when the code says, and the container's class name."""
        name = dotted(container)
        cls = self.ctx.tree.enclosing_class(at)
        if name is None or not name.startswith("self.") or cls is None:
            return None
        assign = self._first_assignments.get((id(cls), name))
        if assign is not None:
            value = assign.value
            if type(value) is cst.List and not value.elements:  # `self.filters = []`, then one `append` per kind
                return self._appended_kinds(name, cls)
            qualified = self.ctx.qname(value.func) if type(value) is cst.Call else None
            if qualified not in CONTAINERS or len(value.args) != 1:
                return None
            members = value.args[0].value
            if type(members) in (cst.List, cst.Tuple) and not any(type(e) is cst.StarredElement for e in members.elements):
                size = len(members.elements) if not self._grown(name, cls) else None  # `.append(...)` later: more than the literal
                return len(members.elements) < 2, size or None, qualified
            if type(members) is cst.ListComp and type(members.for_in.iter) is cst.Call and members.for_in.inner_for_in is None:
                return True, self._range_count(members.for_in.iter), qualified
            if value.args[0].star == "*" and type(members) is cst.Name:  # `nn.Sequential(*layers)`, `layers` filled in a loop
                count = self._filled_in_a_loop(members, assign)
                return (True, count[0], qualified) if count is not None else None
            return None
        return None

    def _filled_in_a_loop(self, name: cst.Name, at: cst.CSTNode) -> tuple[int | None] | None:
        """``layers = []`` then ``for _ in range(k): layers.append(ActNorm(c)); layers.append(InvConv(c))``:
        each class it holds is there once per iteration of one loop; (that loop's count, when
        the code says), else None."""
        binding = self.ctx.bindings.reaching(name.value, at)
        if binding is None or binding.kind != "assign" or type(binding.value) is not cst.List or binding.value.elements:
            return None
        scope = self.ctx.tree.scope_of(at)
        appends = [call for call in self.ctx.method_calls(("append", "extend", "insert"))
                   if dotted(call.func.value) == name.value and self.ctx.tree.scope_of(call) is scope]  # type: ignore[attr-defined]
        loops = {id(loop): loop for call in appends for loop in [next(iter(self.ctx.loops.enclosing_loops(call)), None)]}
        if not appends or len(loops) != 1 or None in loops or any(self.ctx.method_name(call) != "append" for call in appends):
            return None
        loop = next(iter(loops.values()))
        if type(loop) is not cst.For or self.ctx.tree.is_inside(binding.node, loop) or self.ctx.tree.is_inside(at, loop):
            return None
        tree = self.ctx.tree
        if any(type(a) in (cst.If, cst.IfExp, cst.Try) for call in appends for a in tree.ancestors(call) if tree.is_inside(a, loop) and a is not loop):
            return None  # timm's EdgeNeXt: `if i < depth - num_global_blocks: ConvBlock else: SplitTransposeBlock`, some iterations each
        return (self._range_count(loop.iter),)

    @cached_property
    def _first_assignments(self) -> dict[tuple[int, str], cst.Assign]:
        """(id of a class, ``self.x``) -> the first ``self.x = ...`` in the class: one pass
        over the assignments, not one per container a loop goes over."""
        found: dict[tuple[int, str], cst.Assign] = {}
        tree = self.ctx.tree
        for assign in tree.nodes(cst.Assign):
            if len(assign.targets) != 1:
                continue
            name = dotted(assign.targets[0].target)
            if name is None or not name.startswith("self."):
                continue
            cls = tree.enclosing_class(assign)
            if cls is not None:
                found.setdefault((id(cls), name), assign)
        return found

    def _appended_kinds(self, name: str, cls: cst.ClassDef) -> tuple[bool, int | None, str] | None:
        """A list filled by appends in ``cls``, each of a different class written there
        (whisper's ``self.logit_filters.append(SuppressBlank(...))``, ``SuppressTokens(...)``, ...,
        none in a loop): several classes, each member's method run once per pass. None otherwise."""
        tree, names = self.ctx.tree, []
        for call in self.ctx.method_calls(("append", "extend", "insert")):
            if type(call.func) is not cst.Attribute or dotted(call.func.value) != name or tree.enclosing_class(call) is not cls:
                continue
            value = call.args[-1].value if call.args and call.func.attr.value == "append" else None
            made = dotted(value.func) if type(value) is cst.Call else None
            if made is None or not made.rsplit(".", 1)[-1][:1].isupper() or self.ctx.loops.enclosing_loops(call):
                return None  # something else, or appended in a loop: maybe several of one class
            names.append(made)
        return (False, None, "list") if len(names) >= 2 and len(set(names)) == len(names) else None

    def _grown(self, name: str, cls: cst.ClassDef) -> bool:
        """Is the container ``self.<name>`` appended to in ``cls`` (``self.input_blocks.append(...)``)?"""
        tree = self.ctx.tree
        return any(type(call.func) is cst.Attribute and dotted(call.func.value) == name and tree.enclosing_class(call) is cls
                   for call in self.ctx.method_calls(("append", "extend", "insert")))

    def call_repeats(self, call: cst.Call, stop: cst.CSTNode | None) -> tuple[tuple[str, Repeat], ...]:
        """The loops around ``call`` that run its callee again each time: a loop over a
        container of several classes (``[A(), B()]``) runs each member's ``forward`` once, and
        each member's method (whisper's ``for logit_filter in self.logit_filters:
        logit_filter.apply(logits, tokens)``, one filter of each class), and calling an
        ``nn.Sequential`` of N blocks runs the block's ``forward`` N times."""
        found = self.repeats(call, stop)
        func = call.func
        loop = next(iter(self.ctx.loops.enclosing_loops(call)), None)
        receiver = func.value if type(func) is cst.Attribute and type(func.value) is cst.Name else func
        if found and type(loop) is cst.For and type(receiver) is cst.Name and receiver.value in {dotted(e) for e in _parts(loop.target)}:
            members = self._members(loop.iter, call)
            if members is not None and not members[0]:
                found = found[:-1]  # `for layer in self.layers: x = layer(x)`, each layer its own class
        if type(func) is cst.Attribute:
            members = self._members(func, call)
            if members is not None and members[0] and members[2] == "torch.nn.Sequential":
                name = func.attr.value.lower()
                found = (*found, ("", Repeat(_named_kind(name) or "member", members[1])))
        return found

    def _calls_a_model(self, loop: cst.CSTNode) -> bool:
        loops = self.ctx.loops
        return any(loops.is_step_call(n) for n in loops.loop_calls(loop))

    def update_loop(self, loop: cst.CSTNode) -> cst.CSTNode:
        """The loop whose iteration is the step around hot ``loop``: ``loop`` itself, or,
        for gradient accumulation (``for _ in range(accum): loss.backward()`` with the
        optimizer's ``step()`` after it in an outer loop), the loop that updates: the
        micro-batches repeat within its step."""
        known = self._update_loops.get(id(loop))
        if known is None:
            known = self._update_loops[id(loop)] = self._update_loop(loop)
        return known

    def _update_loop(self, loop: cst.CSTNode) -> cst.CSTNode:
        loops = self.ctx.loops
        if self._updates(loop, INTO_LOOPS) or not self._backward(loop):
            return loop  # it steps itself, or it is no training loop (an evaluation's)
        for outer in loops.enclosing_loops(loop):
            if type(outer) in (cst.For, cst.While) and self._updates(outer, OWN):
                return outer  # its own body steps, after the micro-batches
        return loop

    def _updates(self, loop: cst.CSTNode, stops: frozenset[type]) -> bool:
        loops = self.ctx.loops
        return any(self.ctx.method_name(n) == "step" and loops.is_step_call(n) for n in loops.own_calls(loop, stops))

    def _accumulates(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` run a backward (in it, or in a loop inside) and no optimizer step: a loop
        of micro-batches within the step that updates?"""
        loops = self.ctx.loops
        calls = loops.own_calls(loop, INTO_LOOPS)
        return any(self.ctx.method_name(n) == "backward" for n in calls) and not self._updates(loop, INTO_LOOPS)

    def _backward(self, loop: cst.CSTNode) -> bool:
        return any(self.ctx.method_name(n) == "backward" for n in self.ctx.loops.own_calls(loop))



def _parts(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(target) in (cst.Tuple, cst.List):
        return [p for e in target.elements for p in _parts(e.value)]
    return [target]


def _named_kind(text: str) -> str | None:
    return next((kind for word, kind in _NAMED_KINDS if word in text), None)
