"""A tensor built on the host by a factory and then moved to the device."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.devices import DTYPE_CONVERSIONS, is_cpu_device, legacy_dtype
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.analysis.values import Kind
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_FACTORIES = {
    "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
    "torch.randint", "torch.arange", "torch.eye", "torch.linspace",
    "torch.logspace", "torch.randperm",
}
# Drawn from a random generator: on the device, from the device's generator.
_RANDOM = {"torch.rand", "torch.randn", "torch.randint", "torch.randperm"}
# Legacy typed constructors take no `device=`: reported, never fixed.
_LEGACY = {
    "torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor",
    "torch.BFloat16Tensor", "torch.ByteTensor", "torch.CharTensor", "torch.ShortTensor",
    "torch.IntTensor", "torch.LongTensor", "torch.BoolTensor",
}

# Arguments that fix the result's device or storage: adding `device=` would fight them.
_PLACES_STORAGE = ("out", "pin_memory", "layout")

_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)


class CreateThenMove(Check):
    """A tensor factory whose result is moved with `.cuda()`/`.to(device)` right away."""

    code = "TL110"
    name = "create-then-move"
    cost = Cost.UPLOAD
    message = "`{factory}` builds the tensor on the host and then copies it to the device with `{move}`"
    fix_hint = "Create it where it is used: pass `device=` (and `dtype=`) to the factory, e.g. `torch.zeros(n, device=device)`"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if qualified not in _FACTORIES and qualified not in _LEGACY:
            return
        if qualified in _LEGACY and not _given_sizes(ctx, node):
            return  # built from data (or maybe): copied over either way; TL204 names the data's fix
        device = ctx.keyword(node, "device")
        if device is not None and not is_cpu_device(device.value, ctx):
            return  # already built on a device (or one chosen at run time)
        chain_top = self._conversions_above(node)
        move = self._move_of(chain_top)
        if move is None:
            move = self._moved_by_next_statement(chain_top)
            if move is None:
                return
            fix = None
        else:
            fix = self._fix(node, move, qualified) if qualified in _FACTORIES else None
        hint = _legacy_hint(ctx, node, qualified) if qualified in _LEGACY else ""
        # A random draw made on the device comes from the device's generator: a seeded run
        # draws other values, so that fix is offered as unsafe only.
        safety = FixSafety.UNSAFE if qualified in _RANDOM else None
        self.report(
            node, fix=fix, hint=hint, fix_safety=safety,
            fix_description="draw it on the device (a seeded run draws other values)" if safety else "",
            factory=short_code(ctx.module, node), move=_move_text(ctx.module, move),
        )

    # --- the shape of the code ---------------------------------------------------------
    def _conversions_above(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """``node`` followed by dtype conversions (``.long()``, ``.to(torch.half)``) and
        arithmetic with a number (``(torch.ones(n) * i).long()``)."""
        current = node
        while True:
            arithmetic = self._arithmetic_on(current)
            if arithmetic is not None:
                current = arithmetic
                continue
            call = self._method_call_on(current)
            if call is None:
                return current
            method = call.func.attr.value  # type: ignore[attr-defined]
            if (method in DTYPE_CONVERSIONS and not call.args) or self.ctx.devices.dtype_only_to(call):
                current = call
                continue
            return current

    def _arithmetic_on(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """``expr * i``, ``1 + expr``, ``-expr`` with a plain number: the result lives where
        the factory's tensor does. With anything else (a batch, a tensor of unknown origin)
        the move is that operand's, not the factory's."""
        parent = self.ctx.tree.parent(expr)
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Minus):
            return parent
        if not isinstance(parent, cst.BinaryOperation) or not isinstance(parent.operator, _ARITHMETIC):
            return None
        other = parent.right if parent.left is expr else parent.left
        if isinstance(other, (cst.Integer, cst.Float)) or self.ctx.constants.int_value(other, parent) is not None:
            return parent
        return parent if self.ctx.values.kind(other, parent) is Kind.HOST else None

    def _method_call_on(self, expr: cst.BaseExpression) -> cst.Call | None:
        tree = self.ctx.tree
        attribute = tree.parent(expr)
        if not isinstance(attribute, cst.Attribute) or attribute.value is not expr:
            return None
        call = tree.parent(attribute)
        if isinstance(call, cst.Call) and call.func is attribute:
            return call
        return None

    def _move_of(self, expr: cst.BaseExpression) -> cst.Call | None:
        call = self._method_call_on(expr)
        if call is not None and self.ctx.devices.move(call) == "device":
            return call
        return None

    def _moved_by_next_statement(self, value: cst.BaseExpression) -> cst.Call | None:
        """``x = torch.zeros(3)`` followed by ``x = x.to(device)``: the move of ``x``."""
        tree = self.ctx.tree
        assign = tree.parent(value)
        if not isinstance(assign, cst.Assign) or assign.value is not value or len(assign.targets) != 1:
            return None
        name = dotted(assign.targets[0].target)
        line = tree.parent(assign)
        if name is None or not isinstance(line, cst.SimpleStatementLine) or line.body[-1] is not assign:
            return None
        following = tree.next_statement(line)
        if not isinstance(following, cst.SimpleStatementLine) or not isinstance(following.body[0], cst.Assign):
            return None
        moved = following.body[0].value
        while isinstance(moved, cst.Call) and isinstance(moved.func, cst.Attribute):
            receiver = moved.func.value
            if self.ctx.devices.move(moved) == "device" and self._is_name_through_conversions(receiver, name):
                return moved
            moved = receiver
        return None

    def _is_name_through_conversions(self, expr: cst.BaseExpression, name: str) -> bool:
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if not ((expr.func.attr.value in DTYPE_CONVERSIONS and not expr.args) or self.ctx.devices.dtype_only_to(expr)):
                return False
            expr = expr.func.value
        return dotted(expr) == name

    # --- the fix ---------------------------------------------------------------------------
    def _fix(self, factory: cst.Call, move: cst.Call, qualified: str | None) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        ctx = self.ctx
        if ctx.keyword(factory, "device") is not None or ctx.has_star_kwargs(factory):
            return None
        if ctx.keyword(factory, "requires_grad") is not None:
            return None  # moving a `requires_grad` leaf makes a non-leaf: the fix would change autograd
        if ctx.keyword(factory, "generator") is not None:
            return None  # a generator draws on its own device: `device="cuda"` with a CPU one raises
        if any(ctx.keyword(factory, name) is not None for name in _PLACES_STORAGE):
            return None  # `out=` (or pinned or sparse storage) already decides where the result lives
        target = _device_argument(move)
        if target is None:
            return None
        receiver = move.func.value  # type: ignore[attr-defined]
        new_factory = with_keyword(factory, "device", target)
        new = new_factory if receiver is factory else receiver.deep_replace(factory, new_factory)
        if move.lpar and not new.lpar:  # `(torch.zeros(3)\n .cuda())`: the parentheses stay
            new = new.with_changes(lpar=move.lpar, rpar=move.rpar)
        return move, new


def _device_argument(move: cst.Call) -> cst.BaseExpression | None:
    """The device of ``.to(device)`` / ``.cuda()`` / ``.cuda(n)`` when that is its only argument."""
    args = move.args
    method = move.func.attr.value  # type: ignore[attr-defined]
    if method == "cuda" and not args:
        return cst.SimpleString('"cuda"')
    if len(args) != 1 or args[0].star:
        return None
    arg = args[0]
    if arg.keyword is not None and arg.keyword.value != "device":
        return None
    return arg.value


def _legacy_hint(ctx, factory: cst.Call, qualified: str | None) -> str:  # type: ignore[no-untyped-def]
    """Legacy constructors take no ``device=``: name the modern factory that does."""
    dtype = legacy_dtype(qualified) or "float32"
    return f"Legacy constructors take no `device=`: create it on the device with `torch.empty(size, dtype=torch.{dtype}, device=device)`"


def _move_text(module: cst.Module, move: cst.Call) -> str:
    method = move.func.attr.value  # type: ignore[attr-defined]
    arguments = ", ".join(module.code_for_node(a).strip().rstrip(",").strip() for a in move.args)
    return f".{method}({arguments})" if len(arguments) <= 40 else f".{method}(...)"


def _given_sizes(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """``torch.FloatTensor(n, 3)``, ``torch.LongTensor(x.size(0))``: a legacy constructor
    given sizes (which `torch.empty(..., device=)` replaces), not data. One argument of
    unknown kind is data as often as not: `torch.empty` would be wrong code for data."""
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    return len(args) != 1 or _size_like(ctx, args[0], call)  # data comes alone: several are sizes


def _size_like(ctx, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    if isinstance(expr, cst.Integer) or ctx.constants.int_value(expr, at) is not None:
        return True
    if isinstance(expr, cst.Tuple):
        return all(_size_like(ctx, e.value, at) for e in expr.elements)
    if isinstance(expr, cst.BinaryOperation):
        return _size_like(ctx, expr.left, at) and _size_like(ctx, expr.right, at)
    if isinstance(expr, cst.Call):  # `len(x)`, `x.size(0)`, `x.numel()`, `int(n)`
        name = dotted(expr.func) or ""
        return name in ("len", "int") or name.rsplit(".", 1)[-1] in ("size", "numel", "dim")
    if isinstance(expr, cst.Subscript):  # `x.shape[0]`, `x.size()[1]`
        return (dotted(expr.value) or "").endswith(".shape") or isinstance(expr.value, cst.Call) and _size_like(ctx, expr.value, at)
    if isinstance(expr, cst.Attribute):
        return expr.attr.value == "shape"  # `x.shape`: a torch.Size
    return False
