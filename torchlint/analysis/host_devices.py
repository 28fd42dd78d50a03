"""The device of a tensor on the host: ``G.device`` where ``G`` is, on every path this file's calls
give it, a tensor a helper built at its CPU-default ``device`` (or None, which has no device to
take): stylegan2's ``get_padding(G, ...)``, its ``G`` from ``sample_affine(p, batch, h, w)`` (``device="cpu"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import is_cpu_device
from torchlint.analysis.device_reach import FACTORIES
from torchlint.analysis.host_tensors import ONE_TENSOR_FUNCTIONS, passes

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 12  # steps followed: a name, its binding, a parameter, each call passing it (stylegan2: eleven)
HOST, NONE = "host", "none"


def on_the_host(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Is ``expr`` a tensor on the host wherever it is a tensor: on the host on some path, None on
    the others, and nothing else? (None alone is no tensor: its ``.device`` says nothing.)"""
    memo: dict[tuple[int, int], tuple[cst.CSTNode, bool]] = ctx.__dict__.setdefault("_host_device_memo", {})
    known = memo.get((id(expr), id(at)))
    if known is not None and known[0] is expr:
        return known[1]
    found = _places(ctx, expr, at, 0)
    answer = found is not None and HOST in found
    memo[(id(expr), id(at))] = (expr, answer)
    return answer


def _places(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> set[str] | None:
    """``{"host", "none"}``: what ``expr`` may be on its paths; None where any path may hold a
    device tensor, or something not known."""
    kind = type(expr)
    if depth > _DEPTH:
        return None
    if kind is cst.Name and expr.value == "None":
        return {NONE}
    if kind in (cst.Tuple, cst.List):  # `transform_matrix=(None, None)`, for its items
        return _joined(ctx, [e.value for e in expr.elements if type(e) is cst.Element], at, depth) if expr.elements else None
    if kind is cst.Subscript:  # an item of such a tuple, or a row of a host tensor
        return _places(ctx, expr.value, at, depth + 1)
    if kind is cst.Call:
        return {HOST} if _host_call(ctx, expr, at, depth) else None
    if kind is cst.Name:
        bindings = ctx.bindings.reaching_each(expr.value, at)
        return _joined_bindings(ctx, bindings, depth) if bindings else None
    return None


def _joined(ctx: FileContext, values: list[cst.BaseExpression], at: cst.CSTNode, depth: int) -> set[str] | None:
    found: set[str] = set()
    for value in values:
        places = _places(ctx, value, at, depth + 1)
        if places is None:
            return None
        found |= places
    return found


def _joined_bindings(ctx: FileContext, bindings: list, depth: int) -> set[str] | None:  # type: ignore[type-arg]
    found: set[str] = set()
    for binding in bindings:
        if binding.kind == "param":
            places = _parameter(ctx, binding, depth)
        elif binding.kind == "assign" and binding.element is None and binding.value is not None:
            places = _places(ctx, binding.value, binding.node, depth + 1)
        else:
            return None  # unpacked, a loop's variable, an augmented assignment: not followed
        if places is None:
            return None
        found |= places
    return found


def _parameter(ctx: FileContext, binding, depth: int) -> set[str] | None:  # type: ignore[no-untyped-def]
    """What this file's calls pass for a parameter (a call leaving it out: its default); a
    function no call of the file names: its default alone, what it holds by default."""
    param = binding.node
    passed = ctx.functions.passed_in_file(binding)
    default = param.default if type(param) is cst.Param else None
    if passed is None:
        return _places(ctx, default, param, depth + 1) if default is not None else None
    found = _joined(ctx, [] if default is None else [default], param, depth) or set()
    for argument, call in passed:
        places = _places(ctx, argument, call, depth + 1)
        if places is None:
            return None
        found |= places
    return found


def _host_call(ctx: FileContext, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
    """A tensor made or moved on the host, a one-tensor op of one (``torch.inverse(G)``), or the
    result of a helper of this file whose CPU-default ``device`` parameter the call leaves out
    (``sample_affine(p, batch, height, width)`` with ``device="cpu"``)."""
    if ctx.devices.moved_to_host(call, at) or ctx.uploads.made_on_host(call, at) is not None:
        return True
    qualified = ctx.qname(call.func)
    if qualified in ONE_TENSOR_FUNCTIONS and call.args and call.args[0].keyword is None:
        found = _places(ctx, call.args[0].value, at, depth + 1)
        return found == {HOST}
    function = ctx.functions.called(call, qualified)
    if function is None:
        return False
    params = [*function.params.posonly_params, *function.params.params, *function.params.kwonly_params]
    # (a helper given its device by the call builds there: a caller passing a CUDA device is the near-miss)
    return any(p.name.value == "device" and p.default is not None and is_cpu_device(p.default, ctx) and not passes(call, function, p)
               for p in params) and _builds_at_its_device(ctx, function)


def _builds_at_its_device(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Does ``function`` build a tensor at its ``device`` parameter (``torch.eye(3, device=device)``)?
    Then what it returns is there (its ops keep it so); a ``device`` it only hands to others says less."""
    memo: dict[int, tuple[cst.FunctionDef, bool]] = ctx.__dict__.setdefault("_builds_at_device_memo", {})
    known = memo.get(id(function))
    if known is None or known[0] is not function:
        built = any(ctx.qname(call.func) in FACTORIES and type(device := ctx.keyword(call, "device")) is cst.Arg
                    and type(device.value) is cst.Name and device.value.value == "device"
                    for call in ctx.tree.nodes_under(function, cst.Call))
        known = memo[id(function)] = (function, built)
    return known[1]
