"""Whether a query or key of an attention is made of a few positions (a class token's, a
learned query's, a pooled one): its score matrix is then a thin slice, not one quadratic in the
sequence length (``few_positions``; TL405 weighs a hand-written attention by it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# Reductions that pool the positions into one (a pooled query: CLIP's `x.mean(dim=0, keepdim=True)`).
_POOLS = frozenset({"mean", "sum", "amax", "max", "logsumexp"})
_FEW = 16  # at most this many positions, written as an index or a slice, are a few


def few_positions(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """Is ``expr`` (a query or key of the scores) made of a few positions: a learned parameter of
    the module (``self.cls_token``, ``self.slots``), one index or a short slice along the
    sequence (``x[:, 0]``, ``x[:, :1]``), or a pooled one (``x.mean(1, keepdim=True)``)?
    Followed through the names bound once, reshapes, methods and a submodule's projection."""
    if depth > 8:
        return False
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return False
        # (`q, k, v = qkv.unbind(0)`: the tensor it is a part of)
        return few_positions(ctx, binding.value, binding.node, depth + 1)
    if type(expr) is cst.Subscript:
        # `x[:, 0]`, `x[:, :1]`: positions of a (batch, sequence, ...) tensor; `qkv[0]`, `qkv[:, :, 0]`
        # pick the query out of a stacked projection, all positions kept
        elements = expr.slice
        if len(elements) >= 2 and type(elements[0].slice) is cst.Slice and _full(elements[0].slice) and _few_index(elements[1].slice):
            return True
        return few_positions(ctx, expr.value, at, depth + 1)
    if type(expr) is cst.Attribute and dotted(expr.value) == "self":
        return _learned(ctx, expr, at)
    if type(expr) is cst.Attribute:
        return few_positions(ctx, expr.value, at, depth + 1)  # `k.mT`
    if type(expr) is cst.BinaryOperation:  # `q * self.scale`: the tensor, not its scale (a learned one too)
        sides = [side for side in (expr.left, expr.right) if not (type(side) is cst.Attribute and dotted(side.value) == "self")]
        return any(few_positions(ctx, side, at, depth + 1) for side in sides)
    if type(expr) is cst.Call:
        func = expr.func
        if type(func) is cst.Attribute and func.attr.value in _POOLS:
            return True
        if type(func) is cst.Attribute and ctx.qname(func) is None:  # `x.reshape(...)`, `self.to_q(x)`: its input
            if (dotted(func) or "").startswith("self."):
                # a submodule's projection of its input (`self.q(x[:, 0])`)
                return bool(expr.args) and expr.args[0].keyword is None and few_positions(ctx, expr.args[0].value, at, depth + 1)
            return few_positions(ctx, func.value, at, depth + 1)
        if expr.args and expr.args[0].keyword is None:  # `torch.cat([cls, x])` is not few; `rearrange(q, ...)` is q's
            first = expr.args[0].value
            return type(first) is not cst.List and few_positions(ctx, first, at, depth + 1)
    return False


def _full(index: cst.Slice) -> bool:
    return index.lower is None and index.upper is None and index.step is None


def _few_index(index: cst.BaseSlice) -> bool:
    """``0`` or ``:1`` / ``0:4``: one position or a short literal run of them."""
    if type(index) is cst.Index:
        return type(index.value) is cst.Integer
    if type(index) is cst.Slice and index.step is None and type(index.upper) is cst.Integer:
        lower = int(index.lower.value) if type(index.lower) is cst.Integer else 0 if index.lower is None else None
        return lower is not None and 0 < int(index.upper.value) - lower <= _FEW
    if type(index) is cst.Slice and index.lower is None and index.step is None and index.upper is not None:
        # `x[:, :self.num_classes]`, `x[:, :num_prefix_tokens]`: the class or prefix tokens, a few
        bound = (dotted(index.upper) or "").lower()
        return any(word in bound.rsplit(".", 1)[-1] for word in _FEW_NAMES)
    return False


_FEW_NAMES = ("cls", "class", "prefix", "slot", "query", "queries")


def _learned(ctx: FileContext, attribute: cst.Attribute, at: cst.CSTNode) -> bool:
    """``self.query`` bound to an ``nn.Parameter`` in its class: learned positions, a few."""
    cls = ctx.tree.enclosing_class(at)
    if cls is None:
        return False
    bound = ctx.bindings.self_attrs.get(id(cls), {}).get(dotted(attribute) or "", [])
    return any(b.kind == "assign" and type(b.value) is cst.Call and ctx.qname(b.value.func) in _PARAMETERS for b in bound)


_PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


__all__ = ["few_positions"]
