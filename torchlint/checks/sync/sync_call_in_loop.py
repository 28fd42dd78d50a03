"""`torch.cuda.synchronize()` or `torch.cuda.empty_cache()` on every step of a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

_SYNC_CALLS = {
    "torch.cuda.synchronize": "torch.cuda.synchronize()",
    "torch.cuda.empty_cache": "torch.cuda.empty_cache()",
    "torch.accelerator.synchronize": "torch.accelerator.synchronize()",
}


class SyncCallInLoop(Check):
    """`torch.cuda.synchronize()`/`torch.cuda.empty_cache()` unconditionally inside a hot loop."""

    code = "TL103"
    name = "sync-call-in-loop"
    cost = Cost.SYNC
    message = "`{call}` in {loop} stops the host until every queued kernel has finished, on every step"
    per_step = True
    fix_hint = "Remove the call from the step loop, or run it only when needed (behind a flag, or every N steps)"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        label = _SYNC_CALLS.get(ctx.qname(node.func) or "")
        if label is None:
            return
        loop = ctx.loops.hot_loop(node)
        if loop is None:
            return
        if self._in_conditional_expression(node, loop):
            return  # a conditional sync (OOM recovery, a flag) is deliberate
        if ctx.guards.conditional(node, stop=loop) and not ctx.guards.device_only(node, stop=loop):
            return  # a conditional sync (a profiling flag, every N steps) is deliberate; `if use_gpu:` holds on every GPU step
        self.report(node, call=label)

    def _in_conditional_expression(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, (cst.IfExp, cst.BooleanOperation, cst.ExceptHandler, cst.ExceptStarHandler)):
                return True
        return False
