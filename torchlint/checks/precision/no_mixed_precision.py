"""A GPU training loop that runs entirely in float32."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost, Where
from torchlint.checks.base import Check

# Anything that says the script already handles precision itself.
_PRECISION_APIS = ("torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp", "apex.amp", "torch.float16", "torch.half", "torch.bfloat16")


class NoMixedPrecision(Check):
    """Training loop (`.backward()` + `optimizer.step()`) with no autocast in the module."""

    code = "TL501"
    name = "no-mixed-precision"
    cost = Cost.PRECISION
    message = "This training loop runs in float32 with no `autocast` anywhere in the module, leaving tensor cores idle"
    fix_hint = 'Run the forward pass and loss under `torch.autocast("cuda", dtype=torch.bfloat16)` (with fp16, add `torch.amp.GradScaler("cuda")`)'
    default = False

    def finish(self) -> None:
        ctx = self.ctx
        loops = ctx.loops.training_loops()
        if not loops or not ctx.devices.uses_accelerator():
            return
        if ctx.references(*_PRECISION_APIS, prefix=True) or ctx.references(*_PRECISION_APIS):
            return
        if ctx.method_calls({"half", "bfloat16", "autocast"}) or ctx.references("accelerate.Accelerator"):
            return  # precision handled by hand or by a framework (`accelerator.autocast()`)
        if _precision_argument(ctx):
            return  # a framework told its precision: `Fabric(precision="bf16-mixed")`, `Trainer(precision=...)`
        self.report(loops[0], where=Where.TRAIN)  # one finding per module: autocast is a module-wide decision


def _precision_argument(ctx) -> bool:  # type: ignore[no-untyped-def]
    """Is some call in the module given ``precision=`` or ``mixed_precision=``?"""
    return any(
        arg.keyword is not None and arg.keyword.value in ("precision", "mixed_precision")
        for call in ctx.tree.nodes(cst.Call)
        for arg in call.args
    )

