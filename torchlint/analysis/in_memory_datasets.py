"""Dataset classes of a file whose ``__getitem__`` gives DataLoader workers nothing to do: items
returned on the device already, slices of tensors the dataset holds, items of a list it built in
memory, or of a list or tensor its constructor was given (``GIVEN_ITEMS``, TL201's low tier).
Asked by ``loaders.no_work_for_workers`` and by the summary of a file's dataset classes
(``dataset_work.py``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import method_named
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


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
    if returns and all(moved_to_device(ctx, r.value) for r in returns):
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
    return method_named(classes[0], method)


def moved_to_device(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """``x.cuda()`` or ``x.to(device)`` (not ``x.to(torch.float32)``), directly or through the
    one name it was assigned to."""
    built = expr if isinstance(expr, cst.Call) else ctx.values.constructed_by(expr)
    mapped = _mapped_lambda(built) if isinstance(built, cst.Call) else None
    if mapped is not None:  # `tuple(map(lambda t: t[ind].to(self.device), self.data))`: each item moved
        return moved_to_device(ctx, mapped)
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
