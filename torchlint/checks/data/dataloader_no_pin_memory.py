"""A `DataLoader` whose batches are copied to the accelerator from pageable memory."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.loader_classes import loader_candidate
from torchlint.analysis.loaders import UNKNOWN, is_dataloader, loader_feeds, loader_option, never_iterated, no_work_for_workers
from torchlint.checks.base import Check

class DataloaderNoPinMemory(Check):
    """`DataLoader(...)` without `pin_memory=True` in a module that uses an accelerator."""

    code = "TL202"
    name = "dataloader-no-pin-memory"
    cost = Cost.PINNED_COPY
    message = "`{call}` has {why}, so each batch is staged through pageable host memory before its copy to the device"
    fix_hint = "Pass `pin_memory=True` and move batches with `.to(device, non_blocking=True)`"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        candidate = not is_dataloader(ctx, node) and loader_candidate(ctx, node)
        if not is_dataloader(ctx, node) and not candidate:
            return
        arg = loader_option(ctx, node, "pin_memory")
        if arg is UNKNOWN:
            return  # a splat may carry pin_memory
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
        if ctx.loops.never_read(node) or never_iterated(ctx, node):
            return  # bound to a name nothing reads (rebound before any loop, dead code, an unread attribute): no batch is loaded
        if no_work_for_workers(ctx, node) is not None:
            return  # no workers to pin in: pinning in the loop costs a copy of its own (or raises, for device items)
        call = short_code(ctx.module, node.func) + "(...)"
        # Without workers the loop itself pins each batch: one more copy (TL201 is the fix).
        workers = loader_option(ctx, node, "num_workers")
        alone = workers is None or (isinstance(workers, cst.Arg) and isinstance(workers.value, cst.Integer) and workers.value.evaluated_value == 0)
        loops = ctx.loops.iterations_of(node)
        # With workers, pinning saves the staging copy of each batch's bytes: a small share of a step
        # unless the step is transfer-bound, which the source does not show; where the loop copies its
        # batches with `non_blocking=True`, the author wants them to overlap the step, and from pageable
        # memory they cannot.
        cost = Cost.PIN_WITHOUT_WORKERS if alone else Cost.UNPINNED_NON_BLOCKING if self._overlapped(loops) else None
        # `AudioDataLoader(...)` of another file: the join keeps it where the class subclasses DataLoader
        self.report(node, where=loader_feeds(ctx, node), cost=cost,
                    related=tuple(loops), loader=(node.func, "pin_memory") if candidate else None, call=call, why=why)

    def _overlapped(self, loops: list[cst.CSTNode]) -> bool:
        """Does a loop over the loader move something to the device with ``non_blocking=True``?"""
        ctx = self.ctx
        return any(ctx.devices.overlapped_move(call) for loop in loops if isinstance(loop, (cst.For, cst.While))
                   for call in ctx.loops.loop_calls(loop))
