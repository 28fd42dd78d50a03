"""What a loop looks like on its own: its per-iteration parts, the names it binds, an epoch loop, a
count, a micro-batch slice; the node types a walk of a loop stops at. Shared by the ``Loops`` parts."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.kind_names import MODULE_CHAIN
from torchlint.analysis.names import dotted, is_range
from torchlint.analysis.tree import Tree, node_types

SCOPE_BARRIERS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
BARRIER_TYPES = node_types(*SCOPE_BARRIERS)
COMPREHENSION_TYPES = node_types(*COMPREHENSIONS)
NESTED_LOOP_OR_SCOPE = node_types(cst.For, cst.While, *SCOPE_BARRIERS, *COMPREHENSIONS)
# Wrappers that iterate what they wrap: for i, (x, y) in enumerate(tqdm(loader)).
ITER_WRAPPERS = {"enumerate", "zip", "tqdm", "iter", "trange", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "progress_bar", "track"}
SAMPLING = frozenset({"generate", "sample", "multinomial"})
# Receivers whose `.sample(n)` draws a batch of stored data, not a model's output (an RL replay
# buffer's `replay_buffer.sample(batch_size)`, CORL's: the loop trains on what it draws).
_STORES = ("buffer", "memory", "replay", "dataset", "storage", "sampler")


def model_sampling(methods_of: list[tuple[str | None, str]]) -> set[str]:
    """The sampling methods among ``(receiver, method)`` calls, leaving out a store's batch draws."""
    return {method for receiver, method in methods_of if method in SAMPLING
            and not (method == "sample" and any(word in (receiver or "").rsplit(".", 1)[-1].lower() for word in _STORES))}
BACKWARD, OPTIMIZER = 1, 2  # the parts of a training step a function runs


def body_children(loop: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The parts of a loop that run once per iteration."""
    if isinstance(loop, (cst.For, cst.While)):
        return (loop.body,) if isinstance(loop, cst.For) else (loop.body, loop.test)
    return ()


def slices_a_batch(loop: cst.CSTNode) -> bool:
    """``for i in range(0, batch.shape[0], micro)``: a range with a step, over one batch."""
    if type(loop) is not cst.For or type(loop.iter) is not cst.Call:
        return False
    func = loop.iter.func
    return type(func) is cst.Name and func.value == "range" and len(loop.iter.args) == 3


def over_input_chunks(tree: Tree, loop: cst.CSTNode) -> bool:
    """``for cur in range(0, num_frames, stride): chunk = xs[:, cur:end]``: a strided range whose
    variable starts a slice of a later axis, a chunk of an input's sequence (a streaming encoder's
    16+ frames) per iteration; not a token made by the iteration before it, nor rows of a batch
    (``x[i:i + mb]``, the first axis)."""
    if not slices_a_batch(loop):
        return False
    variable = loop.target.value if type(loop.target) is cst.Name else None  # type: ignore[attr-defined]
    for node in tree.descendants(loop.body):  # type: ignore[attr-defined]
        if type(node) is cst.Subscript and len(node.slice) > 1 and any(
                type(part.slice) is cst.Slice and type(part.slice.lower) is cst.Name and part.slice.lower.value == variable
                for part in node.slice[1:]):
            return True
    return False


def target_names(loop: cst.CSTNode) -> set[str]:
    """The names a loop binds each iteration (``net`` in ``for net in nets``,
    ``net, opt`` in ``for net, opt in zip(nets, opts)``, ``attn, ff`` in
    ``for i, (attn, ff) in enumerate(self.layers)``)."""
    target = loop.target if isinstance(loop, cst.For) else getattr(getattr(loop, "for_in", None), "target", None)
    parts, names = [target] if target is not None else [], set()
    while parts:
        part = parts.pop()
        if isinstance(part, (cst.Tuple, cst.List)):
            parts.extend(e.value for e in part.elements)  # nested unpacking binds each name inside
        elif dotted(part) is not None:
            names.add(dotted(part))
    return names


def constructs(value: cst.BaseExpression | None) -> bool:
    """``VAT(vit, dim=512)``, ``Net().cuda()``: a call of a class (a name written as one)."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    if type(value) is not cst.Call:
        return False
    name = dotted(value.func) or ""
    return name.rsplit(".", 1)[-1].lstrip("_")[:1].isupper()


