"""Which calls of a file may wait for the device's queue: one pass over the file's calls, so
that ``Places.position`` asks whether a read or a call site comes right after a sync only
where some call before it, in its step, could have been one.

Most call sites have none before them (a model's layers, a helper's arithmetic); for each
of them the walk back through the statements before, and the facts it asked of each call
on the way (is it host bookkeeping, does it read a device tensor), cost more than the rest
of its placement.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.sync_ops import SIZED_BY_VALUES, torch_op

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Tensor methods that read a value into Python (the host waits for the device's queue).
READS = frozenset({"item", "tolist", "cpu", "numpy"})
# Methods that may move a tensor to the device (`Devices.move`): a pageable copy waits.
_MOVES = frozenset({"to", "cuda", "type"})


def read_expression(node: cst.CSTNode) -> cst.BaseExpression | None:
    """The value a read reads: ``loss`` for ``loss.item()``, ``t`` for ``int(t)``, ``loss``
    for TensorBoard's ``add_scalar(tag, loss)`` (``.item()`` inside); None for anything else."""
    if type(node) is not cst.Call:
        return None
    func = node.func
    if type(func) is cst.Attribute and func.attr.value in READS and not node.args:
        return func.value
    if type(func) is cst.Name and func.value in ("int", "float", "bool") and len(node.args) == 1:
        return node.args[0].value
    if type(func) is cst.Attribute and func.attr.value == "add_scalar" and len(node.args) >= 2 and node.args[1].keyword is None:
        return node.args[1].value
    return None


class DrainIndex:
    """The calls of one file that may drain the queue (``StepPositions._waits`` may say yes
    to them, for some read): found once, in source order; ``everything`` where any call may
    (the file names ``synchronize``: a helper of it or a name bound to it waits too)."""

    def __init__(self, ctx: FileContext, drained_helper: Callable[[cst.Call], bool]) -> None:
        self.ctx = ctx
        tree = ctx.tree
        self.everything = bool(tree.names_valued("synchronize"))
        # (a call of a helper of this file whose run ends drained, `DrainedEnds`, drains too)
        calls = [] if self.everything else [call for call in tree.nodes(cst.Call) if self._may_wait(call) or drained_helper(call)]
        self._ids = {id(call) for call in calls}
        self._at = [tree.index(call) for call in calls]  # (`nodes` is in pre-order)

    def may_drain(self, call: cst.Call) -> bool:
        """Can ``call`` drain the queue? False is sure; True only says it may."""
        return self.everything or id(call) in self._ids

    def any_before(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is there a call that may drain the queue before ``node`` in its step: after the
        start of ``stop`` when ``node`` is inside it, else of its function (the statements
        before ``node`` that ``Places.position`` walks lie there), else of the module?"""
        if self.everything:
            return True
        tree = self.ctx.tree
        region = stop if stop is not None and tree.is_inside(node, stop) else tree.enclosing_function(node)
        start = tree.index(region) if region is not None else -1
        before = bisect.bisect_left(self._at, tree.index(node)) - 1
        return before >= 0 and self._at[before] > start

    def _may_wait(self, call: cst.Call) -> bool:
        """What ``StepPositions._waits`` may find waiting, in a file that never names
        ``synchronize``: a read, a move to the device, a legacy CUDA class built from data,
        an op whose result's size is its values'."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in _MOVES:
            return True
        if type(func) is cst.Name and call.args and self.ctx.device_makeable.typed_device_class(func) is not None:
            return True
        return read_expression(call) is not None or torch_op(self.ctx, call)[0] in SIZED_BY_VALUES
