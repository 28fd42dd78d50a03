"""DataLoader constructor facts shared by the data-loading rules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.impact import Where, where_of

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

DATALOADER = "torch.utils.data.DataLoader"
_TENSOR_DATASETS = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset")
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_POSITIONS = {"dataset": 0, "batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4, "num_workers": 5, "collate_fn": 6, "pin_memory": 7}
UNKNOWN = object()  # a splat could supply the option: the user's choice, stay silent


def loader_option(ctx: FileContext, call: cst.Call, option: str) -> cst.Arg | None | object:
    """The argument giving ``option`` to a ``DataLoader(...)`` call, None when it is not
    passed, or UNKNOWN when ``*args``/``**kwargs`` may pass it."""
    if ctx.has_star_kwargs(call) or any(arg.star == "*" for arg in call.args):
        return UNKNOWN
    return ctx.argument(call, _POSITIONS[option], option)


def is_dataloader(ctx: FileContext, call: cst.Call) -> bool:
    return ctx.qname(call.func) == DATALOADER


def tensor_dataset(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    """The ``TensorDataset(...)`` call that built the loader's dataset, when known."""
    built = _dataset_call(ctx, call)
    if built is not None and ctx.qname(built.func) in _TENSOR_DATASETS:
        return built
    return None


def _dataset_call(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    dataset = ctx.argument(call, 0, "dataset")
    return ctx.values.constructed_by(dataset.value, call) if dataset is not None else None


# What a __getitem__ may call and still only slice tensors it holds: no file, no decode,
# no transform (a call to anything else may be the work workers would take over).
_SLICING_METHODS = frozenset({
    "long", "int", "float", "half", "bfloat16", "to", "cuda", "size", "clone", "view", "reshape",
    "unsqueeze", "squeeze", "contiguous", "item", "numel", "narrow",
})
_SLICING_BUILTINS = frozenset({"len", "int", "min", "max", "slice", "range"})


def in_memory_dataset(ctx: FileContext, call: cst.Call) -> str | None:
    """Why the loader's dataset, a class of this file, gives workers nothing to do: its
    ``__getitem__`` returns items already on the device, or only slices tensors it holds.
    None when it may do real work (or is not known)."""
    built = _dataset_call(ctx, call)
    if built is None or not isinstance(built.func, cst.Name):
        return None
    getitem = _method(ctx, built.func.value, "__getitem__")
    if getitem is None:
        return None
    calls = [n for n in ctx.tree.descendants(getitem) if isinstance(n, cst.Call)]
    returns = [n for n in ctx.tree.descendants(getitem) if isinstance(n, cst.Return) and n.value is not None]
    if returns and all(_moved_to_device(ctx, r.value) for r in returns):
        return "device"
    if calls and all(_slicing_call(ctx, c) for c in calls) and any(isinstance(n, cst.Subscript) for n in ctx.tree.descendants(getitem)):
        return "slices"
    return None


def _method(ctx: FileContext, class_name: str, method: str) -> cst.FunctionDef | None:
    classes = [c for c in ctx.tree.nodes(cst.ClassDef) if c.name.value == class_name]
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
    if not isinstance(built, cst.Call) or not isinstance(built.func, cst.Attribute):
        return False
    method = built.func.attr.value
    if method == "cuda":
        return True
    target = ctx.argument(built, 0, "device") if method == "to" else None
    return target is not None and ctx.devices.device_value(target.value, built) == "device"


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
    found = {where_of(loops.describe(loop)) for loop in loops.iterations_of(call) if loops.is_hot(loop)}
    for where in (Where.TRAIN, Where.BATCH, Where.EVAL):
        if where in found:
            return where
    names = [binding.name for binding in ctx.bindings.bound_to(call)]
    function = ctx.tree.enclosing_function(call)
    if function is not None:
        names.append(function.name.value)
    if any(_EVAL_NAME.search(name.rsplit(".", 1)[-1]) for name in names):
        return Where.EVAL
    if any("train" in name.lower() for name in names):
        return Where.TRAIN
    shuffle = loader_option(ctx, call, "shuffle")
    if isinstance(shuffle, cst.Arg) and isinstance(shuffle.value, cst.Name):
        return Where.TRAIN if shuffle.value.value == "True" else Where.EVAL
    return Where.BATCH
