"""The same host data copied to the device on every step of a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


class ConstantUploadInLoop(Check):
    """`torch.from_numpy(CONST).to(device)`, `torch.tensor(self.weights, device=d)`: a constant uploaded inside a hot loop."""

    code = "TL113"
    name = "constant-upload-in-loop"
    cost = Cost.UPLOAD
    message = "`{expr}` in {loop} copies the same host data to the device on every step, and the host waits for each copy"
    per_step = True
    device_bound = True
    fix_hint = "Upload it once: move it to the device before the loop, or register it as a buffer (`self.register_buffer(...)`) so it moves with the model"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        data = ctx.uploads.uploaded_data(node)
        if data is None or not ctx.syncs.in_step(node):
            return
        condition = None
        if not ctx.uploads.same_every_step(data, node, ctx.loops.hot_loop(node)):
            condition = ctx.uploads.constant_parameter(data, node) if ctx.loops.local_hot_loop(node) is None else None
            if condition is None:
                return  # data of this step: the copy is the step's input
            # `def extract(arr, t): torch.from_numpy(arr).to(t.device)`: holds when a per-step
            # caller passes a constant (`extract(self.alphas, t)`), which the join decides
        in_class = ctx.tree.enclosing_class(node) is not None and ctx.tree.enclosing_function(node) is not None
        hint = "" if in_class or condition is not None else "Upload it once, before the loop, and reuse the device tensor"
        self.report(node, hint=hint, condition=condition, expr=short_code(ctx.module, node, limit=60))