def epoch_loop(loop: cst.CSTNode) -> bool:
    """``for epoch in range(...)`` (or ``tqdm(range(...))``), ``for i in range(epochs)``: a
    loop over epochs, not batches."""
    if type(loop) is not cst.For:
        return False
    named = any("epoch" in name.lower() for name in target_names(loop))
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted(iterable.func) in ("tqdm", "tqdm.tqdm", "trange", "enumerate") and iterable.args:
        if dotted(iterable.func) == "trange":
            return named or counts_epochs(iterable)
        iterable = iterable.args[0].value
    return isinstance(iterable, cst.Call) and dotted(iterable.func) == "range" and (named or counts_epochs(iterable))


# What a loop over a count may wrap the count in, by the name's last part: a progress bar (`tqdm(range(n),
# desc=...)`, rich's `track`), `enumerate`, or a pass-through (`reversed`, `list`); not tqdm's `trange`, a count itself.
_AROUND_A_COUNT = frozenset({"tqdm", "progress_bar", "track", "enumerate", "zip", "iter", "reversed", "list", "sorted", "tuple"})


def counted_range(iterable: cst.BaseExpression) -> cst.Call | None:
    """The ``range(...)`` (or ``trange(...)``) a loop goes over, inside the progress bars and wrappers
    around it (``tqdm(range(0, n), desc=...)``, ``enumerate(trange(n))``); None where it goes over anything else."""
    while type(iterable) is cst.Call and not is_range(iterable) and iterable.args \
            and (dotted(iterable.func) or "").rsplit(".", 1)[-1] in _AROUND_A_COUNT:
        iterable = iterable.args[0].value
    return iterable if is_range(iterable) else None  # type: ignore[return-value]


def counts_epochs(call: cst.Call) -> bool:
    """``range(epochs)``, ``range(start, args.num_epochs)``: its bounds count epochs."""
    return any(_names_epochs(dotted(arg.value)) for arg in call.args)


def _names_epochs(name: str | None) -> bool:
    """``num_epochs``, ``args.epochs``: a count of epochs; not ``num_updates_on_epoch`` or
    ``steps_per_epoch``, which count the steps inside one (CORL's inner update loop)."""
    last = (name or "").rsplit(".", 1)[-1].lower()
    return "epoch" in last and not any(word in last for word in ("step", "update", "iter", "batch"))


def over_a_count(loop: cst.CSTNode) -> bool:
    """``for i in range(...)`` (also ``enumerate(range(...))``): a loop over a count, not over
    batches or samples of some iterable."""
    if type(loop) is not cst.For:
        return False
    iterable = loop.iter
    if type(iterable) is cst.Call and dotted(iterable.func) == "enumerate" and iterable.args:
        iterable = iterable.args[0].value
    return is_range(iterable)


# Statements a yield may sit in and still run on every pass of its loop (not a branch, nor a nested loop).
_EVERY_PASS = (cst.SimpleStatementLine, cst.Expr, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.IndentedBlock,
               cst.With, cst.Try, cst.Yield)


def yields_each_pass(tree: Tree, loop: cst.CSTNode) -> bool:
    """``while True: ...; yield batch``: a generator's loop that gives one item per pass, so one
    pass runs per item its consumer takes (``next(cycle())`` takes one): no repetition of its own."""
    if type(loop) not in (cst.For, cst.While) or not tree.holds(loop.body, cst.Yield):
        return False
    for node in tree.descendants(loop.body):
        if type(node) is not cst.Yield:
            continue
        above = tree.parent(node)
        while above is not None and above is not loop.body and type(above) in _EVERY_PASS:
            above = tree.parent(above)
        if above is loop.body:
            return True
    return False
