"""Attention weights on their way from the softmax to the values (through a dropout, a cast, a
transpose, a reshape, a mask), whether they are read anywhere else, and whether they are handed back
beside the attention's result (``return output, attn`` in a module's ``forward``) to callers of the
module in the file that read them: TL405 weighs a hand-written attention whose weights go back to
callers that only hand them on or drop them (their option, ``return_attns``) as still worth the fused kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.attention_scores import MATMUL, RESHAPES
from torchlint.analysis.attention_spellings import aliased_into_returned_record, rebound_from
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
                    or tree.index(name) < tree.index(assign) or tree.is_inside(name, assign) or _attribute_name(tree, name):
                continue  # (DINO's `y, attn = self.attn(x)`: the module's attribute, read before the weights are bound)
            if not any(type(a) is cst.Return for a in tree.ancestors(name)):
                return True  # read here (a loss, a plot, a list of maps)
    return False


def _attribute_name(tree, name: cst.Name) -> bool:  # type: ignore[no-untyped-def]
    """Is ``name`` the attribute of ``obj.name``, no read of a variable?"""
    parent = tree.parent(name)
    return type(parent) is cst.Attribute and parent.attr is name


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


_DROPOUT = frozenset({"torch.nn.functional.dropout", "torch.dropout"})
# What the weights may go through on their way to the values: a transpose, or a reshape back to
# the positions' shape (`w = torch.reshape(w, (B, H, W, H, W))` before `einsum(w, v)`).
_WEIGHT_MOVES = frozenset({"permute", "transpose", "view", "reshape", "flatten", "contiguous"})
_WEIGHT_MOVE_FUNCTIONS = RESHAPES | {"torch.permute", "torch.transpose"}


# Casts a softmax's weights go through on their way (``softmax(w.float()).type(w.dtype)``).
_CASTS = frozenset({"type", "to", "float", "half", "bfloat16", "type_as"})


def through_dropout(ctx, softmax: cst.Call) -> cst.BaseExpression:  # type: ignore[no-untyped-def]
    """The softmax call, or what it becomes straight away: a cast back to the input's dtype,
    a dropout applied to it (``self.attn_drop(...)``)."""
    current: cst.BaseExpression = softmax
    while True:
        parent = ctx.tree.parent(current)
        call = ctx.tree.parent(parent) if isinstance(parent, (cst.Arg, cst.Attribute)) else None
        if not isinstance(call, cst.Call):
            return current
        if isinstance(parent, cst.Attribute) and call.func is parent and parent.attr.value in _CASTS:
            current = call
        elif isinstance(parent, cst.Arg) and (ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower()):
            current = call
        else:
            return current


def weights_times_values(ctx, weights: cst.BaseExpression, at: cst.CSTNode, seen: set[int] | None = None) -> cst.CSTNode | None:  # type: ignore[no-untyped-def]
    """The ``weights @ v`` (or matmul/bmm/einsum) that consumes the weights, directly or
    through the name they are bound to, possibly after a dropout on that name."""
    seen = set() if seen is None else seen
    if id(weights) in seen:
        return None  # `w = w.view(...)` in a loop rebinds the name to itself: followed once
    seen.add(id(weights))
    for use in _uses(ctx, weights):
        parent = ctx.tree.parent(use)
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.MatrixMultiply) and parent.left is use:
            return parent
        rebound = rebound_from(ctx, use)  # `attn = attn.type(dtype)`, `attn = self.attn_dropout(attn)`: the weights again
        moved = _moved(ctx, use) or _masked_if_passed(ctx, use) or (rebound.value if rebound is not None else None)
        if moved is not None and not ctx.tree.is_inside(at, moved):
            found = weights_times_values(ctx, moved, at, seen)
            if found is not None:
                return found
        call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call):
            if ctx.qname(call.func) in MATMUL and parent in call.args[:3]:
                return call
            if ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower():
                found = weights_times_values(ctx, call, at, seen)
                if found is not None:
                    return found
    return None


def _moved(ctx, use: cst.BaseExpression) -> cst.Call | None:  # type: ignore[no-untyped-def]
    """The call that transposes or reshapes ``use`` as its operand (``w.permute(0, 2, 1)``,
    ``torch.reshape(w, shape)``), else None."""
    parent = ctx.tree.parent(use)
    if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _WEIGHT_MOVES:
        call = ctx.tree.parent(parent)
        return call if isinstance(call, cst.Call) and call.func is parent else None
    call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(call, cst.Call) and call.args and call.args[0] is parent and ctx.qname(call.func) in _WEIGHT_MOVE_FUNCTIONS:
        return call
    return None


def _masked_if_passed(ctx, use: cst.BaseExpression) -> cst.BinaryOperation | None:  # type: ignore[no-untyped-def]
    """``weight = weight * mask`` under ``if mask is not None:`` (tortoise-tts's mask applied after the
    softmax): the product, on the weights' way to the values only where a caller passes the mask;
    at the parameter's default the plain weights go on. None for anything else."""
    product = ctx.tree.parent(use)
    statement = ctx.tree.parent(product)
    if not (isinstance(product, cst.BinaryOperation) and isinstance(product.operator, cst.Multiply) and isinstance(use, cst.Name)
            and isinstance(statement, cst.Assign) and len(statement.targets) == 1 and dotted(statement.targets[0].target) == use.value):
        return None
    return product if ctx.guards.opt_in(statement, optional=True) is not None else None


def _uses(ctx, expr: cst.BaseExpression) -> list[cst.BaseExpression]:  # type: ignore[no-untyped-def]
    """``expr`` itself where it is used in place, or the reads of the name it is assigned to."""
    parent = ctx.tree.parent(expr)
    if isinstance(parent, cst.Assign) and parent.value is expr and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        bound = [b for b in ctx.bindings.lookup(name, expr) if b.node is parent]
        return [u for b in bound for u in ctx.bindings.uses(b, ordered=True)]
    return [expr]


def weights_used_elsewhere(ctx, weights: cst.BaseExpression, matmul: cst.CSTNode,  # type: ignore[no-untyped-def]
                            returned: list[cst.CSTNode]) -> bool:
    """Are the weights read anywhere but the product with the values (stored, appended, averaged
    for a plot)? Returned beside the output (``return output, attn``) is noted in ``returned``."""
    for use in _uses(ctx, weights):
        if use is weights or ctx.tree.is_inside(use, matmul):
            continue
        rebound = rebound_from(ctx, use)
        moved = _moved(ctx, use) or _masked_if_passed(ctx, use) or (rebound.value if rebound is not None else None)
        if moved is not None:
            if weights_used_elsewhere(ctx, moved, matmul, returned):
                return True  # reshaped, then kept as well as multiplied into the values
            continue  # `w_ = w_.permute(0, 2, 1)` on the way to `bmm(v, w_)`
        parent = ctx.tree.parent(use)
        call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call) and (ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower()):
            if call is not weights and weights_used_elsewhere(ctx, call, matmul, returned):
                return True  # `p_attn = self.drop(p_attn)`, then kept
            continue
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "save_for_backward":
            continue  # kept for an autograd.Function's own backward: a fused kernel brings its backward too
        if returned_beside_output(ctx, use, matmul) or aliased_into_returned_record(ctx, use):
            returned.append(use)
            continue
        return True
    return False
