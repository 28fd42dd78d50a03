"""Where a node sits in its step: the loops that repeat it within the step (over decoded
tokens, beams, blocks, parameters, batch rows) and whether device work is queued after it.

The impact model (analysis/impact.py) weighs a device read by both: a read repeated within
a step, or one the rest of the step's kernels wait behind, costs more than one read at the
step's end, and a read right after a sync costs almost nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.loop_shapes import over_input_chunks, yields_each_pass
from torchlint.analysis.module_tensors import DICT_VIEWS, PER_TENSOR, tensors_method
from torchlint.analysis.multiplicity import ENV_STEP, GENERATION, INPUT_CHUNK, SEQUENTIAL, Repeat, Where
from torchlint.analysis.names import dotted, is_range
from torchlint.analysis.positions import plain_code
from torchlint.analysis.repeat_kinds import RepeatKinds
from torchlint.analysis.subtree_calls import INTO_LOOPS, OWN

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_BATCH_ROW_WORDS = ("batch", "bs", "bsz", "n_samples", "num_samples")
_DECODE_WORDS = ("len", "token", "step", "seq", "new", "gen", "frame", "sample")  # with a model call in the loop
_DECODE_BOUNDS = ("max_len", "max_length", "max_new_tokens", "new_tokens", "max_tokens", "max_seq_len", "gen_len", "num_tokens", "n_tokens", "max_decode", "decode_len")
# Loop variables and iterables that name what a loop goes over, most specific first.
_NAMED_KINDS = (("beam", "beam"), ("cand", "candidate"), ("hyp", "hypothesis"), ("topk", "candidate"), ("top_k", "candidate"),
                ("token", "token"), ("block", "block"), ("blk", "block"), ("layer", "layer"), ("head", "head"), ("stage", "stage"),
                ("node_type", "node type"), ("edge_type", "edge type"), ("relation", "relation"),
                ("param_group", "parameter group"), ("param", "parameter"),  # `for p in model_params`, fp16_util's master params
                ("metric", "metric"), ("losses", "metric"))  # `for k, v in metrics.items()`: a step's logged values


def _dict_values(iterable: cst.BaseExpression) -> bool:
    """``losses.items()``, ``losses.values()``: a dict's values, named (a loss dict, metrics)."""
    return type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and iterable.func.attr.value in ("items", "values") \
        and not iterable.args


class Places(RepeatKinds):
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
            if loop is stop or stop is not None and self.ctx.tree.is_inside(stop, loop):
                break  # (or the loop around it: PPO's iteration, whose own statements are placed on its epoch loop)
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
            # (a loop that draws a batch per iteration goes over batches, whatever its bound is named:
            # llm.c's `for _ in range(args.val_max_steps): x, y = val_loader.next_batch()`)
            if (any(word in bound for word in _DECODE_BOUNDS) or any(word in words for word in _DECODE_WORDS) and self._calls_a_model(loop)) \
                    and not self._draws_batches(loop) or self.ctx.loops.decodes(loop):
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
            if type(iterable) is cst.Call and dotted(iterable.func) == "zip" and len(iterable.args) > 1:
                # `for pred, target, length in zip(d, d_gt, input_lengths)`: tensors walked together by their first
                # dimension, the batch's (StyleTTS2's per-sample losses): one row of each per iteration
                copies = self._copies_only(loop)
                return Repeat("batch row", self._container_size(iterable, loop), copies=copies, models=not copies and not self._light(loop))
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
        # (or over an evaluation batch's rows, each image's id or prediction read for a host evaluator: detr's
        # `{target['image_id'].item(): output for target, output in zip(targets, results)}`)
        copies = kind in (None, "metric") and (_dict_values(iterable) or self._per_environment(iterable, loop) or self._handed_in(iterable, loop)
                                               or self._in_evaluation(loop)) \
            and self._copies_only(loop)
        return Repeat(kind or "iteration", self._container_size(iterable, loop), copies=copies, keywords=self._own_keywords(iterable, loop))

    def _in_evaluation(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` inside an evaluation loop of its function (over a loader's batches, under no_grad)?"""
        return any(type(outer) in (cst.For, cst.While) and self.ctx.loops.where(outer) is Where.EVAL
                   for outer in self.ctx.loops.enclosing_loops(loop) if outer is not loop)

    def step_unit(self, loop: cst.CSTNode) -> str:
        """What one iteration of hot ``loop`` is, for messages: "decoded token" for a decode
        loop, "denoising step" for a diffusion sampler's, "environment step" for an RL rollout's, "generated
        sequence" for a sampling loop whose pass runs a whole generation, else "step"."""
        loops = self.ctx.loops
        if loops.where(loop) is not Where.INFER:
            return "step"
        if self.repeat_of(loop).kind in ("decoded token", "denoising step", ENV_STEP):
            return self.repeat_of(loop).kind
        if loops.runs_generations(loop):
            # audiocraft's `while offset < total_len: ...; tokens = self.lm.generate(...)`: each pass a whole
            # generation (its tokens decoded inside), as the join's loop around a project function that decodes
            return GENERATION
        return "step"

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
