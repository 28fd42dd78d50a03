"""Deterministic kernels switched on for a training run."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.training import reaches_training
from torchlint.checks.base import Check

_DETERMINISTIC_FLAG = "torch.backends.cudnn.deterministic"
_USE_DETERMINISTIC = frozenset({"torch.use_deterministic_algorithms"})


class DeterministicAlgorithmsOn(Check):
    """`torch.backends.cudnn.deterministic = True` or `torch.use_deterministic_algorithms(True)` for training."""

    code = "TL406"
    name = "deterministic-algorithms-on"
    cost = Cost.DETERMINISTIC_KERNELS
    message = ("`{what}` makes every run pick deterministic kernels, which are often slower than the fastest "
               "(and cuDNN's autotuner cannot choose): right when bitwise reproducibility is the point, a cost "
               "otherwise")
    fix_hint = ("Keep it if results must match bit for bit; otherwise drop it (seeding alone makes runs "
                "comparable) or put it behind a `--deterministic` flag")

    def visit_Assign(self, node: cst.Assign) -> None:
        ctx = self.ctx
        if not any(ctx.qname(t.target) == _DETERMINISTIC_FLAG for t in node.targets):
            return
        if ctx.constants.bool_value(node.value, node) is True:
            self._report(node, short_code(ctx.module, node, limit=60))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) not in _USE_DETERMINISTIC:
            return
        mode = ctx.argument(node, 0, "mode")
        if mode is not None and ctx.constants.bool_value(mode.value, node) is True:
            self._report(node, short_code(ctx.module, node, limit=60))

    def _report(self, node: cst.CSTNode, what: str) -> None:
        ctx = self.ctx
        # A switch behind a flag (`if args.deterministic:`) or a setting the user passes is
        # the user's choice made per run; one outside any training path costs no step. A
        # helper no code of this file calls (`utils.seed_everything`) is there for the runs
        # of other modules: it counts.
        if ctx.guards.runs_when_reached(node) and reaches_training(ctx, node, exported=True):
            self.report(node, where=Where.TRAIN, what=what)
