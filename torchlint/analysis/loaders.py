"""DataLoader constructor facts shared by the data-loading rules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_shapes import is_main_guard
from torchlint.analysis.in_memory_datasets import in_memory_dataset, moved_to_device
from torchlint.analysis.kinds import Kind
from torchlint.analysis.loader_bases import DATALOADER
from torchlint.analysis.loader_classes import POSITIONS, local_loader_class, sets_itself
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_TENSOR_DATASETS = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset")
UNKNOWN = object()  # a splat could supply the option: the user's choice, stay silent


def loader_option(ctx: FileContext, call: cst.Call, option: str) -> cst.Arg | None | object:
    """The argument giving ``option`` to a ``DataLoader(...)`` call (or a subclass's), None
    when it is not passed, or UNKNOWN when ``*args``/``**kwargs`` may pass it, or the
    subclass sets it itself or takes arguments in an order of its own."""
    if ctx.has_star_kwargs(call) or any(arg.star == "*" for arg in call.args):
        return UNKNOWN
    if ctx.qname(call.func) == DATALOADER:
        return ctx.argument(call, POSITIONS[option], option)
    subclass = local_loader_class(ctx, call)
    if subclass is not None and sets_itself(ctx, subclass, option):
        return UNKNOWN  # `super().__init__(ds, pin_memory=True, **kwargs)`: the class decides
    if option != "dataset" and sum(1 for arg in call.args if arg.keyword is None) > 1:
        return UNKNOWN  # positions of the subclass's own `__init__`
    return ctx.argument(call, 0, option) if option == "dataset" else ctx.keyword(call, option)


def is_dataloader(ctx: FileContext, call: cst.Call) -> bool:
    """``DataLoader(...)``, or a construction of a ``DataLoader`` subclass of this file."""
    return ctx.qname(call.func) == DATALOADER or local_loader_class(ctx, call) is not None


# PyG's loaders: `DataLoader` subclasses that collate each batch of graphs into one `Batch` in the
# process that iterates them (`num_workers` through their `**kwargs`, 0 by default).
GRAPH_LOADERS = frozenset({"torch_geometric.loader.DataLoader", "torch_geometric.data.DataLoader"})


def is_graph_loader(ctx: FileContext, call: cst.Call) -> bool:
    """``torch_geometric.loader.DataLoader(...)`` (or its older ``torch_geometric.data`` name)."""
    return ctx.qname(call.func) in GRAPH_LOADERS


def prebatched(ctx: FileContext, call: cst.Call) -> bool:
    """``DataLoader(ds, batch_size=None)``: automatic batching off, each item the dataset
    yields is a whole batch (a stream of batches, or a sampler of batches over arrays it
    holds): one call per step, and no per-sample collation."""
    size = loader_option(ctx, call, "batch_size")
    return isinstance(size, cst.Arg) and type(size.value) is cst.Name and size.value.value == "None"


def tensor_dataset(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    """The ``TensorDataset(...)`` call that built the loader's dataset, when known (the
    first of them, when the name is bound to one in each branch)."""
    dataset = ctx.argument(call, 0, "dataset")
    built = ctx.values.constructors(dataset.value, call) if dataset is not None else []
    if built and all(ctx.qname(b.func) in _TENSOR_DATASETS for b in built):
        return built[0]
    return None


def no_work_for_workers(ctx: FileContext, call: cst.Call) -> str | None:
    """Why worker processes (and pinned memory) would not help this ``DataLoader``: its
    items are tensors or indices already in memory, or come back on the device (workers
    would start CUDA in forked processes, pinning would raise); None when they may help."""
    dataset = ctx.argument(call, 0, "dataset")
    if dataset is not None and _indices(ctx, dataset.value, call):
        return "indices"  # `DataLoader(range(n))`: batches of indices into data held elsewhere
    if dataset is not None and ctx.values.kind(dataset.value, call) is Kind.TENSOR:
        return "a tensor"
    if tensor_dataset(ctx, call) is not None:
        return "tensors"
    held = in_memory_dataset(ctx, call)
    if held is not None:
        return held
    collate = loader_option(ctx, call, "collate_fn")
    if isinstance(collate, cst.Arg) and _returns_device_batches(ctx, collate.value):
        return "device"
    return None


_INDEX_FACTORIES = frozenset({"range", "torch.arange", "numpy.arange", "torch.randperm", "numpy.random.permutation"})


# Methods whose result is the indices of a tensor's entries (`mask.nonzero()`), and those that
# keep a tensor of indices one (`.view(-1)`, one rank's `.split(n)[rank]`, `.long()`).
_INDEX_METHODS = frozenset({"nonzero", "argwhere", "argsort"})
_INDEX_KEEPING = frozenset({"view", "reshape", "flatten", "squeeze", "long", "int", "contiguous", "clone", "split", "chunk",
                            "tensor_split", "sort", "unique", "t"})


def _indices(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """``range(n)``, ``list(range(n))``, ``torch.arange(n)``, ``mask.nonzero().view(-1)``,
    ``torch.where(mask)[0]``, one rank's ``idx.split(n)[rank]``: the dataset is its indices."""
    if depth > 6:
        return False
    if type(value) is cst.Subscript:  # `torch.where(m)[0]`, `idx.split(n)[rank]`, `perm[:n]`
        return _indices(ctx, value.value, at, depth + 1)
    if type(value) is cst.Call:
        func = value.func
        if _index_call(ctx, value) or ctx.qname(func) in ("torch.nonzero", "torch.argwhere", "numpy.nonzero", "numpy.flatnonzero") \
                or ctx.qname(func) == "torch.where" and len(value.args) == 1:
            return True
        if type(func) is cst.Attribute and ctx.qname(func) is None:
            method = func.attr.value
            return method in _INDEX_METHODS or method in _INDEX_KEEPING and _indices(ctx, func.value, at, depth + 1)
        return False
    if type(value) is cst.Name:  # each binding that may reach it (`idx = idx.split(n)[rank]` sees the one before)
        bound = ctx.bindings.reaching_each(value.value, value)
        return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None
                                   and _indices(ctx, b.value, b.value, depth + 1) for b in bound)
    return False


