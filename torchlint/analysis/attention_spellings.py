"""How a hand-written attention may spell its parts where no option is set (x-transformers' ``Attend``):
a softmax held by an attribute that an ``if``/``elif`` chain of the constructor binds, its final ``else:``
(the branch no option picks) to ``partial(F.softmax, dim=attn_dim)``; an ``einsum`` whose equation is an
f-string of names bound to equations; and weights rebound to themselves on the way to the values
(``attn = attn.type(dtype)``), or kept in a record the ``forward`` returns beside its result. TL405's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.constants import is_setting
from torchlint.analysis.guard_shapes import conjuncts
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_PARTIAL = "functools.partial"


def default_softmax(ctx: FileContext, call: cst.Call, softmaxes: frozenset[str]) -> cst.BaseExpression | None:
    """The ``dim`` of the softmax ``self.attn_fn(sim)`` runs at the constructor's defaults: the attribute's
    one binding, or the one in the final ``else:`` of a chain whose every branch binds it (``if sigmoid:
    self.attn_fn = F.sigmoid ... else: self.attn_fn = partial(F.softmax, dim=-1)``), a softmax through
    ``partial`` and local names; None where that is no softmax over a known dimension."""
    name = dotted(call.func)
    if name is None or not name.startswith("self.") or name.count(".") != 1:
        return None
    cls = ctx.tree.enclosing_class(call)
    bound = ctx.bindings.self_attrs.get(id(cls), {}).get(name, []) if cls is not None else []
    values = [b for b in bound if b.kind == "assign" and b.value is not None and b.element is None]
    if not values or len(values) != len(bound):
        return None
    if len(values) > 1:
        chosen = [b for b in values if _in_final_else(ctx, b.node, values)]
        if len(chosen) != 1:
            return None  # (no chain whose `else:` is the default: which one runs is not the file's to say)
        values = chosen
    return _softmax_dim(ctx, values[0].value, values[0].node, softmaxes, 0)  # type: ignore[arg-type]


def _in_final_else(ctx: FileContext, node: cst.CSTNode, bindings: list) -> bool:  # type: ignore[type-arg]
    """Is ``node`` in the final ``else:`` of an ``if``/``elif`` chain that holds every one of ``bindings``?"""
    child: cst.CSTNode = node
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.Else:
            chain = ctx.tree.parent(ancestor)
            while type(ctx.tree.parent(chain)) is cst.If and ctx.tree.parent(chain).orelse is chain:  # type: ignore[union-attr]
                chain = ctx.tree.parent(chain)  # up from an `elif` to the chain's first `if`
            return all(ctx.tree.is_inside(b.node, chain) for b in bindings)  # type: ignore[arg-type]
        if type(ancestor) in (cst.If, cst.FunctionDef):
            return False
        child = ancestor
    del child
    return False


def _softmax_dim(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode, softmaxes: frozenset[str], depth: int,
                 dim: cst.BaseExpression | None = None) -> cst.BaseExpression | None:
    """The ``dim`` a softmax spelled ``value`` is taken over (``partial(F.softmax, dim=d)``, a name bound to
    one, either branch of ``a if qk_norm else b``), else None."""
    if depth > 6:
        return None
    if ctx.qname(value) in softmaxes:
        return dim
    if type(value) is cst.IfExp:
        dims = [_softmax_dim(ctx, branch, at, softmaxes, depth + 1, dim) for branch in (value.body, value.orelse)]
        return dims[0] if all(d is not None for d in dims) else None
    if type(value) is cst.Call and ctx.qname(value.func) == _PARTIAL and value.args and value.args[0].keyword is None:
        given = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == "dim"), None)
        given = default_value(ctx, given, at) if given is not None else None  # (resolved where the partial is made)
        return _softmax_dim(ctx, value.args[0].value, at, softmaxes, depth + 1, dim if dim is not None else given)
    if type(value) is cst.Name:
        binding = ctx.bindings.reaching(value.value, at)
        if binding is not None and binding.kind == "assign" and binding.value is not None and binding.element is None:
            return _softmax_dim(ctx, binding.value, binding.node, softmaxes, depth + 1, dim)
    return None


def default_value(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
    """What ``expr`` is at the defaults: a name bound once to ``-2 if inverted else -1`` with ``inverted``
    off by default is ``-1``; anything else is itself."""
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is not None and binding.kind == "assign" and binding.value is not None and binding.element is None:
            expr, at = binding.value, binding.node
    if type(expr) is cst.IfExp and ctx.guards.opt_in(expr.body) is not None:
        return expr.orelse  # (the body runs only where a caller turns the option on)
    return expr


def einsum_specs(ctx: FileContext, spec: cst.BaseExpression, at: cst.CSTNode) -> list[str]:
    """The equations an ``einsum``'s first argument may be: a string, or an f-string whose parts are names
    bound to strings (``f'b h i d, {kv_eq} -> b h i j'`` with ``kv_eq = 'b j d' if k.ndim == 3 else 'b h j d'``)."""
    if type(spec) is cst.SimpleString:
        return [spec.evaluated_value] if isinstance(spec.evaluated_value, str) else []
    if type(spec) is not cst.FormattedString:
        return []
    found = [""]
    for part in spec.parts:
        if type(part) is cst.FormattedStringText:
            found = [f + part.value for f in found]
            continue
        choices = _strings(ctx, part.expression, at)  # type: ignore[attr-defined]
        if not choices or part.format_spec or part.conversion:  # type: ignore[attr-defined]
            return []
        found = [f + choice for f in found for choice in choices][:8]
    return found


def _strings(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> list[str]:
    if type(expr) is cst.SimpleString and isinstance(expr.evaluated_value, str):
        return [expr.evaluated_value]
    if type(expr) is cst.IfExp:
        body, orelse = _strings(ctx, expr.body, at), _strings(ctx, expr.orelse, at)
        return body + orelse if body and orelse else []
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is not None and binding.kind == "assign" and binding.value is not None and binding.element is None \
                and type(binding.value) is not cst.Name:
            return _strings(ctx, binding.value, binding.node)
    return []


# Casts of the weights on their way (`attn = attn.type(dtype)`): the same weights.
_CASTS = frozenset({"type", "to", "float", "half", "bfloat16", "type_as"})


def rebound_from(ctx: FileContext, use: cst.BaseExpression) -> cst.Assign | None:
    """``attn = attn.type(dtype)``, ``attn = self.attn_dropout(attn)``, or under an option's ``if``
    (``if self.head_learned_sink: attn = attn[..., 1:]``, a step the default path skips): the statement
    that binds the weights' own name again from ``use`` of it, on their way to the values; None otherwise
    (``weight = weight * mask`` on every call is no longer what a fused kernel computes)."""
    if type(use) is not cst.Name:
        return None
    statement = ctx.tree.parent(use)
    while statement is not None and type(statement) not in (cst.Assign, cst.SimpleStatementLine, cst.IndentedBlock):
        statement = ctx.tree.parent(statement)
    if type(statement) is not cst.Assign or len(statement.targets) != 1 or dotted(statement.targets[0].target) != use.value:
        return None
    if not ctx.tree.is_inside(use, statement.value):
        return None
    value = statement.value
    cast = type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.value is use and value.func.attr.value in _CASTS
    dropout = type(value) is cst.Call and "drop" in (dotted(value.func) or "").lower()
    optional = any(type(a) is cst.If for a in ctx.tree.ancestors(statement) if ctx.tree.is_inside(a, ctx.tree.enclosing_function(use) or a))
    return statement if cast or dropout or optional else None


def aliased_into_returned_record(ctx: FileContext, use: cst.BaseExpression) -> bool:
    """``post_softmax_attn = attn`` then ``Intermediates(post_softmax_attn=post_softmax_attn, ...)`` bound to
    a name the ``forward`` returns after its result (``return out, intermediates``): the weights go back in a
    record of what the attention computed, for callers that ask for it."""
    statement = ctx.tree.parent(use)
    if type(statement) is not cst.Assign or len(statement.targets) != 1 or type(statement.targets[0].target) is not cst.Name:
        return False
    alias = statement.targets[0].target.value  # type: ignore[attr-defined]
    bound = [b for b in ctx.bindings.lookup(alias, statement) if b.node is statement]
    uses = [u for b in bound for u in ctx.bindings.uses(b)]
    if not uses:
        return False
    for each in uses:
        arg = ctx.tree.parent(each)
        record = ctx.tree.parent(arg) if type(arg) is cst.Arg else None
        held = ctx.tree.parent(record) if type(record) is cst.Call else None
        element = held if type(held) is cst.Element else None
        returned = ctx.tree.parent(ctx.tree.parent(element)) if element is not None else None
        if type(returned) is cst.Return and returned.value.elements[0] is not element:  # type: ignore[union-attr]
            continue  # `return out, Intermediates(post_softmax_attn=post_softmax_attn)`
        if type(held) is not cst.Assign or len(held.targets) != 1 or type(held.targets[0].target) is not cst.Name:
            return False
        name = held.targets[0].target.value  # type: ignore[attr-defined]
        returns = [r for r in ctx.tree.nodes(cst.Return) if ctx.tree.enclosing_function(r) is ctx.tree.enclosing_function(held)]
        if not any(type(r.value) is cst.Tuple and len(r.value.elements) > 1
                   and any(dotted(e.value) == name for e in r.value.elements[1:]) for r in returns):
            return False
    return True


def option_off_by_default(ctx: FileContext, test: cst.BaseExpression, at: cst.CSTNode) -> str | None:
    """Words for the option ``test`` needs on that is off by default: "`flash=True`" for ``if self.flash and
    not exists(delta):`` where the constructor binds ``self.flash = flash`` from ``flash=False`` (or for a
    parameter of ``at``'s function defaulting to a false value); "`FLASH` on (`--flash` is off by default)"
    for a module global false at the run's defaults (llm.c); None otherwise."""
    first = conjuncts(test)[0]
    if type(first) is cst.Name:
        if first.value in ctx.guards.off_by_default(at):
            return f"`{first.value}=True`"
        off = ctx.constants.global_switch_off(first.value, at)
        return f"`{first.value}` on ({off})" if off is not None else None
    name = dotted(first) if type(first) is cst.Attribute else None
    cls = ctx.tree.enclosing_class(at)
    if name is None or not name.startswith("self.") or name.count(".") != 1 or cls is None:
        return None
    bound = ctx.bindings.self_attrs.get(id(cls), {}).get(name, [])
    if len(bound) == 1 and bound[0].kind == "assign" and type(bound[0].value) is cst.Attribute:
        # `self.flash = config.flash` with `flash: bool = False` in a config class no code of the file turns on
        off = ctx.constants.field_off(bound[0].value.attr.value) if is_setting(bound[0].value) else None  # type: ignore[union-attr]
        return f"`{name}` on ({off})" if off is not None else None
    if len(bound) != 1 or bound[0].kind != "assign" or type(bound[0].value) is not cst.Name:
        return None  # (set in several places, or from anything but a parameter: not the caller's option)
    function = ctx.tree.enclosing_function(bound[0].node)
    param = bound[0].value.value  # type: ignore[union-attr]
    if function is None or function.name.value != "__init__" or param not in ctx.guards.off_by_default(bound[0].node):
        return None
    return f"`{param}=True`"


# Fused attention kernels: a branch beside one that calls them is a fallback for old versions.
_FUSED = ("scaled_dot_product_attention", "flash_attn", "memory_efficient_attention", "flex_attention")


def fused_branch(ctx: FileContext, softmax: cst.Call) -> cst.If | None:
    """The ``if`` one branch of which holds the softmax and the other calls a fused kernel, or that
    returns a fused kernel's result before it (``if self.flash: return self.flash_attn(q, k, v)``)."""
    child: cst.CSTNode = softmax
    for ancestor in ctx.tree.ancestors(softmax):
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
            return None
        if type(ancestor) is cst.If:
            other = ancestor.orelse if child is ancestor.body else ancestor.body if child is ancestor.orelse else None
            if other is not None and calls_fused(ctx, other):
                return ancestor
        if type(ancestor) is cst.IndentedBlock and type(ctx.tree.parent(ancestor)) is cst.FunctionDef:
            return _fused_return_before(ctx, ancestor, child)  # type: ignore[arg-type]
        if type(ancestor) is cst.Else:
            child = ancestor
            continue
        child = ancestor
    return None


def calls_fused(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Does ``node`` call a fused attention kernel (by name)?"""
    return any(name in short_code(ctx.module, node, limit=100_000) for name in _FUSED)


def _fused_return_before(ctx: FileContext, body: cst.IndentedBlock, child: cst.CSTNode) -> cst.If | None:
    """``if self.flash: return self.flash_attn(...)`` in the function's body before ``child``."""
    for statement in body.body:
        if statement is child:
            return None
        if type(statement) is cst.If and statement.orelse is None and type(statement.body) is cst.IndentedBlock and statement.body.body:
            last = statement.body.body[-1]
            if type(last) is cst.SimpleStatementLine and any(type(s) is cst.Return and s.value is not None for s in last.body) \
                    and calls_fused(ctx, last):
                return statement
    return None
