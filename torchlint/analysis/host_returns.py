"""Host values that functions return, across files: which elements of what a function returns
are NumPy arrays or Python values made from host data in every ``return`` (``host_elements``,
``FileSummary.host_returns``), and the key under which a read waits for the join where the value
read is such an element of another file's function, reached through names, a ternary's branch
and an attribute a class sets or registers from it (``returned_key``: ControlNet's DDIM sampler,
``self.register_buffer('ddim_alphas_prev', ddim_alphas_prev)`` of what
``make_ddim_sampling_parameters`` returns, a NumPy array, read as ``alphas_prev[index]``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import canonical, dotted
from torchlint.analysis.summary import RETURNED

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_MAX_DEPTH = 6
# NumPy calls whose result is a new host array whatever their arguments hold (a list of numbers
# read from a tensor included): `np.asarray([a[0]] + a[t].tolist())`. Other NumPy functions give
# back a tensor when handed one (`np.sqrt(t)` wraps it again), so their arguments must be host too.
_MADE_ON_THE_HOST = frozenset({"numpy.asarray", "numpy.array", "numpy.zeros", "numpy.ones", "numpy.arange", "numpy.linspace",
                               "numpy.full", "numpy.empty", "numpy.load", "numpy.fromfile", "numpy.frombuffer"})


def host_elements(ctx: FileContext, function: cst.FunctionDef) -> tuple[int, ...]:
    """The positions of the tuple ``function`` returns (-1: the whole value) that every
    ``return`` makes on the host: a NumPy array or a Python value built from host data."""
    returns = [r.value for r in ctx.values.returns_of(function)]
    if not returns or any(value is None for value in returns):
        return ()
    if all(type(value) is cst.Tuple for value in returns):
        sizes = {len(value.elements) for value in returns}  # type: ignore[union-attr]
        if len(sizes) != 1:
            return ()
        return tuple(i for i in range(sizes.pop()) if all(_surely_host(ctx, value.elements[i].value, value, 0) for value in returns))  # type: ignore[union-attr]
    return (-1,) if all(_surely_host(ctx, value, value, 0) for value in returns) else ()  # type: ignore[arg-type]


def _surely_host(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
    """Is ``expr`` a NumPy array or Python value made from host data only (not ``np.sqrt`` of
    what may be a tensor, which NumPy hands back as a tensor)?"""
    if depth > _MAX_DEPTH:
        return False
    kind = ctx.values.kind(expr, at)
    if kind not in (Kind.NUMPY, Kind.HOST):
        return False
    if type(expr) in (cst.Integer, cst.Float, cst.SimpleString, cst.List, cst.Tuple) or kind is Kind.HOST and type(expr) is cst.Call:
        return True  # a literal, or a Python value read out (`t.tolist()`, `len(x)`)
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        value = getattr(binding, "value", None)
        return binding is not None and binding.kind == "assign" and binding.element is None and value is not None \
            and _surely_host(ctx, value, binding.node, depth + 1)
    if type(expr) is cst.BinaryOperation:
        return all(_surely_host(ctx, side, at, depth + 1) for side in (expr.left, expr.right))
    if type(expr) is cst.UnaryOperation:
        return _surely_host(ctx, expr.expression, at, depth + 1)
    if type(expr) is cst.Subscript:
        return _surely_host(ctx, expr.value, at, depth + 1)
    if type(expr) is cst.Call:
        qualified = canonical(ctx.qname(expr.func)) or ""
        if qualified in _MADE_ON_THE_HOST:
            return True
        return qualified.startswith("numpy.") and all(_surely_host(ctx, a.value, at, depth + 1) for a in expr.args if not a.keyword)
    return False


def unpacked_call(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.Call, int] | None:
    """(the call, the position) where the name ``expr`` is one element unpacked from what a call
    returned (``scores, caps, lengths = decoder(feats, caps, caplens)``: ``decoder(...)``, 2)."""
    if type(expr) is not cst.Name:
        return None
    binding = ctx.bindings.reaching(expr.value, at)
    value = getattr(binding, "value", None)
    if binding is None or binding.kind != "assign" or binding.element is None or type(value) is not cst.Call:
        return None
    return value, binding.element


def host_element_here(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Is ``expr`` an element unpacked from what a function or a model of this file returns that every
    ``return`` makes on the host (a decoder's ``forward`` returning ``(caplens - 1).tolist()``)?"""
    unpacked = unpacked_call(ctx, expr, at)
    if unpacked is None:
        return False
    returned = ctx.values.returned_values(*unpacked)
    return bool(returned) and all(_surely_host(ctx, value, ret, 0) for value, ret in returned)