_RANK_CALLS = frozenset({"torch.distributed.get_rank", "torch.distributed.get_node_local_rank"})


def sharded_by_rank(ctx: FileContext, call: cst.Call) -> bool:
    """Is the loader's dataset one rank's share, cut by hand: ``idx.split(n)[rank]``,
    ``idx[rank::world_size]``, ``Subset(ds, idx.chunk(world_size)[rank])``, through the names
    bound to it? Each process then reads its own part without a ``DistributedSampler``."""
    dataset = ctx.argument(call, 0, "dataset")
    return dataset is not None and _rank_share(ctx, dataset.value, 0)


def _rank_share(ctx: FileContext, value: cst.BaseExpression, depth: int) -> bool:
    if depth > 6:
        return False
    if type(value) is cst.Subscript:
        if any(_names_rank(ctx, node) for element in value.slice for node in ctx.tree.descendants(element.slice)):
            return True
        return _rank_share(ctx, value.value, depth + 1)
    if type(value) is cst.Call:  # a method chain on the share (`.view(-1)`), or a dataset built from it (`Subset(ds, share)`)
        inner = [value.func.value] if type(value.func) is cst.Attribute else []
        return any(_rank_share(ctx, part, depth + 1) for part in (*inner, *(arg.value for arg in value.args)))
    if type(value) is cst.Name:
        bound = ctx.bindings.reaching_each(value.value, value)
        return any(b.kind == "assign" and b.element is None and b.value is not None and _rank_share(ctx, b.value, depth + 1) for b in bound)
    return False


def _names_rank(ctx: FileContext, node: cst.CSTNode) -> bool:
    """``rank``, ``local_rank``, ``args.rank``, ``dist.get_rank()``: this process's rank."""
    if type(node) is cst.Call:
        return ctx.qname(node.func) in _RANK_CALLS
    if type(node) in (cst.Name, cst.Attribute):
        name = dotted(node)
        return name is not None and name.rsplit(".", 1)[-1] in ("rank", "local_rank", "global_rank", "proc_id", "process_index")
    return False


def _index_call(ctx: FileContext, call: cst.Call) -> bool:
    if dotted(call.func) in ("list", "tuple") and call.args and isinstance(call.args[0].value, cst.Call):
        call = call.args[0].value
    return (ctx.qname(call.func) or dotted(call.func)) in _INDEX_FACTORIES


def _returns_device_batches(ctx: FileContext, collate: cst.BaseExpression) -> bool:
    """A ``collate_fn`` of this file whose every ``return`` moves its batch to the device."""
    if not isinstance(collate, cst.Name):
        return False
    defined = [f for f in ctx.tree.nodes(cst.FunctionDef) if f.name.value == collate.value]
    if len(defined) != 1:
        return False  # not defined here, or twice: unknown
    function = defined[0]
    returns = [n for n in ctx.tree.descendants(function) if isinstance(n, cst.Return) and n.value is not None]
    return bool(returns) and all(moved_to_device(ctx, r.value) or _all_moved(ctx, r.value) for r in returns)


