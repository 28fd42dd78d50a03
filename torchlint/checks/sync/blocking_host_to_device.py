"""A DataLoader batch copied to the device without `non_blocking=True`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check
from torchlint.findings import FixSafety


class BlockingHostToDevice(Check):
    """`.to(device)`/`.cuda()` of a DataLoader batch without `non_blocking=True`."""

    code = "TL111"
    name = "blocking-host-to-device"
    cost = Cost.UPLOAD
    message = "`{call}` copies the batch to the device synchronously: the host waits for the copy on every step"
    fix_hint = "Pass `non_blocking=True` (with `pin_memory=True` on the DataLoader) so the copy overlaps with compute"
    default = False
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.method_name(node) not in ("to", "cuda", "type") or not ctx.devices.blocking_move(node):
            return  # no move to the device, or `non_blocking=` given (a keyword, a position, `**kwargs`)
        if not ctx.loops.in_loop(node):
            return
        receiver = node.func.value  # type: ignore[attr-defined]
        if not ctx.devices.loader_value(receiver, node):
            return
        fix = (node, with_keyword(node, "non_blocking", cst.Name("True")))
        self.report(node, fix=fix, call=short_code(ctx.module, node))
