"""Arguments known to hold Python values, for what a call may hand its callee: besides what
:meth:`Values.python_value` knows, a number read to the host and scaled (``v.item() / n``), a
dict or list built of such values (``{k: v.item() / n for k, v in losses.items()}``) handed on
with ``**``, and the sum of one's values (dinov2's ``metric_logger.update(total_loss=
losses_reduced, **loss_dict_reduced)``: floats, no tensor for ``isinstance(v, Tensor)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_MAX_DEPTH = 10  # a few names and containers deep


def python_argument(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """Is ``value`` known to be a Python value (not a tensor)?"""
    if ctx.values.python_value(value, at):
        return True
    if depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if kind is cst.BinaryOperation:
        # `v.item() / world_size()`: a number read to the host, scaled by what no torch function made
        operands = (value.left, value.right)  # type: ignore[attr-defined]
        return any(ctx.values.python_value(o, at) for o in operands) and all(
            python_argument(ctx, o, at, depth + 1) or _plain_call(ctx, o) for o in operands)
    if kind is cst.Call and type(value.func) is cst.Name and value.func.value == "sum" and len(value.args) == 1:  # type: ignore[attr-defined]
        return python_values(ctx, value.args[0].value, at, depth + 1)  # type: ignore[attr-defined]
    if kind is cst.Name:
        bound = ctx.bindings.lookup(value.value, at)  # type: ignore[attr-defined]
        return len(bound) == 1 and bound[0].kind == "assign" and bound[0].value is not None and \
            python_argument(ctx, bound[0].value, bound[0].node, depth + 1)
    return False


def python_values(ctx: FileContext, container: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """Does ``container`` hold only Python values: a dict or list display or comprehension of
    them, a name bound once to one, its ``.values()``, a generator over those?"""
    if depth > _MAX_DEPTH:
        return False
    kind = type(container)
    if kind is cst.DictComp:
        return python_argument(ctx, container.value, container.value, depth + 1)  # type: ignore[attr-defined]
    if kind in (cst.ListComp, cst.SetComp):
        return python_argument(ctx, container.elt, container.elt, depth + 1)  # type: ignore[attr-defined]
    if kind is cst.Dict:
        return all(type(e) is cst.DictElement and python_argument(ctx, e.value, at, depth + 1) for e in container.elements)  # type: ignore[attr-defined]
    if kind in (cst.List, cst.Tuple):
        return all(type(e) is cst.Element and python_argument(ctx, e.value, at, depth + 1) for e in container.elements)  # type: ignore[attr-defined]
    if kind is cst.GeneratorExp:
        # `loss for loss in losses.values()`: the element is the loop's own name over a container of Python values
        elt, loops = container.elt, container.for_in  # type: ignore[attr-defined]
        return type(elt) is cst.Name and loops.inner_for_in is None and type(loops.target) is cst.Name \
            and loops.target.value == elt.value and python_values(ctx, loops.iter, at, depth + 1)
    if kind is cst.Call and type(container.func) is cst.Attribute and container.func.attr.value == "values" and not container.args:  # type: ignore[attr-defined]
        return python_values(ctx, container.func.value, at, depth + 1)  # type: ignore[attr-defined]
    if kind is cst.Name:
        bound = ctx.bindings.lookup(container.value, at)  # type: ignore[attr-defined]
        return len(bound) == 1 and bound[0].kind == "assign" and bound[0].value is not None and \
            python_values(ctx, bound[0].value, bound[0].node, depth + 1)
    return False


def may_be_tensor(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """May ``value``, handed to a function, be a tensor? Not where it is known to be a Python
    value, nor where it is read from a container or object of no known kind (``lr_schedule[it]``,
    ``batch.shape[0]``: a schedule's rate, a size); an expression computed in place (a call, an
    operation: ``(out.argmax(1) == y).float().mean()``), a tensor, a parameter handed on, and a
    name bound once to one of those may be."""
    if python_argument(ctx, value, at) or depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if kind in (cst.Subscript, cst.Attribute):
        return ctx.values.kind(value, at) is Kind.TENSOR
    if kind is cst.Name:
        bound = ctx.bindings.lookup(value.value, at)  # type: ignore[attr-defined]
        if len(bound) == 1 and bound[0].kind == "assign" and bound[0].value is not None and bound[0].element is None:
            return may_be_tensor(ctx, bound[0].value, bound[0].node, depth + 1)
        return True  # a parameter handed on, a name bound twice or unpacked: not known
    if kind is cst.BinaryOperation:  # `batch.shape[0] / 2`: a size halved
        return may_be_tensor(ctx, value.left, at, depth + 1) or may_be_tensor(ctx, value.right, at, depth + 1)  # type: ignore[attr-defined]
    return True


def _plain_call(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A call of a project or library function that is no torch function (``get_global_size()``)."""
    if type(value) is not cst.Call:
        return False
    name = ctx.qname(value.func) or ""  # type: ignore[attr-defined]
    return not name.startswith("torch") and ctx.method_name(value) not in ("mean", "sum", "detach", "to", "cuda", "float")  # type: ignore[arg-type]
