"""Autograd's anomaly detection turned on where the file trains."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.training import reaches_training, wraps_training
from torchlint.checks.base import Check

# Calls that turn anomaly mode on when their first argument (`mode`) is true.
_SETTERS = frozenset({
    "torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly", "torch.set_anomaly_enabled",
})
# Context managers (and decorators) that turn it on for what they wrap.
_CONTEXTS = frozenset({"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"})
# Lightning's Trainer runs every step of its `fit()` under `detect_anomaly()` when asked to.
_TRAINERS = frozenset({
    "pytorch_lightning.Trainer", "pytorch_lightning.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer",
    "lightning.Trainer", "lightning.pytorch.Trainer", "lightning.pytorch.trainer.Trainer", "lightning.pytorch.trainer.trainer.Trainer",
})


class AnomalyDetectionOn(Check):
    """`torch.autograd.set_detect_anomaly(True)` or `detect_anomaly()` on a training run's path."""

    code = "TL306"
    name = "anomaly-detection-on"
    cost = Cost.DEBUG_MODE
    message = ("`{call}` turns on autograd's anomaly detection for {scope}: every backward op records "
               "the stack of the forward op that made it and checks its output for NaN, which made a "
               "training step 1.7-2.2x slower on a CPU (rules/TL306)")
    fix_hint = ("Remove it once the NaN is found, or put it behind a flag that is off by default "
                "(`if args.detect_anomaly: torch.autograd.set_detect_anomaly(True)`)")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        name = ctx.qname(node.func)
        if name in _TRAINERS:
            flag = ctx.keyword(node, "detect_anomaly")
            if flag is not None and ctx.constants.bool_value(flag.value, node) is True and ctx.guards.runs_when_reached(node):
                self.report(node, where=Where.TRAIN, call=short_code(ctx.module, node, limit=60), scope="every step the trainer runs")
            return
        if name in _SETTERS:
            mode = ctx.argument(node, 0, "mode")
            if mode is None or ctx.constants.bool_value(mode.value, node) is not True:
                return  # off, or a setting the user passes (`set_detect_anomaly(args.anomaly)`)
        elif name not in _CONTEXTS:
            return
        wraps = type(ctx.tree.parent(node)) in (cst.WithItem, cst.Decorator)
        if wraps:
            if not wraps_training(ctx, node):
                return  # around one step of a debugging session, or behind a flag
        elif not ctx.guards.runs_when_reached(node) or not reaches_training(ctx, node):
            return  # behind a flag or a condition, or in a helper no training code of this file calls
        scope = "everything it wraps" if wraps else "the rest of the process"
        self.report(node, where=Where.TRAIN, call=short_code(ctx.module, node, limit=60), scope=scope)
