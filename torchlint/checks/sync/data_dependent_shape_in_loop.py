"""An op whose output size depends on a device tensor's values, once per training step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


class DataDependentShapeInLoop(Check):
    """`x[mask]`, `nonzero()`, `unique()`, `masked_select()`, `bincount()`, `repeat_interleave(t)` on device tensors inside a hot loop."""

    code = "TL106"
    name = "data-dependent-shape-in-loop"
    cost = Cost.SYNC
    message = "`{expr}` in {loop} makes a tensor whose size depends on its values: the host waits for the device to learn the size, every step"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    default = False
    fix_hint = "Keep shapes static: weight by the mask (`(x * mask).sum() / mask.sum()`), `torch.where(mask, x, 0)`, or give the size (`nonzero_static(size=...)`, `repeat_interleave(..., output_size=n)`)"

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._check(node)

    def _check(self, node: cst.Call | cst.Subscript) -> None:
        ctx = self.ctx
        device_params: tuple[str, ...] = ()
        if not ctx.syncs.sized_by_values(node):
            param = ctx.syncs.uploaded_mask(node) if type(node) is cst.Subscript else None
            if param is not None:  # `[y[y != pad] for y in padded]`, `padded` uploaded by the step
                self.report(node, condition=param.name, expr=short_code(ctx.module, node, limit=60), repeated=False)
                return
            # `edge_index[:, edge_type == i]` of parameters: holds where every caller passes device tensors
            device_params = ctx.syncs.mask_parameters(node) if type(node) is cst.Subscript else ()
            if not device_params:
                return
        repeated = ctx.syncs.repeated_in_step(node)
        if repeated:
            return  # repeated within the step (per head, per node type): TL101 reports it by default
        # Where the join decides, this finding holds only if the line runs once per step.
        self.report(node, expr=short_code(ctx.module, node, limit=60), repeated=False if repeated is None else None, if_device=device_params)
