"""A GPU training loop in float32 that never allows TF32 matmuls."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost, Where
from torchlint.checks.base import Check

# What allows TF32 (or says the precision was chosen): the setting, its backend flags, and
# the newer per-backend `fp32_precision` knobs.
_TF32_SETTINGS = ("torch.set_float32_matmul_precision", "torch.backends.cuda.matmul.allow_tf32",
                  "torch.backends.cudnn.allow_tf32", "torch.backends.fp32_precision",
                  "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.fp32_precision")
# Mixed precision makes the matmuls half precision anyway (TL501 covers its absence).
_REDUCED = ("torch.autocast", "torch.amp", "torch.cuda.amp", "torch.float16", "torch.half", "torch.bfloat16")


class Fp32MatmulPrecision(Check):
    """Training loop on an accelerator, in float32, with no `torch.set_float32_matmul_precision(...)`."""

    code = "TL506"
    name = "fp32-matmul-precision"
    cost = Cost.TF32_OFF
    default = False
    message = "This training loop runs its matmuls in full float32: nothing in the module allows TF32, which Ampere and newer GPUs run several times faster"
    fix_hint = 'Call `torch.set_float32_matmul_precision("high")` once at start-up (TF32 for matmuls; "medium" also allows bf16)'

    def finish(self) -> None:
        ctx = self.ctx
        loops = ctx.loops.training_loops()
        if not loops or not ctx.devices.uses_accelerator():
            return  # TF32 is a GPU's
        if ctx.references(*_TF32_SETTINGS) or ctx.references(*_TF32_SETTINGS, prefix=True):
            return  # the precision was chosen
        if ctx.references(*_REDUCED, prefix=True) or ctx.references(*_REDUCED) or ctx.method_calls({"half", "bfloat16"}):
            return  # the matmuls run in reduced precision already
        if any(a.attr.value in ("allow_tf32", "fp32_precision") for a in ctx.tree.nodes(cst.Attribute)):
            return  # set through an alias of the backend module
        self.report(loops[0], where=Where.TRAIN)  # one finding per module: a process-wide setting
