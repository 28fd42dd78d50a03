"""A GPU training loop that runs entirely in float32."""

from __future__ import annotations

from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.switches import MIXED_PRECISION, full_precision_trainers, handles_precision
from torchlint.analysis.training import step_functions
from torchlint.checks.base import STEP_PLACEHOLDER, Check


class NoMixedPrecision(Check):
    """Training loop (`.backward()` + `optimizer.step()`) with no autocast in the module."""

    code = "TL501"
    name = "no-mixed-precision"
    cost = Cost.PRECISION
    message = "{what} runs in float32 {why}, leaving tensor cores idle"
    fix_hint = 'Run the forward pass and loss under `torch.autocast("cuda", dtype=torch.bfloat16)` (with fp16, add `torch.amp.GradScaler("cuda")`)'
    default = False
    # (its training steps made for a loop of another file hold where that loop runs on a device)
    device_bound = True

    def finish(self) -> None:
        ctx = self.ctx
        for trainer in full_precision_trainers(ctx):
            # Lightning runs the whole loop at the precision it is given: float32 unless told otherwise
            given = ctx.keyword(trainer, "precision")
            why = f"(`precision={ctx.module.code_for_node(given.value)}`)" if given is not None else "(no `precision`: Lightning's default is 32)"
            # (an explicit `precision=32` is the run's precision; left out, autocast elsewhere may choose it)
            self.report(trainer, where=Where.TRAIN, what="This Lightning trainer", why=why, hint=_LIGHTNING_HINT,
                        unless_switch=MIXED_PRECISION if given is None else "")
        if handles_precision(ctx):
            return  # autocast, a half dtype, a framework's precision: chosen in this module
        loops = ctx.loops.training_loops()
        if loops and ctx.devices.uses_accelerator():
            self.report(loops[0], where=Where.TRAIN, what="This training loop", why="with no `autocast` anywhere in the module")  # one finding per module: autocast is a module-wide decision
        for function in step_functions(ctx):
            # A step a loop of another file runs: it holds where the join finds it per-step, and
            # no file of the project chooses a reduced precision (`with autocast(): step(state, x)`).
            self.report(function.name, where=Where.TRAIN, condition=function, unless_switch=MIXED_PRECISION,
                        what=f"The training step {STEP_PLACEHOLDER}", why="with no `autocast` anywhere in the project")


_LIGHTNING_HINT = 'Give the trainer a reduced precision: `precision="bf16-mixed"` (or `"16-mixed"` on GPUs without bfloat16)'
