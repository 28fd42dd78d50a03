"""DataLoader constructor facts shared by the data-loading rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

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
    dataset = ctx.argument(call, 0, "dataset")
    built = ctx.values.constructed_by(dataset.value, call) if dataset is not None else None
    if built is not None and ctx.qname(built.func) in _TENSOR_DATASETS:
        return built
    return None
