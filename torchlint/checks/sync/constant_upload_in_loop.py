"""The same host data copied to the device on every step of a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.checks.base import Check


class ConstantUploadInLoop(Check):
    """`torch.from_numpy(CONST).to(device)`, `torch.tensor(self.weights, device=d)`: a constant uploaded inside a hot loop."""

    code = "TL113"
    name = "constant-upload-in-loop"
    message = "`{expr}` in {loop} copies the same host data to the device on every step, and the host waits for each copy"
    per_step = True
    device_bound = True
    fix_hint = "Upload it once: move it to the device before the loop, or register it as a buffer (`self.register_buffer(...)`) so it moves with the model"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        data = ctx.uploads.uploaded_data(node)
        if data is None or not ctx.syncs.in_step(node):
            return
        if not ctx.uploads.same_every_step(data, node, ctx.loops.hot_loop(node)):
            return  # data of this step: the copy is the step's input
        in_class = ctx.tree.enclosing_class(node) is not None and ctx.tree.enclosing_function(node) is not None
        hint = "" if in_class else "Upload it once, before the loop, and reuse the device tensor"
        self.report(node, hint=hint, expr=short_code(ctx.module, node, limit=60))
