"""A guard's test of a name or attribute alone, for truth or against a literal (``top_p > 0``,
``not greedy``, ``self.schedule == "linear"``, ``method in ["a", "b"]``), as plain data the join can
keep (``compared``; ``switch_words.holds`` says whether it holds for a value), and the literals
themselves (``literal``): shared by the guards on parameters' defaults (``guard_defaults``), on what
every call passes (``guard_never_taken``), on switches (``guard_switches``) and the call summaries."""

from __future__ import annotations

import libcst as cst

_COMPARISONS = {cst.LessThan: "lt", cst.LessThanEqual: "le", cst.GreaterThan: "gt",
                cst.GreaterThanEqual: "ge", cst.Equal: "eq", cst.NotEqual: "ne"}
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_NAMED = {"True": True, "False": False, "None": None}


def literal(value: cst.BaseExpression | None) -> tuple[str, object] | None:
    """The text and value of a number, bool, None or string literal (``0.0``, ``-1``,
    ``False``, ``"multistep"``); None for anything else."""
    sign = ""
    if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
        sign, value = "-", value.expression
    if type(value) in (cst.Integer, cst.Float):
        try:
            number = value.evaluated_value  # type: ignore[union-attr]
        except ValueError:
            return None
        return f"{sign}{value.value}", -number if sign else number  # type: ignore[union-attr]
    if not sign and type(value) is cst.Name and value.value in _NAMED:
        return value.value, _NAMED[value.value]
    if not sign and type(value) is cst.SimpleString and type(text := value.evaluated_value) is str:
        return value.value, text  # `method="multistep"`, against `if method == "singlestep":`
    return None


def compared(part: cst.BaseExpression, identity: bool = False) -> tuple[cst.BaseExpression, str, object] | None:
    """``(operand, test, constant)`` for a conjunct that tests a name or attribute alone, for
    truth or against a constant (``top_p > 0``, ``0 < p`` as ``p > 0``, ``top_k``, ``not greedy``,
    ``self.schedule == "linear"``, ``method in ["a", "b"]``): ``test`` is ``"truth"``, ``"not"``, ``"in"``,
    ``"not_in"`` (the constant a tuple) or an ``operator`` name, as
    plain data the join can keep (``holds`` says whether it holds for a value)."""
    if type(part) in (cst.Name, cst.Attribute):
        return part, "truth", None
    if type(part) is cst.UnaryOperation and type(part.operator) is cst.Not and type(part.expression) in (cst.Name, cst.Attribute):
        return part.expression, "not", None
    if type(part) is not cst.Comparison or len(part.comparisons) != 1:
        return None
    if identity and type(part.comparisons[0].operator) in (cst.Is, cst.IsNot) and type(left := part.left) in (cst.Name, cst.Attribute) \
            and type(none := part.comparisons[0].comparator) is cst.Name and none.value == "None":
        return left, "is_" if type(part.comparisons[0].operator) is cst.Is else "is_not", None  # (asked for: `tails is None`, an `operator` name)
    left, right = part.left, part.comparisons[0].comparator
    if type(part.comparisons[0].operator) in (cst.In, cst.NotIn) and type(left) in (cst.Name, cst.Attribute) and type(right) in (cst.List, cst.Tuple, cst.Set):
        members = [literal(e.value) for e in right.elements if type(e) is cst.Element]  # `method in ["singlestep", "singlestep_fixed"]`
        if len(members) != len(right.elements) or None in members:
            return None
        return left, "in" if type(part.comparisons[0].operator) is cst.In else "not_in", tuple(m[1] for m in members)  # type: ignore[index]
    if type(part.comparisons[0].operator) not in _COMPARISONS:
        return None
    name = _COMPARISONS[type(part.comparisons[0].operator)]
    if type(left) in (cst.Name, cst.Attribute) and (constant := literal(right)) is not None:
        return left, name, constant[1]
    if type(right) in (cst.Name, cst.Attribute) and (constant := literal(left)) is not None:
        return right, _FLIPPED.get(name, name), constant[1]  # `0 < p`: `p > 0`
    return None
