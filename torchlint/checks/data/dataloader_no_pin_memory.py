"""A `DataLoader` whose batches are copied to the accelerator from pageable memory."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.checks.base import Check

_DATALOADER = "torch.utils.data.DataLoader"
_TENSOR_DATASET = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset")
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_PIN_MEMORY_POSITION = 7


class DataloaderNoPinMemory(Check):
    """`DataLoader(...)` without `pin_memory=True` in a module that uses an accelerator."""

    code = "TL202"
    name = "dataloader-no-pin-memory"
    message = "`{call}` has {why}, so each batch is staged through pageable host memory before its copy to the device"
    fix_hint = "Pass `pin_memory=True` and move batches with `.to(device, non_blocking=True)`"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) != _DATALOADER or ctx.has_star_kwargs(node):
            return
        if any(arg.star == "*" for arg in node.args):
            return  # `*args` may carry pin_memory
        arg = ctx.argument(node, _PIN_MEMORY_POSITION, "pin_memory")
        if arg is None:
            why = "no `pin_memory`"
        elif isinstance(arg.value, cst.Name) and arg.value.value == "False":
            why = "`pin_memory=False`"
        else:
            return  # pinned, or a value chosen at run time
        if not ctx.devices.uses_accelerator():
            return  # nothing is copied to a device in this module
        if ctx.loops.only_first_batch(node):
            return  # built to peek at one batch
        dataset = ctx.argument(node, 0, "dataset")
        built = ctx.values.constructed_by(dataset.value, node) if dataset is not None else None
        if built is not None and ctx.qname(built.func) in _TENSOR_DATASET:
            if any(ctx.devices.on_device(arg.value, built) for arg in built.args):
                return  # the tensors are on the device already: nothing to pin
        call = short_code(ctx.module, node.func) + "(...)"
        self.report(node, related=tuple(ctx.loops.iterations_of(node)), call=call, why=why)
