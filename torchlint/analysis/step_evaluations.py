"""A wait right before an evaluation that reads anyway (a part of ``StepPositions``): where a
loop's iteration makes its training step and then, on every iteration, calls an evaluation of
this file whose results come to the host (ogb's full-batch ``loss = train(...)``, then
``result = test(...)``), a read at the step's end waits for nothing that evaluation's own read
would not wait for: only the refill of the evaluation's first kernels (``Position.BEFORE_EVAL``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.step_syncs import read_value
from torchlint.analysis.subtree_calls import INTO_LOOPS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class StepEvaluations:
    """Reads before an every-iteration evaluation (``Position.BEFORE_EVAL``)."""

    ctx: FileContext

    def _evaluation_next(self, node: cst.CSTNode, stop: cst.For | cst.While) -> bool:
        """Is the iteration's next device work after ``node`` a plain statement whose working
        calls are all evaluations of this file (``evaluates``), run on every iteration?"""
        for statement in self._statements_around(node, stop, after=True):  # type: ignore[attr-defined]
            # (an evaluation's model may run in a loop of its own: products' SIGN `test()` over its loader)
            working = [call for call in self._turn_calls(statement, stop) if self._may_queue(call) or self.evaluates(call)]  # type: ignore[attr-defined]
            if not working:
                continue  # host work between (a logger's bookkeeping): the queue still holds the step's tail
            # The first work after the read decides: a model call or a step of its own would wait behind it.
            # (A statement with branches may skip the evaluation; `if epoch % 5 == 0: test()` is no work here at all.)
            return type(statement) is cst.SimpleStatementLine and all(self.evaluates(call) for call in working)
        return False

    def evaluates(self, call: cst.Call) -> bool:
        """A call of a function of this file that runs the model without grad (decorated so, or
        putting a model in eval mode) and brings its results to the host: a read in its body, or
        metrics it returns (an evaluation's results are printed or logged)."""
        ctx = self.ctx
        function = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
        if function is None:
            return False
        known: dict[int, bool] = self.__dict__.setdefault("_evaluations", {})  # each helper scanned once
        if id(function) not in known:
            loops = ctx.loops
            calls = loops.own_calls(function.body, INTO_LOOPS)
            if any(ctx.method_name(c) in ("backward", "step") and loops.is_step_call(c) for c in calls):
                known[id(function)] = False  # a training helper that also returns its loss is no evaluation
                return False
            models = [c for c in calls if loops.is_step_call(c)]
            # (no grad, or a model put in eval mode: `model.eval()` then `model(x)`)
            no_grad = any(ctx.grad.is_disabled(c) for c in models) or any(ctx.method_name(c) == "eval" and not c.args for c in calls)
            runs_model = bool(models)
            # (an evaluation that returns nothing and reads nothing keeps its results on the device)
            reads = any(read_value(ctx, c) is not None for c in calls) or any(
                type(n) is cst.Return and n.value is not None for n in loops.own_nodes(function.body))
            known[id(function)] = no_grad and runs_model and reads
        return known[id(function)]
