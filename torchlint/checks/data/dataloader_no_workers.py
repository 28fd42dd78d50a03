"""A `DataLoader` that loads every batch in the training process."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.loaders import UNKNOWN, in_memory_dataset, is_dataloader, loader_feeds, loader_option, tensor_dataset
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

class DataloaderNoWorkers(Check):
    """`DataLoader(...)` without `num_workers`, or with `num_workers=0`."""

    code = "TL201"
    name = "dataloader-no-workers"
    cost = Cost.INPUT_PIPELINE
    message = "`{call}` has {why}, so every batch is loaded and collated in the training process while the model waits"
    fix_hint = "Pass `num_workers` > 0 (about 4 per GPU to start with) so worker processes prepare batches ahead of the step"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if not is_dataloader(ctx, node):
            return
        arg = loader_option(ctx, node, "num_workers")
        if arg is UNKNOWN:
            return  # a splat may carry num_workers
        if arg is None:
            why = "no `num_workers`"
        elif isinstance(arg.value, cst.Integer) and int(arg.value.evaluated_value) == 0:
            why = "`num_workers=0`"
        else:
            return  # workers asked for, or a value chosen at run time
        if ctx.loops.only_first_batch(node):
            return  # built to peek at one batch: workers would only add start-up time
        if tensor_dataset(ctx, node) is not None:
            return  # tensors already in memory (or on the device, where workers cannot go)
        if in_memory_dataset(ctx, node) is not None:
            return  # its items are slices of tensors it holds, or made on the device: the same
        call = short_code(ctx.module, node.func) + "(...)"
        self.report(node, where=loader_feeds(ctx, node), related=tuple(ctx.loops.iterations_of(node)), call=call, why=why)
