"""Gradient accumulation under DistributedDataParallel without `no_sync()`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

_DDP = "torch.nn.parallel.DistributedDataParallel"
# What keeps DDP from reducing on an accumulation micro-step: its own context, the flag it
# reads, or a framework's accumulation context that enters it (Accelerate, Lightning Fabric).
_NO_SYNC = frozenset({"no_sync", "accumulate", "require_backward_grad_sync"})


class DdpAccumulationWithoutNoSync(Check):
    """`loss.backward()` every micro-step and `optimizer.step()` every N under DDP, with no `no_sync()`."""

    code = "TL603"
    name = "ddp-accumulation-without-no-sync"
    cost = Cost.EXTRA_ALL_REDUCE
    message = ("`{call}` runs on every micro-step of gradient accumulation under DistributedDataParallel, "
               "with no `no_sync()`: every backward all-reduces every gradient, where the last of N would do")
    fix_hint = ("Run the backward of the micro-steps that do not step inside `with model.no_sync():` (for example "
                "`ctx = model.no_sync() if (i + 1) % accumulate else contextlib.nullcontext()`)")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.method_name(node) != "backward" or not self._ddp_without_no_sync():
            return  # DDP reduces only where it wraps a model, and no_sync anywhere means it was handled
        loop = ctx.loops.local_hot_loop(node)
        if loop is None or ctx.guards.rare(node, stop=loop):
            return  # a backward that is not every micro-step's
        if not ctx.guards.accumulates_gradients(loop):
            return  # the optimizer steps every iteration: each all-reduce is needed
        self.report(node, call=short_code(ctx.module, node))

    def _ddp_without_no_sync(self) -> bool:
        if not hasattr(self, "_answer"):
            ctx = self.ctx
            uses = bool(ctx.calls_named(_DDP))
            handled = bool(ctx.method_calls(_NO_SYNC)) or any(
                a.attr.value in _NO_SYNC for a in ctx.tree.nodes(cst.Attribute))
            self._answer = uses and not handled
        return self._answer