def _all_moved(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """``return x.to(device), y.to(device)``: every element moved."""
    return isinstance(value, (cst.Tuple, cst.List)) and bool(value.elements) and all(
        moved_to_device(ctx, e.value) for e in value.elements)


_EVAL_NAME = re.compile(r"(^|_)(val|valid|validation|test|eval|evaluation|dev|holdout|predict|inference)(_|$|loader|set|data)", re.IGNORECASE)


def loader_feeds(ctx: FileContext, call: cst.Call) -> Where:
    """Where a ``DataLoader(...)``'s batches go: the step of a training loop that iterates
    it (in this file), else of an evaluation loop; without such a loop, what it is called
    (``val_loader``, Lightning's ``test_dataloader()``) or whether it shuffles (training
    data is shuffled, evaluation data is not). ``Where.BATCH`` when nothing says."""
    loops = ctx.loops
    reached: set[int] = set()
    iterating = loops.iterations_of(call, reached)
    # a generator's loop that yields each batch (`sample_data(loader)`): the batches go where it is drawn from
    iterating += [drawn for loop in iterating for drawn in loops.generator_draws(loop, reached)]
    found = {loops.where(loop) for loop in iterating if loops.is_hot(loop)}
    if not found:  # handed to a wrapper whose result the loop iterates (`model, opt, dl = distribute(..., dl)`)
        found = {loops.where(loop) for loop in loops.iterations_through_wrappers(call) if loops.is_hot(loop)}
    for where in (Where.TRAIN, Where.BATCH, Where.EVAL):
        if where in found:
            return where
    named = _named_for(ctx, call)
    if named is not None:
        return named
    shuffle = loader_option(ctx, call, "shuffle")
    if isinstance(shuffle, cst.Arg) and isinstance(shuffle.value, cst.Name) and shuffle.value.value in ("True", "False"):
        return Where.TRAIN if shuffle.value.value == "True" else Where.EVAL  # (`shuffle=is_shuffle` says neither)
    return Where.BATCH


def _named_for(ctx: FileContext, call: cst.Call) -> Where | None:
    """What a loader's names say it feeds: its own name first (``train_loader`` in
    ``def train_val_pipeline``), then its function's (``def evaluate(...)``)."""
    function = ctx.tree.enclosing_function(call)
    for names in ([binding.name for binding in ctx.bindings.bound_to(call)], [function.name.value] if function is not None else []):
        if any(_EVAL_NAME.search(name.rsplit(".", 1)[-1]) for name in names):
            return Where.EVAL
        if any("train" in name.lower() for name in names):
            return Where.TRAIN
    return None


# Wrappers that keep a loader's batches coming (`self.dl = cycle(DataLoader(...))`).
_LOADER_WRAPPERS = frozenset({"cycle", "iter", "itertools.cycle"})


def never_iterated(ctx: FileContext, call: cst.Call) -> bool:
    """Is the loader (or ``cycle(loader)``) kept only where nothing reads it: a ``self.``
    attribute that no code of the file reads (``self.valid_dl`` of a trainer that never
    validates), a function's name only counted (``iters = len(loader_for_count)``), or a
    notebook's name never read after (a cell that times building it)?
    Such a loader loads no batch. (A module's name may be imported elsewhere; a notebook's
    is not.)"""
    value: cst.CSTNode = call
    arg = ctx.tree.parent(value)
    while type(arg) is cst.Arg and type(outer := ctx.tree.parent(arg)) is cst.Call and dotted(outer.func) in _LOADER_WRAPPERS:
        value, arg = outer, ctx.tree.parent(outer)
    bindings = ctx.bindings.bound_to(value)
    if not bindings:
        return False
    notebook = ctx.path.endswith(".ipynb")
    for binding in bindings:
        if binding.kind != "assign":
            return False
        if binding.name.startswith("self."):
            if ctx.bindings.uses(binding) or _read_elsewhere(ctx, binding.name.partition(".")[2]):
                return False
        elif not binding.name.count(".") and (ctx.tree.enclosing_function(binding.node) is not None or _in_main_block(ctx, binding.node)):
            # (a function's or a script's own name read only by `len(...)`: minimind's `loader_for_count`, built to count batches)
            if not all(_sized_only(ctx, use) for use in ctx.bindings.uses(binding)):
                return False
        elif not notebook or ctx.bindings.uses(binding):
            return False
    return True


def _in_main_block(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is ``node`` under the script's ``if __name__ == "__main__":``, whose names no module imports?"""
    return any(type(a) is cst.If and is_main_guard(a.test) for a in ctx.tree.ancestors(node))


def _sized_only(ctx: FileContext, use: cst.BaseExpression) -> bool:
    """Is ``use`` the argument of ``len(...)``: it counts the batches, loads none?"""
    arg = ctx.tree.parent(use)
    call = ctx.tree.parent(arg) if type(arg) is cst.Arg else None
    return type(call) is cst.Call and type(call.func) is cst.Name and call.func.value == "len" and len(call.args) == 1


def _read_elsewhere(ctx: FileContext, attribute: str) -> bool:
    """Is ``x.attribute`` read on some object other than ``self`` (``trainer.valid_dl``)?"""
    return any(node.attr.value == attribute and not (type(node.value) is cst.Name and node.value.value == "self")
               for node in ctx.tree.nodes(cst.Attribute))
