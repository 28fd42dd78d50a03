"""Where the source made the object a runtime record names (stdlib ``ast``, no libcst).

A runtime finding is recorded where the object was used (an optimizer's ``step()``), but
its remedy goes where the object was made (``Adam(params, foreach=True)``): the card
should point there.
"""

from __future__ import annotations

import ast
from pathlib import Path


def constructed_at(path: str, cls: str, used_at: int) -> int | None:
    """The line of the ``cls(...)`` call that made the object whose method is called at
    line ``used_at`` of ``path`` (``opt.step()`` -> ``opt = torch.optim.Adam(...)``):
    the one bound to the receiver's name, else the file's only ``cls(...)`` call; None
    when the file holds none, or several and the receiver names none of them."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    made = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _name(node.func) == cls]
    if not made:
        return None
    receiver = _receiver(tree, used_at)
    if receiver is not None:
        bound = [node.value.lineno for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
                 and node.value in made and any(_dotted(t) == receiver for t in _targets(node))]
        if bound:
            return max((line for line in bound if line <= used_at), default=bound[0])
    return made[0].lineno if len(made) == 1 else None


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _dotted(node: ast.expr) -> str | None:
    """``opt`` or ``self.opt``: how a receiver is written."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def _receiver(tree: ast.Module, line: int) -> str | None:
    """The object whose ``step()`` is called at ``line`` (``opt`` in ``opt.step()``)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
            return _dotted(node.func.value)
    return None
