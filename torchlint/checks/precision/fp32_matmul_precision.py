"""A GPU training loop in float32 that never allows TF32 matmuls."""

from __future__ import annotations

from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.switches import MATMUL_PRECISION_CHOSEN, chooses_matmul_precision
from torchlint.analysis.training import step_functions
from torchlint.checks.base import STEP_PLACEHOLDER, Check


class Fp32MatmulPrecision(Check):
    """Training loop on an accelerator, in float32, with no `torch.set_float32_matmul_precision(...)`."""

    code = "TL506"
    name = "fp32-matmul-precision"
    cost = Cost.TF32_OFF
    default = False
    message = ("{what} runs its matmuls in full float32: nothing in the {scope} allows TF32, which Ampere and newer GPUs "
               "run several times faster")
    fix_hint = 'Call `torch.set_float32_matmul_precision("high")` once at start-up (TF32 for matmuls; "medium" also allows bf16)'
    # (its training steps made for a loop of another file hold where that loop runs on a device)
    device_bound = True

    def finish(self) -> None:
        ctx = self.ctx
        if chooses_matmul_precision(ctx):
            return  # TF32 allowed, float32's precision chosen, or the matmuls reduced anyway
        loops = ctx.loops.training_loops()
        if loops and ctx.devices.uses_accelerator():  # (TF32 is a GPU's)
            self.report(loops[0], where=Where.TRAIN, what="This training loop", scope="module")  # one finding per module: a process-wide setting
        for function in step_functions(ctx):
            # A step a loop of another file runs: it holds where the join finds it per-step on a
            # device, and no file of the project sets the precision (usually the launcher does).
            self.report(function.name, where=Where.TRAIN, condition=function, unless_switch=MATMUL_PRECISION_CHOSEN,
                        what=f"The training step {STEP_PLACEHOLDER}", scope="project")
