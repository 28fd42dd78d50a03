"""What an expression's shape alone says of host values (part of :mod:`torchlint.analysis.host_values`):
the list literals a sequence is made of, a tokenizer asked for PyTorch tensors, a value read off
a NumPy call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def sequence_parts(expr: cst.BaseExpression, depth: int = 0) -> list[cst.BaseExpression]:
    """The list or tuple literals a sequence expression is made of (``[a] + [b] * n``: ``[a]``,
    ``[b]``; repetition keeps the items), or [] when it is not one."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        return [expr]
    if not isinstance(expr, cst.BinaryOperation) or depth > 8:
        return []
    if isinstance(expr.operator, cst.Add):
        left, right = sequence_parts(expr.left, depth + 1), sequence_parts(expr.right, depth + 1)
        return left + right if left and right else []
    if isinstance(expr.operator, cst.Multiply):
        return sequence_parts(expr.left, depth + 1) or sequence_parts(expr.right, depth + 1)
    return []


def returns_host_tensors(call: cst.Call, ctx: FileContext) -> bool:
    """A tokenizer or processor asked for PyTorch tensors builds them on the host."""
    arg = ctx.keyword(call, "return_tensors")
    return arg is not None and isinstance(arg.value, cst.SimpleString) and arg.value.value.strip("\"'") == "pt"


def numpy_rooted(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """Is ``expr`` read off a NumPy call through attributes, indexes and methods (``np.finfo(t).eps``,
    ``np.load(f)["w"].mean()``)? NumPy gives NumPy values and Python values, whatever is read off them."""
    for _ in range(12):
        if type(expr) in (cst.Attribute, cst.Subscript):
            expr = expr.value  # type: ignore[attr-defined]
        elif type(expr) is cst.Call:
            qualified = ctx.qname(expr.func) or ""
            if qualified:
                return qualified.startswith("numpy.")
            if type(expr.func) is not cst.Attribute:
                return False
            expr = expr.func.value
        else:
            return False
    return False
