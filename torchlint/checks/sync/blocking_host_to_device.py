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
        if ctx.method_name(node) not in ("to", "cuda", "type") or ctx.devices.move(node) != "device":
            return
        if ctx.has_star_kwargs(node):
            return
        flag = ctx.keyword(node, "non_blocking")
        if flag is not None and not (isinstance(flag.value, cst.Name) and flag.value.value == "False"):
            return  # `non_blocking=True`, or the user's choice at run time
        if node.func.attr.value == "cuda" and len(node.args) > 1:  # type: ignore[attr-defined]
            return  # legacy positional `cuda(device, non_blocking)`
        if node.func.attr.value in ("to", "type") and len([a for a in node.args if a.keyword is None]) > (2 if node.func.attr.value == "to" else 1):  # type: ignore[attr-defined]
            return  # `.to(device, dtype, non_blocking)`, `.type(T, non_blocking)` positionally
        if not ctx.loops.in_loop(node):
            return
        receiver = node.func.value  # type: ignore[attr-defined]
        if not ctx.devices.loader_value(receiver, node):
            return
        fix = (node, with_keyword(node, "non_blocking", cst.Name("True")))
        self.report(node, fix=fix, call=short_code(ctx.module, node))
