"""DataLoader constructor facts shared by the data-loading rules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

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
    return bool(returns) and all(_moved_to_device(ctx, r.value) or _all_moved(ctx, r.value) for r in returns)


def _all_moved(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """``return x.to(device), y.to(device)``: every element moved."""
    return isinstance(value, (cst.Tuple, cst.List)) and bool(value.elements) and all(
        _moved_to_device(ctx, e.value) for e in value.elements)


def _dataset_call(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    dataset = ctx.argument(call, 0, "dataset")
    return ctx.values.constructed_by(dataset.value, call) if dataset is not None else None


# What a __getitem__ may call and still only slice tensors it holds: no file, no decode,
# no transform (a call to anything else may be the work workers would take over).
_SLICING_METHODS = frozenset({
    "long", "int", "float", "half", "bfloat16", "to", "cuda", "size", "clone", "view", "reshape",
    "unsqueeze", "squeeze", "contiguous", "item", "numel", "narrow", "type",
})
_SLICING_BUILTINS = frozenset({"len", "int", "min", "max", "slice", "range"})


def in_memory_dataset(ctx: FileContext, call: cst.Call) -> str | None:
    """Why the loader's dataset, a class of this file, gives workers nothing to do: its
    ``__getitem__`` returns items already on the device, or only slices tensors it holds.
    None when it may do real work (or is not known)."""
    built = _dataset_call(ctx, call)
    if built is None or not isinstance(built.func, cst.Name):
        return None
    reason = in_memory_class(ctx, built.func.value)
    if reason == GIVEN_ITEMS and built.args and all(ctx.values.kind(a.value, built) in (Kind.TENSOR, Kind.HOST) for a in built.args):
        return "given tensors"  # given tensors or lists this file made: in memory, nothing read lazily
    return reason


def in_memory_class(ctx: FileContext, class_name: str) -> str | None:
    """Why the dataset class ``class_name`` of this file gives workers nothing to do (see
    ``in_memory_dataset``); None when it may do real work (or is not known)."""
    getitem = _method(ctx, class_name, "__getitem__")
    if getitem is None:
        return None
    calls = [n for n in ctx.tree.descendants(getitem) if isinstance(n, cst.Call)]
    returns = [n for n in ctx.tree.descendants(getitem) if isinstance(n, cst.Return) and n.value is not None]
    if returns and all(_moved_to_device(ctx, r.value) for r in returns):
        return "device"
    indexed = _indexed_attributes(ctx, getitem)
    given = _given_attributes(ctx, class_name)
    if any(given.get(name) == "dataset" for name in indexed):
        return None  # `self.base[i]` of a dataset it wraps: that dataset's `__getitem__` does the work
    # What the constructor was given may be a list or tensor in memory, or a memmap or a lazy
    # table read per index: cheap, not nothing (GIVEN_ITEMS, TL201's low tier).
    from_caller = any(name in given for name in indexed)
    if calls and all(_slicing_call(ctx, c) for c in calls) and indexed:
        return GIVEN_ITEMS if from_caller else "slices"
    if not calls and returns and all(_indexes_a_held_list(ctx, class_name, r.value) for r in returns):
        return "list items"
    if not calls and returns and from_caller and all(_indexes_a_held_list(ctx, class_name, r.value, given) for r in returns):
        return GIVEN_ITEMS
    return None


#: ``in_memory_class``'s reason for a dataset that only indexes (and converts) a list or tensor
#: its constructor was given: in memory wherever it came from, unless it reads lazily.
GIVEN_ITEMS = "given items"
# A parameter named for a dataset: what it holds is another dataset, whose `__getitem__` works.
_DATASET_NAMES = re.compile(r"(^|_)(ds|dataset|datasets|base|source)$", re.IGNORECASE)


def _indexed_attributes(ctx: FileContext, function: cst.FunctionDef) -> set[str]:
    """The ``self.`` attributes ``function`` indexes (``self.data[i]["x"]``: ``self.data``)."""
    indexed = set()
    for node in ctx.tree.descendants(function):
        if isinstance(node, cst.Subscript):
            base = node.value
            while isinstance(base, cst.Subscript):
                base = base.value
            name = dotted(base) or ""
            if name.startswith("self.") and name.count(".") == 1:
                indexed.add(name)
    return indexed


def _given_attributes(ctx: FileContext, class_name: str) -> dict[str, str]:
    """The ``self.`` attributes ``__init__`` sets to one of its parameters as they are
    (``self._data = data``, ``self.x, self.y = x, y``): "dataset" for a parameter named for
    one (``self.base = dataset``), else "items"."""
    init = _method(ctx, class_name, "__init__")
    if init is None:
        return {}
    params = {p.name.value for p in init.params.params + init.params.kwonly_params}
    given = {}
    for node in ctx.tree.descendants(init):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0].target, node.value
        pairs = zip((e.value for e in target.elements), (e.value for e in value.elements)) \
            if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) else [(target, value)]
        for name, source in pairs:
            attribute = dotted(name) or ""
            if attribute.startswith("self.") and isinstance(source, cst.Name) and source.value in params:
                given[attribute] = "dataset" if _DATASET_NAMES.search(source.value) else "items"
    return given


# What `__init__` may bind an attribute to for `self.items[i]` to read memory, not a file
# (an h5py dataset or a memmap would read from disk on every index).
_IN_MEMORY = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)


def _indexes_a_held_list(ctx: FileContext, class_name: str, value: cst.BaseExpression, given: dict[str, str] | None = None) -> bool:
    """``return self.items[i]`` (or a tuple of such) where ``__init__`` built ``self.items``
    as a list in memory: ``list(...)``, a literal or a comprehension (or, with ``given``, set it
    to a parameter of those)."""
    parts = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
    init = _method(ctx, class_name, "__init__")
    if init is None or not parts:
        return False
    held = {}
    for node in ctx.tree.descendants(init):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            name = dotted(node.targets[0].target)
            if name is not None and name.startswith("self."):
                held[name] = node.value
    for part in parts:
        base = part
        while isinstance(base, cst.Subscript):  # `self.trajectories["states"][t][j]`
            base = base.value
        name = dotted(base) or ""
        if base is part:
            return False
        if (given or {}).get(name) == "items":
            continue  # set to a parameter (`self.x, self.y = x, y` too)
        if name not in held or not _in_memory(ctx, held[name]):
            return False
    return True


# Calls whose value is in memory (a lazily read file is not: h5py, np.memmap, np.load's mmap_mode).
_IN_MEMORY_CALLS = frozenset({"list", "tuple", "dict", "sorted", "torch.load", "pickle.load", "json.load"})


def _in_memory(ctx: FileContext, source: cst.BaseExpression) -> bool:
    if isinstance(source, _IN_MEMORY):
        return True
    if not isinstance(source, cst.Call):
        return False
    name = ctx.qname(source.func) or dotted(source.func)
    return name in _IN_MEMORY_CALLS and ctx.keyword(source, "mmap") is None


def _method(ctx: FileContext, class_name: str, method: str) -> cst.FunctionDef | None:
    classes = ctx.tree.classes_named(class_name)
    if len(classes) != 1:
        return None  # not defined here, or defined twice: unknown
    for statement in classes[0].body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == method:
            return statement
    return None


def _moved_to_device(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """``x.cuda()`` or ``x.to(device)`` (not ``x.to(torch.float32)``), directly or through the
    one name it was assigned to."""
    built = expr if isinstance(expr, cst.Call) else ctx.values.constructed_by(expr)
    mapped = _mapped_lambda(built) if isinstance(built, cst.Call) else None
    if mapped is not None:  # `tuple(map(lambda t: t[ind].to(self.device), self.data))`: each item moved
        return _moved_to_device(ctx, mapped)
    if not isinstance(built, cst.Call) or not isinstance(built.func, cst.Attribute):
        return False
    method = built.func.attr.value
    if method == "cuda":
        return True
    target = ctx.argument(built, 0, "device") if method == "to" else None
    return target is not None and ctx.devices.device_value(target.value, built) == "device"


def _mapped_lambda(call: cst.Call) -> cst.BaseExpression | None:
    """The body of the lambda ``map(lambda t: ..., items)`` applies, also inside ``tuple(...)`` or ``list(...)``."""
    if type(call.func) is cst.Name and call.func.value in ("tuple", "list") and len(call.args) == 1 and type(call.args[0].value) is cst.Call:
        call = call.args[0].value
    if type(call.func) is not cst.Name or call.func.value != "map" or len(call.args) < 2 or type(call.args[0].value) is not cst.Lambda:
        return None
    return call.args[0].value.body


def _slicing_call(ctx: FileContext, call: cst.Call) -> bool:
    func = call.func
    if isinstance(func, cst.Name):
        return func.value in _SLICING_BUILTINS
    qualified = ctx.qname(func) or ""
    if qualified.startswith("torch."):
        # an index drawn or counted; torch.tensor(array[i]) would be a conversion: real work
        return qualified.split(".")[-1].startswith(("rand", "arange"))
    return isinstance(func, cst.Attribute) and func.attr.value in _SLICING_METHODS


_EVAL_NAME = re.compile(r"(^|_)(val|valid|validation|test|eval|evaluation|dev|holdout|predict|inference)(_|$|loader|set|data)", re.IGNORECASE)


def loader_feeds(ctx: FileContext, call: cst.Call) -> Where:
    """Where a ``DataLoader(...)``'s batches go: the step of a training loop that iterates
    it (in this file), else of an evaluation loop; without such a loop, what it is called
    (``val_loader``, Lightning's ``test_dataloader()``) or whether it shuffles (training
    data is shuffled, evaluation data is not). ``Where.BATCH`` when nothing says."""
    loops = ctx.loops
    found = {loops.where(loop) for loop in loops.iterations_of(call) if loops.is_hot(loop)}
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
    validates), or a notebook's name never read after (a cell that times building it)?
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
        elif not (notebook and ctx.tree.enclosing_function(binding.node) is None) or ctx.bindings.uses(binding):
            return False
    return True


def _read_elsewhere(ctx: FileContext, attribute: str) -> bool:
    """Is ``x.attribute`` read on some object other than ``self`` (``trainer.valid_dl``)?"""
    return any(node.attr.value == attribute and not (type(node.value) is cst.Name and node.value.value == "self")
               for node in ctx.tree.nodes(cst.Attribute))
