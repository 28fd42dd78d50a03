"""Where each call runs, for the step summary: its caller, its hot loop or the loop that is not hot, every-N guards (StepSummarizer's part)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.multiplicity import Where

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class CallPlaces:
    """Where each call runs: the caller, the hot loop's place or the loop that is not hot, and the every-N guards."""

    ctx: FileContext
    keys: dict[int, str]

    def _placement(self, call: cst.Call) -> tuple[str, Where | None, str] | None:
        """(caller key, how often its hot loop runs or None, key of the loop around it that is not hot or
        ""), or None when the call does not run per caller run (module-level code outside
        loops, rare branches)."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(call)
        caller = self.keys[id(function)] if function is not None else ""
        if ctx.in_tests(call):
            return caller, None, ""  # a test's loop runs a library on toy inputs: no training step
        loop = None  # the innermost `for`/`while` around it
        for each in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(each):
                if ctx.guards.rare(call, stop=each):
                    return None  # every N steps, or a first-pass branch
                return caller, ctx.loops.where(each), ""
            if loop is None and (type(each) is cst.For or type(each) is cst.While):
                loop = each
        # Not in a hot loop: a loop around it may still be a step loop (the join decides).
        if function is None and loop is None:
            # module-level code runs once: kept only for the objects it passes (`train_epoch(model, ...)`)
            return ("", None, "") if call.args else None
        if ctx.guards.rare(call, stop=function or loop):
            return None
        return caller, None, ctx.loops.loop_key(loop) if loop is not None else ""

    def _guarded_placement(self, call: cst.Call) -> tuple[str, Where | None, str] | None:
        """:meth:`_placement` of a call that only an every-N guard keeps from running every step,
        in a loop or function that makes no optimizer step outside that guard
        (``Guards.may_guard_a_step``); None for any other call."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(call)
        if ctx.in_tests(call):
            return None
        loop = None
        for each in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(each):
                if not ctx.guards.may_guard_a_step(call, stop=each):
                    return None
                return self.keys[id(function)] if function is not None else "", ctx.loops.where(each), ""
            if loop is None and (type(each) is cst.For or type(each) is cst.While):
                loop = each
        if function is None and loop is None or not ctx.guards.may_guard_a_step(call, stop=function or loop):
            return None
        return self.keys[id(function)] if function is not None else "", None, ctx.loops.loop_key(loop) if loop is not None else ""

    def _every_n_placement(self, call: cst.Call) -> tuple[str, Where | None, str, str] | None:
        """(caller, its hot loop's place, the loop around it, the guard's words) of a call that
        only a recurring guard keeps from running every step (a modulo, a timer) of a hot loop or
        function; None for any other call (a first pass, a last iteration, test code)."""
        ctx = self.ctx
        if ctx.in_tests(call):
            return None  # a test suite's loop is no training run
        function = ctx.tree.enclosing_function(call)
        caller = self.keys[id(function)] if function is not None else ""
        loop = None
        for each in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(each):
                words = ctx.guards.periodic_words(call, stop=each)
                return (caller, ctx.loops.where(each), "", words) if words else None
            if loop is None and (type(each) is cst.For or type(each) is cst.While):
                loop = each
        if function is None:
            return None  # module level: runs once
        words = ctx.guards.periodic_words(call, stop=loop or function)
        return (caller, None, ctx.loops.loop_key(loop) if loop is not None else "", words) if words else None
