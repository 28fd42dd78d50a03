"""A tensor built on the host by a factory and then moved to the device."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.devices import is_cpu_device, legacy_dtype
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.names import dotted
from torchlint.analysis.uploads import FACTORIES
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_FACTORIES = FACTORIES
# Legacy typed constructors take no `device=`: reported, never fixed.
_LEGACY = {
    "torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor",
    "torch.BFloat16Tensor", "torch.ByteTensor", "torch.CharTensor", "torch.ShortTensor",
    "torch.IntTensor", "torch.LongTensor", "torch.BoolTensor",
}

# Arguments that fix the result's device or storage: adding `device=` would fight them.
_PLACES_STORAGE = ("out", "pin_memory", "layout")


class CreateThenMove(Check):
    """A tensor factory whose result is moved with `.cuda()`/`.to(device)` right away."""

    code = "TL110"
    name = "create-then-move"
    message = "`{factory}` builds the tensor on the host and then copies it to the device with `{move}`"
    fix_hint = "Create it where it is used: pass `device=` (and `dtype=`) to the factory, e.g. `torch.zeros(n, device=device)`"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if qualified in _FACTORIES or qualified in _LEGACY:
            if qualified in _LEGACY and _holds_data(ctx, node):
                return  # built from data, like torch.tensor: the data is copied over either way
            device = ctx.keyword(node, "device")
            if device is not None and not is_cpu_device(device.value, ctx):
                return  # already built on a device (or one chosen at run time)
            hint = _legacy_hint(ctx, node, qualified) if qualified in _LEGACY else ""
            self._check_made(node, fixable=qualified in _FACTORIES, hint=hint)
            return
        # A helper's result moved on: it is read as `helper(...).to(d)`, `helper(...) * k` or assigned.
        parent = ctx.tree.parent(node)
        if qualified is not None or type(parent) not in (cst.Attribute, cst.Assign, cst.BinaryOperation, cst.UnaryOperation):
            return
        factory = ctx.uploads.host_helper(node)
        if factory is not None:  # `noise_like(shape).to(device)`: the helper builds on the host
            function = ctx.functions.called(node, None)
            hint = f"Give `{function.name.value}()` the device and pass it to `{short_code(ctx.module, factory)}` (`device=`)"  # type: ignore[union-attr]
            self._check_made(node, fixable=False, hint=hint)

    def _check_made(self, made: cst.Call, fixable: bool, hint: str) -> None:
        """Report ``made`` when what is computed from it on the host is moved to the device:
        in the same expression (through views, arithmetic and torch functions), or a few
        statements later."""
        uploads = self.ctx.uploads
        top, alone = uploads.host_chain(made)
        move = uploads.move_of(top)
        fix = None
        if move is None:
            move = uploads.moved_later(top)
            if move is None:
                return
        elif fixable and alone:
            fix = self._fix(made, move)
        self.report(made, fix=fix, hint=hint, factory=short_code(self.ctx.module, made), move=_move_text(self.ctx.module, move))

    # --- the fix ---------------------------------------------------------------------------
    def _fix(self, factory: cst.Call, move: cst.Call) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        ctx = self.ctx
        if ctx.keyword(factory, "device") is not None or ctx.has_star_kwargs(factory):
            return None
        if ctx.keyword(factory, "requires_grad") is not None:
            return None  # moving a `requires_grad` leaf makes a non-leaf: the fix would change autograd
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


def _holds_data(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """``torch.LongTensor([1, 2])``, ``torch.FloatTensor(array)``,
    ``torch.IntTensor(tokenizer.encode(text))``: a legacy constructor given data, not sizes
    (a call that is not a size, such as ``len(x)`` or ``x.size(0)``, returns data)."""
    first = call.args[0].value if call.args and call.args[0].keyword is None else None
    if first is None:
        return False
    if type(first) is cst.Call and not ctx.uploads.python_number(first, call):
        return True
    if type(first) is cst.Name and any(b.kind == "assign" and type(b.value) is cst.Call and dotted(b.value.func) == "list"
                                       for b in ctx.bindings.lookup(first.value, call)):
        return True  # `lengths = list()` ... `torch.LongTensor(lengths)`
    return ctx.values.is_sequence_literal(first, call) or ctx.values.is_numpy_array(first, call)

