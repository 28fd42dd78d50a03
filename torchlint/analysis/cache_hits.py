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
from torchlint.analysis.positions import PlainCodegen

if TYPE_CHECKING:
    from torchlint.analysis.tree import Tree

CACHE_MISS_WORDS = "only on a cache miss (built once per key or size, then kept)"
# A membership test whose key is never the one stored (`never_hit`): the branch runs on every call.
NEVER_HIT_WORDS = "the cache never hits (`{tested}` tested, `{stored}` stored)"


def never_hit(branch: cst.CSTNode) -> tuple[cst.BaseExpression, cst.Subscript] | None:
    """``if fmax not in mel_basis: mel_basis[str(fmax) + '_' + str(y.device)] = ...`` (hifi-gan's
    ``mel_spectrogram``): the branch stores into the cache it tests, but never under the key it
    tests, so the test never finds it and the branch runs on every call. (the key tested, the first
    store), else None: a real cache stores under the key it tests (the same expression, or one name
    bound to the key once and used for both)."""
    if type(branch) is not cst.If or type(branch.test) is not cst.Comparison or len(branch.test.comparisons) != 1 \
            or type(branch.test.comparisons[0].operator) is not cst.NotIn:
        return None
    cache = dotted(branch.test.comparisons[0].comparator)
    if cache is None:
        return None  # (a call's result, `key not in self.get_cache()`: not followed)
    tested = _key_code(branch.test.left)
    stores = _stores(branch.body, cache)
    if not stores or any(_key_code(s.slice) == tested for s in stores):
        return None  # filled under the tested key: a cache (or not filled here at all: no cache of this branch)
    return branch.test.left, stores[0]


def _stores(body: cst.CSTNode, cache: str) -> list[cst.Subscript]:
    """The subscripts ``cache[...]`` assigned to in ``body``."""
    found: list[cst.Subscript] = []

    class _Stores(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if type(node.target) is cst.Subscript and dotted(node.target.value) == cache:
                found.append(node.target)

    body.visit(_Stores())
    return found


def _key_code(key: cst.BaseExpression | Sequence[cst.SubscriptElement]) -> str:
    """A key's code without spacing or the parentheses of a tuple (``(a, b)`` is ``cache[a, b]``'s key)."""
    if isinstance(key, Sequence):
        parts = [e.slice.value if isinstance(e.slice, cst.Index) else e.slice for e in key]
    elif type(key) is cst.Tuple:
        parts = [e.value for e in key.elements]
    else:
        parts = [key]
    return ",".join("".join(_code(p).split()) for p in parts)


def _code(node: cst.CSTNode) -> str:
    """``node``'s source (no module kept for it: the checked file's tree is freed after its run)."""
    state = PlainCodegen(default_indent="    ", default_newline="\n")
    node._codegen(state)
    return "".join(state.tokens)


def returns_on_a_cache_hit(tree: Tree, statement: cst.CSTNode, rest: Sequence[cst.CSTNode]) -> bool:
    """Is ``statement`` an ``if`` that returns when a kept cache holds the value, with ``rest``
    (the statements after it in its block) filling that cache?"""
    kept = returned_hit(statement)
    # (a store under another key than the one tested, `self._cache[str(k)] = v` after `if k in self._cache:`,
    # is never found: no cache, whatever follows runs on every call)
    keys = _keys_tested(statement.test) if kept else {}  # type: ignore[attr-defined]
    return bool(kept) and any(_fills(tree, node, kept, keys) for node in rest)


def _keys_tested(test: cst.BaseExpression) -> dict[str, str]:
    """The key each ``key in self._cache`` of a hit test asks for, by cache: what a store must use to fill it."""
    keys: dict[str, str] = {}
    parts = [test]
    while parts:
        part = parts.pop()
        if type(part) is cst.BooleanOperation and type(part.operator) is cst.And:
            parts += [part.left, part.right]
        elif type(part) is cst.Comparison and len(part.comparisons) == 1 and type(part.comparisons[0].operator) is cst.In:
            cache = dotted(part.comparisons[0].comparator)
            if cache is not None:
                keys[cache] = _key_code(part.left)
    return keys


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


def _sets_a_kept_cache(assign: cst.Assign, kept: set[tuple[str, bool]], keys: dict[str, str]) -> bool:
    """``self._cache[key] = v`` for a cache tested by key (under the key the test asks for, or one it
    does not say: ``keys``), ``self.pe = pe`` for one tested whole."""
    for target in (t.target for t in assign.targets):
        if type(target) is cst.Subscript and (dotted(target.value), True) in kept and _tested_key(target, keys) \
                or (dotted(target), False) in kept:
            return True
    return False


def _tested_key(target: cst.Subscript, keys: dict[str, str]) -> bool:
    """Is ``target`` stored under the key the test asks for (or one it does not say)?"""
    tested = keys.get(dotted(target.value))  # type: ignore[arg-type]
    return tested is None or _key_code(target.slice) == tested


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


def _fills(tree: Tree, node: cst.CSTNode, kept: set[tuple[str, bool]], keys: dict[str, str] | None = None) -> bool:
    """Does ``node`` store into one of the caches ``kept``: ``self._cache[key] = v`` for one
    tested by key (under the key ``keys`` says it was tested by), ``self.pe = pe`` for one tested
    whole? Its assignments and calls from the file's one walk (``Tree.nodes_under``), not a libcst
    visitor over the subtree per question."""
    assigns = [node, *tree.nodes_under(node, cst.Assign)] if type(node) is cst.Assign else tree.nodes_under(node, cst.Assign)
    if any(_sets_a_kept_cache(assign, kept, keys or {}) for assign in assigns):
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