def element_of_elsewhere(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.Call, int] | None:
    """(the call, the position) where ``expr`` is an element unpacked from what a call of another file's
    function or an object's method this file does not define returns: the join knows whether it is a
    host value (``FileSummary.host_returns``); None for a library op or a function of this file."""
    unpacked = unpacked_call(ctx, expr, at)
    if unpacked is None:
        return None
    call = unpacked[0]
    qualified = ctx.qname(call.func)
    if qualified is not None and qualified.split(".")[0] in ("torch", "numpy"):
        return None  # a library op: its own placement rules hold
    if ctx.values.returned_values(call, unpacked[1]) or ctx.functions.called(call, qualified) is not None:
        return None  # a function of this file: read here (`host_element_here`)
    return unpacked


def returned_key(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str:
    """``returned:make_ddim_sampling_parameters#2`` where the tensor ``expr`` may be is an element
    of what a function of another file returns (position 2 of its tuple; -1: the whole value),
    followed through an item read (``alphas_prev[index]``), names bound once, the one branch of a
    ternary that may be a tensor, and an attribute of ``self`` set (or registered with the class's
    ``register_buffer``) from one value; "" where it is anything else."""
    if depth > _MAX_DEPTH:
        return ""
    if type(expr) is cst.Subscript:
        return returned_key(ctx, expr.value, at, depth + 1)
    if type(expr) is cst.IfExp:
        sides = [side for side in (expr.body, expr.orelse) if ctx.syncs.tensorish(side, at)]
        return returned_key(ctx, sides[0], at, depth + 1) if len(sides) == 1 else ""
    if type(expr) is cst.Attribute and dotted(expr.value) == "self":
        sources = _attribute_sources(ctx, expr, at)
        return returned_key(ctx, sources[0][0], sources[0][1], depth + 1) if len(sources) == 1 else ""
    if type(expr) is not cst.Name:
        return ""
    bound = ctx.bindings.lookup(expr.value, at)
    binding = ctx.bindings.reaching(expr.value, at) if len(bound) != 1 else bound[0]
    value = getattr(binding, "value", None)
    if binding is None or binding.kind != "assign" or value is None:
        return ""
    if type(value) is cst.Call:
        # (a function of the project, by the name it is called by: the join finds which, and what it returns)
        name = dotted(value.func)
        return f"{RETURNED}{name.rsplit('.', 1)[-1]}#{binding.element if binding.element is not None else -1}" if name else ""
    if binding.element is None:
        return returned_key(ctx, value, binding.node, depth + 1)
    return ""


def _attribute_sources(ctx: FileContext, attribute: cst.Attribute, at: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
    """What ``self.x`` is set from in its class: ``self.x = v``, and ``self.register_buffer("x", v)``
    where the class defines ``register_buffer`` itself (a plain object's setattr: the value kept as it is)."""
    tree = ctx.tree
    cls = tree.enclosing_class(at)
    if cls is None:
        return []
    name = attribute.attr.value
    found = [(b.value, b.node) for b in ctx.bindings.self_attrs.get(id(cls), {}).get(f"self.{name}", [])
             if b.kind == "assign" and b.element is None and b.value is not None]
    own = any(type(s) is cst.FunctionDef and s.name.value == "register_buffer" for s in cls.body.body)  # type: ignore[union-attr]
    if own:
        for call in ctx.method_calls("register_buffer"):
            if tree.enclosing_class(call) is cls and len(call.args) >= 2 and type(call.args[0].value) is cst.SimpleString \
                    and call.args[0].value.evaluated_value == name:  # type: ignore[union-attr]
                found.append((call.args[1].value, call))
    return found
