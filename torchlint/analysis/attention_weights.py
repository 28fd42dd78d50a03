"""Attention weights handed back beside the attention's result (``return output, attn`` in a module's
``forward``) and whether the file's callers of the module read them: TL405 weighs a hand-written
attention whose weights go back to callers that only hand them on or drop them (their option,
``return_attns``) as still worth the fused kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def returned_beside_output(ctx: FileContext, use: cst.CSTNode, matmul: cst.CSTNode) -> bool:
    """``return output, attn`` in a module's ``forward``, ``output`` made from the product with the
    values: the weights go back to the callers beside the attention's result, which most read only
    under an option (``return_attns``, ``output_attentions``) or drop (``out, _ = self.attn(x)``)."""
    element = ctx.tree.parent(use)
    tuple_ = ctx.tree.parent(element) if type(element) is cst.Element else None
    statement = ctx.tree.parent(tuple_) if type(tuple_) is cst.Tuple else None
    forward = ctx.loops.module_forward(use)
    if type(statement) is not cst.Return or tuple_.elements[0] is element or forward is None:  # type: ignore[union-attr]
        return False
    first = tuple_.elements[0].value  # type: ignore[union-attr]
    if not (first is matmul or ctx.tree.is_inside(matmul, first)):  # `return att @ v, att`
        product = _assigned_name(ctx, matmul)
        if product is None or type(first) is not cst.Name or first.value not in _derived_names(ctx, product, statement):
            return False  # the first element is not the attention's result
    position = next(i for i, e in enumerate(tuple_.elements) if e is element)  # type: ignore[union-attr]
    return not _callers_read(ctx, forward.split(".")[0], position)


def _callers_read(ctx: FileContext, cls: str, position: int) -> bool:
    """Does a call of the module class ``cls`` in this file read the element ``position`` of what it
    returns (``out, attn = self.attention(q, k, v)`` then ``loss = loss + attn.mean()``, or keeps it,
    ``x, self.attn = ...``)? Handed back (``return q, attn``) or dropped, it is not read here."""
    tree = ctx.tree
    for assign in tree.nodes(cst.Assign):
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        if type(target) is not cst.Tuple or len(target.elements) <= position or type(assign.value) is not cst.Call \
                or not _instance_of(ctx, assign.value.func, cls, assign):
            continue
        weights = target.elements[position].value
        if type(weights) is not cst.Name:
            return True  # kept on an object (`x, self.attn = self.attention(q, k, v)`)
        function = tree.enclosing_function(assign)
        for name in tree.nodes(cst.Name):
            if name.value != weights.value or name is weights or tree.enclosing_function(name) is not function \
                    or tree.index(name) < tree.index(assign):
                continue
            if not any(type(a) is cst.Return for a in tree.ancestors(name)):
                return True  # read here (a loss, a plot, a list of maps)
    return False


def _instance_of(ctx: FileContext, func: cst.BaseExpression, cls: str, at: cst.CSTNode) -> bool:
    """Is ``func`` (``self.attention``, ``relative``) bound to a ``cls(...)`` construction?"""
    name = dotted(func)
    if name is None:
        return False
    for binding in ctx.bindings.lookup(name, at):
        value = binding.value if binding.kind == "assign" else None
        while type(value) is cst.Call and type(value.func) is cst.Attribute and type(value.func.value) is cst.Call:
            value = value.func.value  # `AttentionWithWeights().cuda()`
        if type(value) is cst.Call and dotted(value.func) == cls:
            return True
    return False


def _assigned_name(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """``output`` of ``output = torch.matmul(attn, v)`` (through the expressions around ``node``)."""
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.Assign:
            target = ancestor.targets[0].target if len(ancestor.targets) == 1 else None
            return target.value if type(target) is cst.Name else None
        if isinstance(ancestor, cst.BaseStatement):
            return None
    return None


def _derived_names(ctx: FileContext, name: str, before: cst.CSTNode) -> set[str]:
    """``name`` and the names the function assigns from it before ``before`` (``out = self.proj(output)``)."""
    function = ctx.tree.enclosing_function(before)
    found = {name}
    end = ctx.tree.index(before)
    for assign in ctx.tree.nodes(cst.Assign):
        if ctx.tree.enclosing_function(assign) is not function or ctx.tree.index(assign) > end or len(assign.targets) != 1:
            continue
        target = assign.targets[0].target
        if type(target) is cst.Name and any(type(n) is cst.Name and n.value in found for n in ctx.tree.descendants(assign.value)):
            found.add(target.value)
    return found
