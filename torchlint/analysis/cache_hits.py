"""A cache's early return by its shape: ``if key in self._cache: return self._cache[key]`` or
``if self.pe is not None and self.pe.size(1) >= n: return x + self.pe[:, :n]``, then the code
that fills that cache (``self._cache[key] = ...``, ``self.pe = pe``). What follows the return
runs only on a cache miss, once per key or size (fairseq's sinusoidal positional embedding),
not on every call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.tree import Tree

CACHE_MISS_WORDS = "only on a cache miss (built once per key or size, then kept)"


def returns_on_a_cache_hit(tree: Tree, statement: cst.CSTNode, rest: Sequence[cst.CSTNode]) -> bool:
    """Is ``statement`` an ``if`` that returns when a kept cache holds the value, with ``rest``
    (the statements after it in its block) filling that cache?"""
    kept = returned_hit(statement)
    return bool(kept) and any(_fills(tree, node, kept) for node in rest)


def returned_hit(statement: cst.CSTNode) -> set[tuple[str, bool]]:
    """The caches an ``if`` that ends in ``return`` tests for a hit (:func:`_caches_tested`);
    empty for any other statement."""
    if type(statement) is not cst.If or statement.orelse is not None:
        return set()
    body = statement.body.body if type(statement.body) is cst.IndentedBlock else ()
    last = body[-1] if body else None
    if type(last) is not cst.SimpleStatementLine or not any(type(s) is cst.Return for s in last.body):
        return set()
    return _caches_tested(statement.test)


def _caches_tested(test: cst.BaseExpression) -> set[tuple[str, bool]]:
    """(name, by key) of each cache a hit test asks about: ``key in self._cache`` (by key),
    ``self.pe is not None`` (whole); only attributes, never a call's result."""
    parts = [test]
    found: set[tuple[str, bool]] = set()
    while parts:
        part = parts.pop()
        if type(part) is cst.BooleanOperation and type(part.operator) is cst.And:
            parts += [part.left, part.right]
        elif type(part) is cst.Comparison and len(part.comparisons) == 1:
            operator, other = type(part.comparisons[0].operator), part.comparisons[0].comparator
            # (attributes only: a local name, `cache = {}` in the function, is no cache kept between calls)
            if operator is cst.In and "." in (dotted(other) or ""):
                found.add((dotted(other), True))  # type: ignore[arg-type]
            elif operator is cst.IsNot and type(other) is cst.Name and other.value == "None" and "." in (dotted(part.left) or ""):
                found.add((dotted(part.left), False))  # type: ignore[arg-type]
        elif type(part) is cst.Attribute and "." in (dotted(part) or ""):
            # `if self.inited: return`, the flag set after it (`self.inited.data.copy_(torch.Tensor([True]))`,
            # encodec's k-means initialisation of its codebook): what follows runs once, on the first call
            found.add((dotted(part), False))  # type: ignore[arg-type]
    return found


def _sets_a_kept_cache(assign: cst.Assign, kept: set[tuple[str, bool]]) -> bool:
    """``self._cache[key] = v`` for a cache tested by key, ``self.pe = pe`` for one tested whole."""
    for target in (t.target for t in assign.targets):
        if type(target) is cst.Subscript and (dotted(target.value), True) in kept or (dotted(target), False) in kept:
            return True
    return False


def _sets_a_kept_flag(call: cst.Call, kept: set[tuple[str, bool]]) -> bool:
    """``self.inited.data.copy_(torch.Tensor([True]))``, ``self.inited.fill_(1)``: a kept flag set in place, to a true value."""
    func = call.func
    if type(func) is cst.Attribute and func.attr.value in _IN_PLACE_SETS and call.args and not _false(call.args[0].value):
        owner = func.value.value if type(func.value) is cst.Attribute and func.value.attr.value == "data" else func.value
        return (dotted(owner), False) in kept  # type: ignore[arg-type]
    return False


_IN_PLACE_SETS = frozenset({"copy_", "fill_"})


def _false(value: cst.BaseExpression) -> bool:
    """``False``, ``0``, ``None``: an in-place set that clears the flag."""
    return type(value) is cst.Name and value.value in ("False", "None") or type(value) is cst.Integer and value.value == "0"


def _fills(tree: Tree, node: cst.CSTNode, kept: set[tuple[str, bool]]) -> bool:
    """Does ``node`` store into one of the caches ``kept``: ``self._cache[key] = v`` for one
    tested by key, ``self.pe = pe`` for one tested whole? Its assignments and calls from the
    file's one walk (``Tree.nodes_under``), not a libcst visitor over the subtree per question."""
    assigns = [node, *tree.nodes_under(node, cst.Assign)] if type(node) is cst.Assign else tree.nodes_under(node, cst.Assign)
    if any(_sets_a_kept_cache(assign, kept) for assign in assigns):
        return True
    calls = [node, *tree.nodes_under(node, cst.Call)] if type(node) is cst.Call else tree.nodes_under(node, cst.Call)
    return any(_sets_a_kept_flag(call, kept) for call in calls)


def grows_a_kept_cache(tree: Tree, branch: cst.If) -> bool:
    """``if max_pos > self.weights.size(0): ...; self.weights = weights`` (fairseq's sinusoidal
    positional embedding), also ``if self.pe is None or self.pe.size(1) < n: self.pe = ...``:
    the branch builds a kept table again only when it is missing or too small, and keeps it, so
    it runs once per larger size, not on every call."""
    kept: set[tuple[str, bool]] = set()
    parts: list[cst.BaseExpression] = [branch.test]
    while parts:
        part = parts.pop()
        if type(part) is cst.BooleanOperation and type(part.operator) is cst.Or:
            parts += [part.left, part.right]
        elif type(part) is cst.Comparison and len(part.comparisons) == 1:
            operator, other = type(part.comparisons[0].operator), part.comparisons[0].comparator
            if operator is cst.Is and type(other) is cst.Name and other.value == "None" and "." in (dotted(part.left) or ""):
                kept.add((dotted(part.left), False))  # type: ignore[arg-type]
            elif operator in (cst.GreaterThan, cst.GreaterThanEqual, cst.LessThan, cst.LessThanEqual):
                kept.update((name, False) for side in (part.left, other) if (name := _sized(side)) is not None)
    return bool(kept) and _fills(tree, branch.body, kept)


def _sized(expr: cst.BaseExpression) -> str | None:
    """``self.weights`` of ``self.weights.size(0)``, ``self.weights.shape[0]``, ``len(self.weights)``:
    a kept attribute whose size is compared (a local name is no cache kept between calls)."""
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value == "size":
        name = dotted(expr.func.value)
    elif type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":
        name = dotted(expr.value.value)
    elif type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "len" and len(expr.args) == 1:
        name = dotted(expr.args[0].value)
    else:
        return None
    return name if name is not None and "." in name else None
