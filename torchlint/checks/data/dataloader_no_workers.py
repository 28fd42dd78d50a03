"""A `DataLoader` that loads every batch in the training process."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.checks.base import Check

_DATALOADER = "torch.utils.data.DataLoader"
_TENSOR_DATASET = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset")
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
_NUM_WORKERS_POSITION = 5


class DataloaderNoWorkers(Check):
    """`DataLoader(...)` without `num_workers`, or with `num_workers=0`."""

    code = "TL201"
    name = "dataloader-no-workers"
    message = "`{call}` has {why}, so every batch is loaded and collated in the training process while the model waits"
    fix_hint = "Pass `num_workers` > 0 (about 4 per GPU to start with) so worker processes prepare batches ahead of the step"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) != _DATALOADER or ctx.has_star_kwargs(node):
            return
        if any(arg.star == "*" for arg in node.args):
            return  # `*args` may carry num_workers
        arg = ctx.argument(node, _NUM_WORKERS_POSITION, "num_workers")
        if arg is None:
            why = "no `num_workers`"
        elif isinstance(arg.value, cst.Integer) and int(arg.value.evaluated_value) == 0:
            why = "`num_workers=0`"
        else:
            return  # workers asked for, or a value chosen at run time
        if ctx.loops.only_first_batch(node):
            return  # built to peek at one batch: workers would only add start-up time
        dataset = ctx.argument(node, 0, "dataset")
        built = ctx.values.constructed_by(dataset.value, node) if dataset is not None else None
        if built is not None and ctx.qname(built.func) in _TENSOR_DATASET:
            return  # tensors already in memory (or on the device, where workers cannot go)
        call = short_code(ctx.module, node.func) + "(...)"
        self.report(node, related=tuple(ctx.loops.iterations_of(node)), call=call, why=why)
