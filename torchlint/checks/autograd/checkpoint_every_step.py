"""A model's checkpoint written on every training step, with no guard that makes it rare."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.checkpoints import called_only_when_rare, file_churn, improvement_guard, saved_checkpoint
from torchlint.analysis.context import short_code
from torchlint.analysis.impact import LONG_STEP_COSTS, Cost
from torchlint.analysis.multiplicity import Where
from torchlint.checks.base import Check


class CheckpointEveryStep(Check):
    """`torch.save(model.state_dict(), path)` (or a library's checkpoint save) on every training step."""

    code = "TL312"
    name = "checkpoint-every-step"
    cost = Cost.CHECKPOINT_SAVE
    per_step = True
    quiet_every_n = True
    message = "`{call}` writes {what} to disk on every step of {loop}{churn}"
    fix_hint = ("Save every N steps (`if step % save_every == 0:`), only on an improvement (`if val_loss < best:`), "
                "or after the loop; at the end of an epoch where an epoch holds many steps")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        what = saved_checkpoint(ctx, node)
        if what is None:
            return
        loop = ctx.loops.local_hot_loop(node)
        stop = loop or ctx.tree.enclosing_function(node)
        if ctx.guards.rare(node, stop=stop) or improvement_guard(ctx, node, stop) is not None:
            return  # every N steps, on an improvement, or once on the way out: a save made rare on purpose
        if loop is None and ctx.loops.step_condition(node) is None:
            return  # module-level code outside any loop: once, after (or instead of) training
        if loop is None and type(stop) is cst.FunctionDef and called_only_when_rare(ctx, stop):
            return  # a saver this file calls only on an improvement (`if acc > best: save_model(...)`)
        cost, churn = None, []
        if loop is not None:
            if ctx.loops.where(loop) is not Where.TRAIN:
                return  # an epoch's end beside its batch loop, an evaluation's or a sampler's loop: no training step's
            # a full-batch epoch (pyGAT's `for epoch in ...: train(epoch); torch.save(...)`) is one long step
            cost = LONG_STEP_COSTS[self.cost] if ctx.loops.full_batch(loop) else None
            churn = file_churn(ctx, loop)
        words = ", ".join(f"`{short_code(ctx.module, c.func)}()`" for c in churn)
        self.report(node, cost=cost, related=tuple(churn), call=short_code(ctx.module, node, limit=60), what=what,
                    churn=f", and lists or removes files with {words} on every step too" if churn else "")
