"""What a call passes, read from CPython's ``ast`` for the light summary (:mod:`analysis.light`), in
the form the libcst summary records it: the arguments given, those given a literal, those given a
falsy literal (a flag left off)."""

from __future__ import annotations

import ast


def given_arguments(call: ast.Call) -> tuple[int, tuple[str, ...]] | None:
    """What ``compiled_roots.given_arguments`` says of a call: positional arguments and keywords passed (a literal
    None counts as left out); None where ``*args``/``**kwargs`` may pass anything."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    positional = list(call.args)
    while positional and _constant(positional[-1], None):
        positional.pop()
    return len(positional), tuple(k.arg for k in call.keywords if k.arg is not None and not _constant(k.value, None))


def literal_args(call: ast.Call) -> tuple[tuple[int | str, object], ...]:
    """What ``summary_arguments.literal_args`` says: arguments passed a number, bool, None or string literal."""
    found: list[tuple[int | str, object]] = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if _literal(arg):
            found.append((position, arg.value))  # type: ignore[attr-defined]
    found.extend((k.arg, k.value.value) for k in call.keywords if k.arg is not None and _literal(k.value))  # type: ignore[attr-defined]
    return tuple(found)


def own_settings(call: ast.Call, params: set[str], config_names: frozenset[str]) -> tuple[tuple[int | str, str, str], ...]:
    """What ``summary_arguments._own_settings`` says: arguments that are a setting of one of the caller's
    ``params`` (never rebound) of a config object's name (``args.contrastive_weight``): (where, parameter, setting)."""
    def setting(value: ast.expr) -> tuple[str, str] | None:
        name = value.value.id if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) else None
        return (name, value.attr) if name in params and name in config_names else None  # type: ignore[union-attr]
    found: list[tuple[int | str, str, str]] = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if (named := setting(arg)) is not None:
            found.append((position, *named))
    found.extend((k.arg, *named) for k in call.keywords if k.arg is not None and (named := setting(k.value)) is not None)
    return tuple(found)


def _literal(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and type(value.value) in (int, float, bool, str, type(None))


def falsy_args(call: ast.Call) -> tuple[int | str, ...]:
    """What ``summary_arguments.falsy_args`` says: arguments passed a literal False, 0 or "" (a flag left off)."""
    found: list[int | str] = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if _constant(arg, False) or _constant(arg, 0) or _constant(arg, ""):
            found.append(position)
    found.extend(k.arg for k in call.keywords if k.arg is not None and (_constant(k.value, False) or _constant(k.value, 0) or _constant(k.value, "")))
    return tuple(found)


def _constant(node: ast.AST, value: object) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value
