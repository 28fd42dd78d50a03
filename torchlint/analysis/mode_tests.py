"""Modes a node runs in by the tests around it (``if self.training:``, ``self.training is False and``,
the ``else`` of ``if not use_cache:``), for the bindings: a value bound in one mode never reaches a
use that runs only in the other (descript-audio-codec's ``n_quantizers``, a device tensor only in training)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_shapes import conjuncts, enclosing_tests
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchlint.analysis.tree import Tree

# `self.training` is a module's mode: `train()`/`eval()` set it between calls, never within one forward
_MODE_ATTRIBUTES = frozenset({"self.training"})
_BOOLS = {"True": True, "False": False}


def mode_facts(tree: Tree, node: cst.CSTNode, stop: cst.CSTNode, is_mode: Callable[[str], bool]) -> dict[str, bool]:
    """``{mode: value}`` each mode must have for ``node`` to run below ``stop``, innermost test first;
    a mode is ``self.training`` or a name ``is_mode`` accepts (a parameter never bound again)."""
    facts: dict[str, bool] = {}
    for _, _, test, holds in enclosing_tests(tree, node, stop):
        if test is None:
            continue
        # a false `a and b` says nothing of `a` alone: only a whole test is negated
        for part in conjuncts(test) if holds else [test]:
            fact = _mode_fact(part)
            if fact is not None and (fact[0] in _MODE_ATTRIBUTES or is_mode(fact[0])):
                facts.setdefault(fact[0], fact[1] if holds else not fact[1])
    return facts


def contradict(one: dict[str, bool], other: dict[str, bool]) -> bool:
    """Do two nodes' modes exclude each other (one runs only in training, the other only in eval)?"""
    return any(other.get(mode, value) is not value for mode, value in one.items())


def _mode_fact(part: cst.BaseExpression) -> tuple[str, bool] | None:
    """``(name, value)`` a test of a name alone holds for: ``x`` (True), ``not x``, ``x is False``,
    ``x == True``, ``x is not True``; None for any other test."""
    value = True
    while type(part) is cst.UnaryOperation and type(part.operator) is cst.Not:
        part, value = part.expression, not value
    if type(part) is cst.Comparison and len(part.comparisons) == 1:
        operator, right = part.comparisons[0].operator, part.comparisons[0].comparator
        if type(operator) not in (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual) or type(right) is not cst.Name or right.value not in _BOOLS:
            return None
        part, value = part.left, _BOOLS[right.value] is (value if type(operator) in (cst.Is, cst.Equal) else not value)
    if type(part) not in (cst.Name, cst.Attribute):
        return None
    name = dotted(part)
    return (name, value) if name is not None else None
