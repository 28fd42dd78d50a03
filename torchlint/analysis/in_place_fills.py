"""Statements that only write into a tensor in place: ``x[:, 0] = 4``, ``x.fill_(v)``, ``x += 1``.

``self_loop_attr = torch.zeros(n, 2)``, then ``self_loop_attr[:, 0] = 4``, then
``self_loop_attr = self_loop_attr.to(edge_attr.device)`` (pretrain-gnns' GIN layers): the fill
between the factory and the move changes the values, not where the tensor lives, and the
factory could have made it on the device for the fill to run there (TL110).
"""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.tree import children


def fills_in_place(statement: cst.CSTNode, tracked: set[str]) -> bool:
    """Is ``statement`` a line that only writes into a tracked tensor in place, from values that do not
    read it: an item or slice assignment, an augmented assignment, or an in-place method
    (``x.fill_(0)``, ``x[:, 1].zero_()``)?"""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Subscript:
        return _written(small.targets[0].target, tracked) and not _reads(small.value, tracked)  # type: ignore[arg-type]
    if type(small) is cst.AugAssign:
        return _written(small.target, tracked) and not _reads(small.value, tracked)
    if type(small) is cst.Expr and type(small.value) is cst.Call and type(small.value.func) is cst.Attribute:
        call = small.value
        method = call.func.attr.value  # type: ignore[attr-defined]
        return method.endswith("_") and not method.startswith("_") and _written(call.func.value, tracked) \
            and not any(_reads(arg.value, tracked) for arg in call.args)  # type: ignore[attr-defined]
    return False


def _written(target: cst.BaseExpression, tracked: set[str]) -> bool:
    """``x``, ``x[:, 0]``, ``x[0][1]``: the tracked tensor itself or a part of it (indices that do not read it)."""
    while type(target) is cst.Subscript:
        if any(_reads(element, tracked) for element in target.slice):
            return False  # `x[x > 0] = 1`: the mask reads it
        target = target.value
    return dotted(target) in tracked


def _reads(node: cst.CSTNode, tracked: set[str]) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) in (cst.Name, cst.Attribute) and dotted(current) in tracked:
            return True
        stack.extend(children(current))
    return False
