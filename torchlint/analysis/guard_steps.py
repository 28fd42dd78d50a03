"""An optimizer step under a guard: gradient accumulation (``if (i + 1) % N == 0: opt.step()``
while the backward runs on every iteration), and a training step made every N iterations
(Rainbow's ``if T % replay_frequency == 0: dqn.learn(mem)``), which is the step itself, not a
rare branch, unless the loop also steps outside it. A mixin of :class:`~torchlint.analysis.guards.Guards`,
whose ``ctx``, ``_rare_guard``, ``_rare_test``, ``_period_words`` and ``timed`` it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_sequence_ends import sequence_end_test
from torchlint.analysis.guard_shapes import KEEPS_OPTIMIZER
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import FUNCTION_OR_CLASS
from torchlint.analysis.values import looks_like_optimizer

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class GuardedSteps:
    """Optimizer steps under a guard (see the module docstring)."""

    ctx: FileContext

    def accumulates_gradients(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` step its optimizer only in a modulo branch (``if (i + 1) % N == 0:
        opt.step()``) while its backward runs on every iteration: gradient accumulation?"""
        tree = self.ctx.tree
        steps = [n for n in tree.descendants(loop) if self._optimizer_step(n)]
        if not steps:
            return False
        for step in steps:
            branch = next((a for a in tree.ancestors(step) if type(a) is cst.If or a is loop), loop)
            if branch is loop or not self._rare_test(branch, loop) or not self._steps_optimizer(branch):  # type: ignore[arg-type]
                return False
        return True

    def _steps_optimizer(self, branch: cst.If) -> bool:
        """Does the branch hold its loop's only optimizer steps (``if (i + 1) % accumulate
        == 0: opt.step()``, or, every N iterations, a whole training step of this file:
        Rainbow's ``if T % replay_frequency == 0: dqn.learn(mem)``)? Then it is the optimizer
        step of gradient accumulation, or the training step itself, every step, not a rare one. A loop or
        function that also steps outside it (lazy regularization every N steps, after the
        step of every batch; TD3's delayed policy update, `if timer % policy_delay == 0:
        pi_optimizer.step()`, after the critic's step in the same `update()`) keeps the branch rare."""
        tree = self.ctx.tree
        trainer = self.ctx.loops._calls_a_trainer
        if not any(self._optimizer_step(n) for n in tree.descendants(branch.body)) \
                and not (self._periodic(branch) and any(type(n) is cst.Call and trainer(n) for n in tree.descendants(branch.body))):
            return False
        return not self._steps_outside(branch)

    def _periodic(self, branch: cst.If) -> bool:
        """Does ``branch`` recur through the run: a modulo of a counter, a wall-clock timer, or the end
        of each decoded sequence (``if (tok == eos_id).any():``)?"""
        return bool(self._period_words(branch)) or self.timed(branch) or sequence_end_test(branch.test, self.ctx.tree.descendants) is not None

    def _steps_outside(self, branch: cst.If) -> bool:
        """Does the loop (or function) around ``branch`` make an optimizer step outside it, or
        call a function of this file that makes a training step?"""
        tree = self.ctx.tree
        scope = next((a for a in tree.ancestors(branch) if type(a) in (cst.For, cst.While) or type(a) in FUNCTION_OR_CLASS), None)
        if scope is None or type(scope) is cst.ClassDef:
            return False
        trainer = self.ctx.loops._calls_a_trainer
        return any((self._optimizer_step(n) or type(n) is cst.Call and trainer(n)) and not tree.is_inside(n, branch) for n in tree.descendants(scope.body))

    def exit_gates_the_step(self, block: cst.IndentedBlock, exit_: cst.CSTNode) -> bool:
        """Does the early exit ``exit_`` of a function's ``block`` skip its training step itself: the
        optimizer steps (or calls of this file's functions that make one) all come after it? drqv2's
        ``update()``: ``if step % self.update_every_steps != 0: return metrics``, then the critic's and
        the actor's updates; each update that passes is a step, and what follows runs once in it.
        A function that stepped before it (the critic's step, then an every-2nd actor step) keeps it rare."""
        known: dict[int, bool] = self.__dict__.setdefault("_gating_exits", {})
        if id(exit_) not in known:
            tree = self.ctx.tree
            function = tree.enclosing_function(exit_)
            trainer = self.ctx.loops._calls_a_trainer
            steps = [n for n in tree.descendants(function.body) if self._optimizer_step(n) or type(n) is cst.Call and trainer(n)] \
                if function is not None and block is function.body else []
            known[id(exit_)] = bool(steps) and all(tree.index(n) > tree.index(exit_) for n in steps)
        return known[id(exit_)]

    def may_guard_a_step(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` rare only by an every-N guard (a modulo or a timer) whose loop or
        function makes no optimizer step outside it? A call there may be the training step
        itself, made in another file (Rainbow's ``if T % replay_frequency == 0:
        dqn.learn(mem)``): the join follows it to a callee that trains, and no further."""
        guard = self._rare_guard(node, stop)
        if type(guard) is not cst.If or not self._periodic(guard):
            return False  # a first pass, an error path, a last iteration: no step run again and again
        if sequence_end_test(guard.test, self.ctx.tree.descendants) is not None:
            return False  # a finished beam's bookkeeping (kospeech's `_get_successor`): a decode loop's, no training step
        return not self._steps_outside(guard)

    def _optimizer_step(self, node: cst.CSTNode) -> bool:
        """``opt.step()``, or a call handed the optimizer (``apply_update(optimizer, loss)``,
        ``scaler.step(opt)``): the step may be made in a helper of another module."""
        if type(node) is not cst.Call:
            return False
        if type(node.func) is cst.Attribute and node.func.attr.value == "step" and self.ctx.loops.is_step_call(node):
            return True
        name = (dotted(node.func) or "").rsplit(".", 1)[-1].lower()
        if any(word in name for word in KEEPS_OPTIMIZER):
            return False  # `save_checkpoint(model, optimizer)` stores it, never steps it
        if not any(looks_like_optimizer(dotted(arg.value) or "") for arg in node.args):
            return False
        # (a function of this file that steps nothing, nanoT5's `extra_stats(args, model, optimizer)` reading its
        # learning rate, is no step: a log every N steps stays rare)
        callee = self.ctx.functions.called(node, self.ctx.qname(node.func))
        return callee is None or self._steps_something(callee)

    def _steps_something(self, function: cst.FunctionDef) -> bool:
        """Does ``function`` make an optimizer step, itself or through a call it hands an optimizer?"""
        known: dict[int, bool] = self.__dict__.setdefault("_stepping_helpers", {})
        if id(function) not in known:
            known[id(function)] = False  # (a helper that calls itself: no step by that call)
            known[id(function)] = any(self._optimizer_step(n) for n in self.ctx.tree.descendants(function.body))
        return known[id(function)]
