"""Sanity checks of a tensor's values: ``if torch.min(y) < -1.: print(...)`` (a range or NaN test
whose body only reports), and tests that hold only once a NaN or an infinity is there. The
:class:`~torchlint.analysis.guards.Guards` of a file and the sync checks put them to use."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted

# What a sanity check reduces a tensor to before testing it against a bound.
_SANITY_REDUCTIONS = frozenset({"min", "max", "amin", "amax", "isnan", "isinf", "isfinite", "any", "all"})
_REPORTS = frozenset({"print", "warnings.warn", "warn", "warning", "error", "info", "debug", "critical", "exception"})


def reports_bad_values(branch: cst.If) -> bool:
    """``if torch.min(y) < -1.: print('min value is ', torch.min(y))``: a sanity check of a
    tensor's range (or NaNs) whose body only reports: it runs when the data is wrong, and what
    the report reads is paid then, not on every step (the test itself is read each step)."""
    body = branch.body.body if type(branch.body) is cst.IndentedBlock else ()
    if not body or branch.orelse is not None:
        return False
    for statement in body:
        if type(statement) is not cst.SimpleStatementLine:
            return False
        for small in statement.body:
            if type(small) in (cst.Raise, cst.Assert):
                continue
            if not (type(small) is cst.Expr and type(small.value) is cst.Call and _reports(small.value)):
                return False
    return _checks_a_range(branch.test)


def only_reports_bad_values(branch: cst.CSTNode) -> bool:
    """``if torch.min(y) < -1.: print('min value is ', torch.min(y))`` (hifi-gan's ``mel_spectrogram``):
    a sanity check (:func:`reports_bad_values`) whose body only prints, logs or warns, no ``raise`` nor
    ``assert``: it changes nothing the step computes or whether it goes on, so the read of its test
    buys the step nothing (a check that stops the run on a bad value is a choice the code makes)."""
    if type(branch) is not cst.If or not reports_bad_values(branch):
        return False
    return not any(isinstance(small, (cst.Raise, cst.Assert)) for statement in branch.body.body  # type: ignore[union-attr]
                   for small in statement.body)  # type: ignore[union-attr]


def only_after_a_nan(test: cst.BaseExpression) -> bool:
    """Does ``test`` hold only once a NaN or an infinity is there: ``x.isnan().any()``,
    ``torch.isinf(x).any()``, ``not torch.isfinite(loss).all()``, ``math.isnan(v)``, joined by
    ``|``/``or`` (each such a test) or ``&``/``and`` (one is enough)? Whatever its body does
    (a report, a rescue, a debugger), it never runs in a healthy training or inference step."""
    kind, operator = type(test), getattr(test, "operator", None)
    if kind in (cst.BooleanOperation, cst.BinaryOperation) and type(operator) in (cst.Or, cst.BitOr):
        return only_after_a_nan(test.left) and only_after_a_nan(test.right)  # type: ignore[attr-defined]
    if kind in (cst.BooleanOperation, cst.BinaryOperation) and type(operator) in (cst.And, cst.BitAnd):
        return only_after_a_nan(test.left) or only_after_a_nan(test.right)  # type: ignore[attr-defined]
    if kind is cst.UnaryOperation and type(operator) is cst.Not:
        inner = test.expression  # type: ignore[attr-defined]
        return _reduction(inner) == "all" and _tests_values(inner.func.value, ("isfinite",))  # `not torch.isfinite(x).all()`
    if _reduction(test) == "any":
        return _tests_values(test.func.value, ("isnan", "isinf"))  # type: ignore[attr-defined]
    return _tests_values(test, ("isnan", "isinf"))  # `if torch.isnan(loss):`, `if math.isnan(v):`


def _tests_values(expr: cst.BaseExpression, names: tuple[str, ...]) -> bool:
    """``torch.isnan(x)``, ``x.isnan()``, ``math.isnan(v)`` (one of ``names``), brackets aside."""
    return type(expr) is cst.Call and _reduction(expr) in names


def _reports(call: cst.Call) -> bool:
    name = dotted(call.func) or ""
    return name in _REPORTS or name.rsplit(".", 1)[-1] in _REPORTS and "." in name


def _checks_a_range(test: cst.BaseExpression) -> bool:
    """``torch.min(y) < -1.``, ``x.max() > 1``, ``torch.isnan(loss).any()``: a reduction of
    a tensor tested against a constant bound, or a NaN test."""
    for part in _operands(test):
        if isinstance(part, cst.UnaryOperation):
            part = part.expression
        if isinstance(part, cst.Comparison) and len(part.comparisons) == 1:
            bound = part.comparisons[0].comparator
            if isinstance(bound, cst.UnaryOperation):
                bound = bound.expression
            if isinstance(bound, (cst.Integer, cst.Float)) and _reduced(part.left):
                return True
        elif _reduced(part) and _reduction(part) in ("isnan", "isinf", "isfinite", "any", "all"):
            return True
    return False


def _operands(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation):
        return _operands(test.left) + _operands(test.right)
    return [test]


def _reduction(expr: cst.BaseExpression) -> str | None:
    if not isinstance(expr, cst.Call):
        return None
    func = expr.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None


def _reduced(expr: cst.BaseExpression) -> bool:
    """A reduction call (``torch.min(y)``, ``y.abs().max()``, ``torch.isnan(x).any()``)."""
    return _reduction(expr) in _SANITY_REDUCTIONS
