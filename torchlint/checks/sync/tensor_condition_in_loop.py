"""Python `if`/`while`/`assert` (or `all()`/`any()` in one) on a tensor value inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.guard_sanity import only_reports_bad_values
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


class TensorConditionInLoop(Check):
    """`if`/`while`/`assert` whose test reads a tensor value (also through `all()`/`any()`), inside a hot loop."""

    code = "TL104"
    name = "tensor-condition-in-loop"
    cost = Cost.SYNC
    message = "`{test}` branches on a tensor value in {loop}: the host waits for the device to decide"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Keep the decision on the device with `torch.where` / masking, or test it every N steps"
    default = False

    def visit_If(self, node: cst.If) -> None:
        if self.ctx.syncs.per_token_stop(node):
            return  # a decode loop's stop check: TL101 reports it by default
        if only_reports_bad_values(node):
            return  # a sanity check that only reports (`if torch.min(y) < -1.: print(...)`): TL101 reports it by default
        self._check(node, node.test)

    def visit_While(self, node: cst.While) -> None:
        self._check(node, node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._check(node, node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        self._check(node, node.test)

    def _check(self, statement: cst.CSTNode, test: cst.BaseExpression) -> None:
        ctx = self.ctx
        device_params: tuple[str, ...] = ()
        if not ctx.syncs.condition_runs(statement, test):
            return  # not per step here (or rare): no read, whatever the callers pass
        if not ctx.syncs.reads_truth(test, test):
            # `if sigmas[i + 1] == 0:` on a parameter: holds where every caller passes a device tensor
            device_params = ctx.syncs.device_parameters(test, lambda: ctx.syncs.condition_read(statement, test))
            if not device_params:
                return
        repeated = ctx.syncs.repeated_in_step(test)
        if repeated:
            return  # repeated within the step (per head, per node type): TL101 reports it by default
        # Where the join decides, this finding holds only if the line runs once per step.
        # (`assert wav.isfinite().all()` in `write(wav)`: no wait where every call in the project passes a host tensor, the join knows)
        self.report(test, test=short_code(ctx.module, test), repeated=False if repeated is None else None, if_device=device_params,
                    unless_host="" if device_params else ctx.devices.host_parameter(test, test))
