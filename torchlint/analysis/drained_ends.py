"""Functions whose every run ends drained: their last device work is followed, surely, by an
explicit synchronize or a device read (a timer's ``stop()`` ending in ``torch.cuda.synchronize()``,
a helper whose last line is ``x = out.cpu()``), with only host work after it. A read right after a
call of one waits for almost nothing: the call is a sync for "right after" (``StepSyncs._waits``
in its own file; ``FileSummary.drained_ends`` and ``drained_tails`` for the join). A part of
:class:`~torchlint.analysis.step_syncs.StepSyncs`, whose walks it reuses."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# How many helpers deep a tail is followed in the file (`h0` ending in `h1()`, ending in `h2()`, ...).
_MAX_DEPTH = 8

# Statements made only of small statements: a line, or a one-line body after `def ...:`.
_SIMPLE = (cst.SimpleStatementLine, cst.SimpleStatementSuite)


class DrainedEnds:
    """Which functions of one file end drained, and which end in a call the join must judge."""

    ctx: FileContext

    def ends_drained(self, function: cst.FunctionDef) -> bool:
        """Does every run of ``function`` end drained (its tail's last wait after its last device work)?"""
        return self._tail_of(function)[0] is True

    def drained_tail_call(self, function: cst.FunctionDef) -> cst.Call | None:
        """The call of another file's function (or a method this file cannot see into) that decides
        whether ``function`` ends drained: its tail's last call that is no host work (``self.timer.stop()``,
        ``misc.sync_all()``); the join asks whether that one ends drained. None where this file decides."""
        return self._tail_of(function)[1]

    def call_right_before(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> cst.Call | None:
        """The call of another file's function (or a method this file cannot see into) that ran, surely,
        right before ``node`` in its step with only host work between (``self.sync_all()``, then
        ``loss.item()``): where every function it may run ends drained (the join's
        ``FileSummary.drained_ends``), ``node`` is right after a sync. None where anything else came
        first. Asked only of a few findings' reads: the walk is the one ``_after_sync`` takes."""
        tree = self.ctx.tree
        statement = tree.statement_of(node)
        if statement is None or any(type(n) is cst.Call and not self._quiet(n) for n in tree.descendants(node)):
            return None  # the read waits for its own arguments' work
        start = tree.index(node)
        own = [n for n in self._finish_order(statement) if tree.index(n) < start and not tree.is_inside(node, n)]  # type: ignore[attr-defined]
        for calls, surely_ran, statement_before in itertools.chain([(own, True, None)], self._ran_before(node, stop)):  # type: ignore[attr-defined]
            if statement_before is not None and self._tensor_arithmetic(statement_before):  # type: ignore[attr-defined]
                return None
            for call in calls:
                if self._quiet(call):  # type: ignore[attr-defined]
                    continue
                return call if surely_ran and self._elsewhere(call) else None
        return None

    def _tail_of(self, function: cst.FunctionDef) -> tuple[bool | None, cst.Call | None]:
        known: dict[int, tuple[bool | None, cst.Call | None]] = self.__dict__.setdefault("_drained_ends", {})
        if id(function) not in known:
            known[id(function)] = (False, None)  # (a recursive helper asked while its tail is walked: not drained)
            depth = self.__dict__.get("_tail_depth", 0)
            if depth >= _MAX_DEPTH:
                return known[id(function)]  # (a chain of helpers each ending in the next: not followed past a few)
            self.__dict__["_tail_depth"] = depth + 1
            try:
                # (a one-line `def stop(self): torch.cuda.synchronize()` is one statement: its suite)
                body = function.body.body if type(function.body) is cst.IndentedBlock else (function.body,)
                found = self._block_tail(body)
            finally:
                self.__dict__["_tail_depth"] = depth
            # (an early `if not dist.is_initialized(): return`, detr's `synchronize_between_processes`: some runs end there, undrained)
            known[id(function)] = (False, None) if found != (False, None) and self._exits_early(function, body[-1]) else found
        return known[id(function)]

    def _exits_early(self, function: cst.FunctionDef, last: cst.CSTNode) -> bool:
        """Does ``function`` return (or yield) anywhere but in its last statement?"""
        tree = self.ctx.tree
        return any(type(n) in (cst.Return, cst.Yield) and tree.enclosing_function(n) is function and not tree.is_inside(n, last)
                   for n in tree.descendants(function.body))

    def _block_tail(self, statements: Sequence[cst.CSTNode]) -> tuple[bool | None, cst.Call | None]:
        """Walk ``statements`` last first: (True, None) at a drain before any device work, (False, call)
        at a call whose callee another file holds (the join decides), (False, None) at device work or a
        branch, (None, None) where only host work was met (the statements before decide)."""
        for statement in reversed(statements):
            if type(statement) is cst.If and (chosen := self.ctx.guards.cuda_branch(statement)) is not None:
                # `if torch.cuda.is_available(): torch.cuda.synchronize()`: the block a run on the GPU takes
                found = self._block_tail(chosen.body if type(chosen) is cst.IndentedBlock else ())  # type: ignore[attr-defined]
                if found[0] is not None:
                    return found
                continue
            if type(statement) not in _SIMPLE or self._tensor_arithmetic(statement):  # type: ignore[attr-defined]
                return False, None  # a branch or a loop may not drain; an operator on a device tensor queues a kernel
            for call in self._finish_order(statement):  # type: ignore[attr-defined]
                if self._waits(call, None):  # type: ignore[attr-defined]
                    return True, None
                if self._quiet(call):  # type: ignore[attr-defined]
                    continue
                return False, call if self._elsewhere(call) else None
        return None, None

    def _drained_helper(self, call: cst.Call) -> bool:
        """A call of a function of this file that ends drained: a sync for the read right after it."""
        helper = self.ctx.functions.called(call, self.ctx.qname(call.func))
        return helper is not None and self.ends_drained(helper)

    def _elsewhere(self, call: cst.Call) -> bool:
        """A call whose callee this file cannot see into: not a function of it, not a library's
        function or tensor method that queues work (``misc.sync_all()``, ``self.timer.stop()``)."""
        ctx = self.ctx
        if ctx.functions.called(call, ctx.qname(call.func)) is not None:
            return False
        qualified = ctx.qname(call.func)
        return qualified is None or not qualified.startswith("torch")
