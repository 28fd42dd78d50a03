"""Tensors made on the host and then copied to the device: where a host tensor comes from,
how far it travels on the host (arithmetic, views, torch functions, a few statements,
a helper's return), and the move that uploads it. Shared by the create-then-move,
constant-upload and host-index rules."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.bounded import Bounded
from torchlint.analysis.decoding import grown_names
from torchlint.analysis.devices import DTYPE_CONVERSIONS
from torchlint.analysis.kinds import Kind
from torchlint.analysis.loaders import is_dataloader, no_work_for_workers
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Factories that fill a new tensor (on the host unless given `device=`).
FACTORIES = frozenset({
    "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
    "torch.randint", "torch.arange", "torch.eye", "torch.linspace", "torch.logspace", "torch.randperm",
    # Windows for `torch.stft` and filters: built on the host unless given `device=` like any factory.
    "torch.hann_window", "torch.hamming_window", "torch.blackman_window", "torch.bartlett_window", "torch.kaiser_window",
})
# Calls that copy data that exists on the host into a tensor (on the host unless given `device=`).
FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
                       "torch.IntTensor", "torch.BoolTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.ByteTensor"})
# Tensor methods whose result lives where the tensor does: views, reshapes, element-wise math.
PLACE_KEEPING = DTYPE_CONVERSIONS | frozenset({
    "unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "repeat", "permute", "transpose", "t",
    "flip", "flatten", "unflatten", "clone", "detach", "cumsum", "cumprod", "pow", "exp", "log", "sin", "cos",
    "sqrt", "rsqrt", "neg", "abs", "clamp", "clamp_min", "clamp_max", "floor", "ceil", "round", "sigmoid",
    "tanh", "mul", "add", "sub", "div", "float", "view_as", "reshape_as", "tril", "triu", "repeat_interleave",
})
# Methods whose arguments are sizes or dimensions (or another tensor's shape): any argument goes.
_SHAPES = frozenset({"unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "repeat", "permute", "transpose", "t", "flip",
                     "flatten", "unflatten", "view_as", "reshape_as", "tril", "triu", "contiguous", "clone", "detach"})
# torch functions whose result lives where their tensor arguments do.
_PLACE_KEEPING_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "exp", "log", "sin", "cos", "sqrt", "rsqrt", "pow", "outer", "cat", "stack", "cumsum", "cumprod", "flip",
    "clamp", "abs", "neg", "sigmoid", "tanh", "floor", "ceil", "round", "tril", "triu", "unsqueeze", "reshape",
    "polar", "complex", "einsum", "matmul", "mul", "add", "sub", "div", "where", "exp2", "log2", "erf",
))
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power, cst.MatrixMultiply)
_LOOKAHEAD = 6  # statements after the one that makes a tensor where its move still counts


class Uploads:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._depth = Bounded()  # helpers that return other helpers' results
        self._asking: set[int] = set()  # the helpers whose returns are being read

    # --- Python numbers ------------------------------------------------------------------
    @cached_property
    def _size_names(self) -> dict[int, set[str]]:
        """Scope -> names given to a factory as a size (``torch.arange(half)``): Python ints."""
        found: dict[int, set[str]] = {}
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            if ctx.qname(call.func) in FACTORIES:
                for arg in call.args:
                    if type(arg.value) is cst.Name and (arg.keyword is None or arg.keyword.value in ("start", "end", "step", "size")):
                        found.setdefault(id(ctx.tree.scope_of(call)), set()).add(arg.value.value)
        return found

    def python_number(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is ``expr`` a plain Python number: a literal, a constant, ``math.log(p)``,
        ``x.shape[0]``, ``len(xs)``, a name used as a factory's size, arithmetic of those?"""
        ctx = self.ctx
        expr_type = type(expr)
        if expr_type in (cst.Integer, cst.Float) or depth > 4:
            return expr_type in (cst.Integer, cst.Float)
        if expr_type is cst.UnaryOperation:
            return self.python_number(expr.expression, at, depth + 1)
        if expr_type is cst.BinaryOperation:
            return self.python_number(expr.left, at, depth + 1) and self.python_number(expr.right, at, depth + 1)
        if ctx.constants.int_value(expr, at) is not None or ctx.values.kind(expr, at) is Kind.HOST:
            return True
        if expr_type is cst.Call:
            func = expr.func
            qualified = ctx.qname(func) or ""
            if qualified.startswith("math.") or type(func) is cst.Name and func.value in ("len", "int", "float", "round") and not qualified:
                return True
            return type(func) is cst.Attribute and func.attr.value in ("size", "dim", "numel", "item")
        if expr_type is cst.Subscript:
            value = expr.value
            return type(value) is cst.Attribute and value.attr.value == "shape"
        if expr_type is cst.Attribute:
            return expr.attr.value in ("ndim",)
        if expr_type is cst.Name:
            if expr.value in self._size_names.get(id(ctx.tree.scope_of(at)), ()):
                return True
            binding = ctx.bindings.reaching(expr.value, at)
            return binding is not None and binding.kind == "assign" and binding.element is None and binding.value is not None and self.python_number(binding.value, binding.node, depth + 1)
        return False

    # --- where a host tensor comes from --------------------------------------------------
    def host_factory(self, call: cst.Call) -> bool:
        """A factory call without a device (or with ``device="cpu"``); without one, not in a file
        that sets a default device (``torch.set_default_device(device)``: cleanrl's ppo_trxl)."""
        ctx = self.ctx
        if ctx.qname(call.func) not in FACTORIES:
            return False
        device = ctx.keyword(call, "device")
        return not ctx.devices.default_device_set() if device is None else ctx.devices.device_value(device.value, call) == "host"

    def made_on_host(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> cst.Call | None:
        """The call that made ``expr`` on the host, through place-keeping methods, arithmetic
        with numbers and names bound in the same scope: a factory (``torch.arange(n)``),
        a copy of host data (``torch.tensor(xs)``, ``torch.from_numpy(a)``), or a call of a
        helper of this file that returns one."""
        ctx = self.ctx
        if depth > 5:
            return None
        expr_type = type(expr)
        if expr_type is cst.Call:
            qualified = ctx.qname(expr.func)
            if qualified in FACTORIES:
                return expr if self.host_factory(expr) else None
            if qualified in FROM_DATA:  # (`torch.tensor(xs)` builds on the default device too)
                return expr if ctx.keyword(expr, "device") is None and not ctx.devices.default_device_set() else None
            func = expr.func
            if qualified is None and type(func) is cst.Attribute and func.attr.value in PLACE_KEEPING:
                return self.made_on_host(func.value, at, depth + 1)
            if qualified is None and self.host_helper(expr) is not None:
                return expr
            return None
        if expr_type is cst.BinaryOperation and type(expr.operator) in ARITHMETIC:
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                made = self.made_on_host(side, at, depth + 1)
                if made is not None and self.python_number(other, at):
                    return made
            return None
        if expr_type is cst.UnaryOperation:
            return self.made_on_host(expr.expression, at, depth + 1)
        if expr_type is cst.Subscript:
            return self.made_on_host(expr.value, at, depth + 1)
        if expr_type is cst.Name:
            binding = ctx.bindings.reaching(expr.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
                return None
            if ctx.tree.scope_of(binding.node) is not ctx.tree.scope_of(at) or self._filled(expr.value, binding.node, at):
                return None
            return self.made_on_host(binding.value, binding.node, depth + 1)
        return None

    def _filled(self, name: str, bound: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Is ``name`` written into between ``bound`` and ``at`` (``buf[i] = v``, ``buf += v``,
        ``buf.fill_(0)``)? Then it holds more than its factory made."""
        tree = self.ctx.tree
        start, end = tree.index(bound), tree.index(at)
        for node in tree.names_valued_between(name, start, end):
            parent = tree.parent(node)
            if type(parent) is cst.Subscript and parent.value is node and type(tree.parent(parent)) in (cst.AssignTarget, cst.AugAssign):
                return True
            if type(parent) is cst.AugAssign and parent.target is node:
                return True
            if type(parent) is cst.Attribute and parent.value is node and parent.attr.value.endswith("_") and not parent.attr.value.startswith("_"):
                return True
        return False

    def host_helper(self, call: cst.Call) -> cst.Call | None:
        """``noise_like(shape)``, a function of this file every ``return`` of which is a
        tensor made on the host: the factory it uses (None when it is not such a helper)."""
        ctx = self.ctx
        function = ctx.functions.called(call, ctx.qname(call.func))
        if function is None:
            return None
        memo: dict[int, cst.Call | None] = self.__dict__.setdefault("_helpers", {})
        if id(function) in memo:
            return memo[id(function)]
        if id(function) in self._asking or self._depth.waiting(id(function)):
            return None  # recursion
        return self._depth.call(id(function), lambda: self._helper_factory(function))  # 1,400 helpers returning the next one's result

    def _helper_factory(self, function: cst.FunctionDef) -> cst.Call | None:
        ctx = self.ctx
        self._asking.add(id(function))
        try:
            returns = [r for r in ctx.values.returns_of(function) if r.value is not None]
            made = [self.made_on_host(r.value, r) for r in returns]
        finally:
            self._asking.discard(id(function))
        found = made[0] if made and all(m is not None and ctx.qname(m.func) in FACTORIES for m in made) else None
        self.__dict__["_helpers"][id(function)] = found
        return found

    # --- how far it travels on the host ---------------------------------------------------
    def host_chain(self, made: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
        """The outermost expression that computes on the host from ``made``: through dtype
        conversions, views and reshapes (``.unsqueeze(0).expand(b, -1)``), arithmetic with
        numbers or other host-made tensors, indexing and place-keeping torch functions
        (``torch.exp(-c * torch.arange(n) / n)``). Also whether only numbers joined it (a
        ``device=`` on ``made`` alone then moves the whole computation)."""
        tree = self.ctx.tree
        current, alone = made, True
        while True:
            parent = tree.parent(current)
            parent_type = type(parent)
            if parent_type is cst.UnaryOperation and type(parent.operator) is cst.Minus:
                current = parent
            elif parent_type is cst.BinaryOperation and type(parent.operator) in ARITHMETIC:
                other = parent.right if parent.left is current else parent.left
                if self.python_number(other, parent):
                    current = parent
                elif self._factory_made(other, parent):
                    current, alone = parent, False
                else:
                    return current, alone
            elif parent_type is cst.Attribute and parent.value is current:
                call = tree.parent(parent)
                if type(call) is not cst.Call or call.func is not parent:
                    return current, alone
                method = parent.attr.value
                if method in _SHAPES or self.ctx.devices.dtype_only_to(call) or method in PLACE_KEEPING and all(
                        self.python_number(a.value, call) or self._factory_made(a.value, call) for a in call.args if a.keyword is None):
                    current = call
                else:
                    return current, alone
            elif parent_type is cst.Subscript and parent.value is current:
                current = parent
            elif parent_type in (cst.Arg, cst.Element):
                joined = self._joining_function(parent, current)
                if joined is None:
                    return current, alone
                current, alone = joined
            else:
                return current, alone

    def _joining_function(self, arg: cst.CSTNode, value: cst.BaseExpression) -> tuple[cst.Call, bool] | None:
        """``torch.exp(value)``, ``torch.cat([value, other])``: a place-keeping torch function
        whose other tensor arguments are numbers or made on the host too."""
        tree = self.ctx.tree
        holder = tree.parent(arg)
        if type(arg) is cst.Element:
            if type(holder) not in (cst.List, cst.Tuple):
                return None
            arg = tree.parent(holder)
            if type(arg) is not cst.Arg:
                return None
            holder = tree.parent(arg)
        if type(holder) is not cst.Call or self.ctx.qname(holder.func) not in _PLACE_KEEPING_FUNCTIONS or arg.keyword is not None:
            return None
        alone = True
        for other in holder.args:
            values = [e.value for e in other.value.elements] if type(other.value) in (cst.List, cst.Tuple) else [other.value]
            for item in values:
                if item is value or other.keyword is not None or self.python_number(item, holder) or type(item) is cst.SimpleString:
                    continue
                if not self._factory_made(item, holder):
                    return None  # data of its own (a batch, an array): that operand decides
                alone = False
        return holder, alone

    def _factory_made(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        made = self.made_on_host(expr, at)
        return made is not None and self.ctx.qname(made.func) in FACTORIES

    # --- the move -------------------------------------------------------------------------
    def move_of(self, expr: cst.BaseExpression) -> cst.Call | None:
        """``expr.to(device)`` / ``expr.cuda()`` right on ``expr``; or ``expr.type_as(t)`` /
        ``expr.to(t)`` with ``t`` a device tensor: to that tensor's device (and dtype)."""
        tree = self.ctx.tree
        attribute = tree.parent(expr)
        if type(attribute) is not cst.Attribute or attribute.value is not expr:
            return None
        call = tree.parent(attribute)
        if type(call) is not cst.Call or call.func is not attribute:
            return None
        if self.ctx.devices.move(call) == "device" or self.moves_like(call):
            return call
        return None

    def moves_like(self, call: cst.Call) -> bool:
        """``x.type_as(enc)``, ``x.to(enc)``: a copy to the device of ``enc``, a device tensor
        (a dtype, ``x.to(y.dtype)``, or a tensor on the host moves nothing across)."""
        ctx = self.ctx
        if ctx.method_name(call) not in ("type_as", "to") or ctx.devices.dtype_only_to(call):
            return False
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(positional) != 1 or len(call.args) > 2 or ctx.devices.device_value(positional[0], call) is not None:
            return False  # `.to(device)` is `move`'s; `.to(t, non_blocking=True)` at most one keyword more
        other = positional[0]
        return type(other) in (cst.Name, cst.Attribute, cst.Subscript) and ctx.syncs.device_tensor(other, call)

    def moved_later(self, top: cst.BaseExpression) -> cst.Call | None:
        """``x = torch.arange(n)`` then, a few statements on in the same block and with ``x``
        only reshaped on the way (``x = x.unsqueeze(0)``), ``x = x.to(device)`` or
        ``model(x.cuda())``: that move."""
        tree = self.ctx.tree
        assign = tree.parent(top)
        if type(assign) is not cst.Assign or assign.value is not top or len(assign.targets) != 1:
            return None
        name = dotted(assign.targets[0].target)
        line = tree.parent(assign)
        if name is None or type(line) is not cst.SimpleStatementLine or line.body[-1] is not assign:
            return None
        tracked = {name}
        statement = line
        for _ in range(_LOOKAHEAD):
            statement = tree.next_statement(statement)
            if statement is None:
                return None
            reads = [n for n in tree.descendants(statement) if type(n) in (cst.Name, cst.Attribute) and dotted(n) in tracked]
            if not reads:
                continue
            if type(statement) is not cst.SimpleStatementLine:
                return None  # used in a loop or a branch: maybe on the host first, maybe not every time
            for read in reads:
                top_read, _ = self.host_chain(read)
                move = self.move_of(top_read)
                if move is not None:
                    return move
            rebound = self._reshaped(statement, tracked)
            if rebound is None:
                return None  # used for something else first: the host copy may be needed
            tracked.add(rebound)
        return None

    def _reshaped(self, statement: cst.CSTNode, tracked: set[str]) -> str | None:
        """``y = x.unsqueeze(0)`` / ``x = x * 2``: a tracked name reshaped on the host into a name."""
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or type(statement.body[0]) is not cst.Assign:
            return None
        assign = statement.body[0]
        target = dotted(assign.targets[0].target) if len(assign.targets) == 1 else None
        if target is None:
            return None
        reads = [n for n in self.ctx.tree.descendants(assign.value) if type(n) in (cst.Name, cst.Attribute) and dotted(n) in tracked]
        if len(reads) != 1:
            return None
        top, _ = self.host_chain(reads[0])
        return target if top is assign.value else None

    # --- uploads of data that does not change between steps ------------------------------
    def uploaded_data(self, call: cst.Call) -> cst.BaseExpression | None:
        """The host data ``call`` copies to the device: ``torch.tensor(data, device=d)``,
        ``torch.from_numpy(data).to(d)``, ``torch.as_tensor(data).float().cuda()``."""
        ctx = self.ctx
        qualified = ctx.qname(call.func)
        if qualified in FROM_DATA:
            device = ctx.keyword(call, "device")
            if device is None or ctx.devices.device_value(device.value, call) != "device":
                return None
            return call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None
        if qualified is not None or ctx.devices.move(call) != "device":
            return None
        made = self.made_on_host(call.func.value, call)  # type: ignore[attr-defined]
        if made is None or ctx.qname(made.func) not in FROM_DATA or not made.args or made.args[0].keyword is not None:
            return None
        return made.args[0].value

    def same_every_step(self, data: cst.BaseExpression, at: cst.CSTNode, step: cst.CSTNode | None) -> bool:
        """Does ``data`` hold the same value on every step: a literal of numbers, a module
        constant, an attribute set only where the object is built (``self.window`` from
        ``__init__``), or a name bound before the step loop ``step`` and never inside it?"""
        ctx = self.ctx
        data_type = type(data)
        if data_type in (cst.Integer, cst.Float) or data_type is cst.UnaryOperation and type(data.expression) in (cst.Integer, cst.Float):
            return True
        if data_type in (cst.List, cst.Tuple):
            return bool(data.elements) and all(self.same_every_step(e.value, at, step) for e in data.elements)
        if data_type is cst.BinaryOperation:  # `1.0 - self.alphas_cumprod`
            return self.same_every_step(data.left, at, step) and self.same_every_step(data.right, at, step)
        name = dotted(data) if data_type in (cst.Name, cst.Attribute) else None
        if name is None or ctx.qname(data) is not None:
            return False
        bound = ctx.bindings.lookup(name, at)
        loop = step if type(step) in (cst.For, cst.While) else None
        if loop is not None and bound and all(b.kind == "param" for b in bound):
            return True  # a parameter of the function that runs the loop: the same on every pass
        if not bound or any(b.kind not in ("assign", "augassign") for b in bound):
            return False  # a parameter, a loop variable: it may change
        if name.startswith("self.") and name.count(".") == 1:
            return all(_building(ctx.tree.enclosing_function(b.node)) for b in bound)
        if "." in name:
            return False
        if loop is not None and any(b.node is loop or ctx.tree.is_inside(b.node, loop) for b in bound):
            return False  # `obs = next_obs` in the loop: each step's data
        if loop is not None and name in grown_names(ctx, loop):
            return False  # `tokens.append(tok)` in the loop: longer on each pass
        if all(ctx.tree.enclosing_function(b.node) is None for b in bound) and ctx.tree.enclosing_function(at) is not None:
            return True  # a module constant, read in a function
        return loop is not None  # bound before the loop, never inside it

    def decoded_feed(self, data: cst.BaseExpression, at: cst.CSTNode, loop: cst.CSTNode | None) -> str | None:
        """In a decode loop that appends each token it decodes to a host list (``inputs.append(
        output.argmax(-1).item())``), is ``data`` that list read back: ``"last"`` for its newest
        token (``[inputs[-1]]``, ``inputs[-1]``), ``"prefix"`` for the list or a slice of it
        (``trg_indexes``, ``tokens[-block:]``)? None otherwise."""
        ctx = self.ctx
        if type(loop) not in (cst.For, cst.While) or not ctx.loops.decodes(loop):
            return None
        grown = grown_names(ctx, loop)
        parts = list(data.elements) if type(data) in (cst.List, cst.Tuple) else [data]  # type: ignore[attr-defined]
        kinds = set()
        for part in parts:
            value = part.value if type(part) is cst.Element else part
            if type(value) is cst.Subscript and dotted(value.value) in grown:
                sliced = any(type(e.slice) is cst.Slice for e in value.slice)
                kinds.add("prefix" if sliced and value is data else "last")
            elif dotted(value) in grown:
                kinds.add("prefix" if value is data else "last")
            elif not self.same_every_step(value, at, loop):
                return None  # something else of the step rides along: not only the tokens
        return None if not kinds else "prefix" if "prefix" in kinds else "last"

    def uploaded_batch(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``value`` a batch from the loader the step just copied to the device
        (``caplens.to(device)``, or a name bound to that: ``caplens = caplens.to(device)``)?"""
        ctx = self.ctx
        if type(value) is cst.Name:
            binding = ctx.bindings.reaching(value.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None:
                return False
            value, at = binding.value, binding.node
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute or ctx.devices.move(value) != "device":
            return False
        receiver = value.func.value
        return ctx.devices.is_host_batch(receiver, at) or ctx.devices.loader_value(receiver, at)

    def constant_parameter(self, data: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """``def extract(arr, t): torch.from_numpy(arr).to(t.device)``: the parameter ``data``
        names, when that is all it is bound to (the callers decide whether it is constant)."""
        if type(data) is not cst.Name:
            return None
        bound = self.ctx.bindings.lookup(data.value, at)
        if len(bound) != 1 or bound[0].kind != "param":
            return None
        return bound[0].node  # type: ignore[return-value]

    @cached_property
    def round_trips(self) -> dict[int, tuple[cst.Call, cst.Call]]:
        """id(move to the host) -> (that move, the move that takes its value back to the device)
        in the same pass of the same function, across statements: ``a = logits.cpu().numpy()``,
        host work on ``a`` (``a[order[k:]] = -inf``), then ``torch.from_numpy(a).to(d)`` (TL112;
        TL102 leaves such a copy to it)."""
        ctx = self.ctx
        found: dict[int, tuple[cst.Call, cst.Call]] = {}
        for call in ctx.tree.nodes(cst.Call):
            if type(call.func) is not cst.Attribute or ctx.devices.move(call) != "device" or ctx.tree.enclosing_function(call) is None:
                continue
            back = self._moved_to_host_before(call.func.value, call)
            if back is not None and id(back) not in found and self._same_pass(back, call):
                found[id(back)] = (back, call)
        return found

    def _moved_to_host_before(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The move to the host (``x.cpu()``) whose value ``expr`` still is, through NumPy and
        back (``.numpy()``, ``torch.from_numpy``), dtype changes and names bound in between
        (not one made in the same expression: that is the one-expression round trip)."""
        ctx = self.ctx
        named = False  # only across statements: a name bound in between
        for _ in range(8):
            if type(expr) is cst.Name:
                binding = ctx.bindings.reaching(expr.value, at)
                if binding is None or binding.kind != "assign" or binding.value is None or binding.element is not None:
                    return None
                expr, at, named = binding.value, binding.node, True
            elif type(expr) is cst.Call and ctx.qname(expr.func) in ("torch.from_numpy", "torch.as_tensor", "torch.tensor"):
                if ctx.keyword(expr, "device") is not None or len(expr.args) != 1 or expr.args[0].keyword is not None:
                    return None
                expr = expr.args[0].value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                moved = ctx.devices.move(expr)
                if moved is not None:
                    return expr if moved == "host" and named else None
                if expr.func.attr.value not in KEEPS_THE_VALUE | {"numpy", "type"}:
                    return None
                expr = expr.func.value
            else:
                return None
        return None

    def _same_pass(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Do both run in the same pass: in one function, and in each loop around the second?"""
        tree, loops = self.ctx.tree, self.ctx.loops
        return tree.enclosing_function(first) is tree.enclosing_function(second) and all(
            tree.is_inside(first, loop) for loop in loops.enclosing_loops(second))

    def parameter_behind(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """The parameter whose value ``expr`` still is, give or take a shape, a sort or a
        constant offset: ``(lengths - 1)``, ``lengths.squeeze(1)``, after ``lengths, order =
        lengths.squeeze(1).sort(...)`` (TL112: an argument its caller uploaded, read back)."""
        ctx = self.ctx
        for _ in range(6):
            if type(expr) is cst.BinaryOperation and type(expr.right) in (cst.Integer, cst.Float):
                expr = expr.left
            elif type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in KEEPS_THE_VALUE:
                expr = expr.func.value
            elif type(expr) is cst.Name:
                binding = ctx.bindings.reaching(expr.value, at)
                if binding is None:
                    return None
                if binding.kind == "param":
                    return binding.node if type(binding.node) is cst.Param else None  # type: ignore[return-value]
                if binding.kind != "assign" or binding.value is None or binding.element not in (None, 0):
                    return None
                expr, at = binding.value, binding.node
            else:
                return None
        return None

    # --- indexes built on the host -----------------------------------------------------------
    def host_index(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``index`` an index array that lives on the host: a tensor made there
        (``torch.arange(n)``, ``torch.tensor(ids)``), a NumPy array, or a Python list of
        positions (each is copied to the device when it indexes a device tensor)?"""
        ctx = self.ctx
        if self.made_on_host(index, at) is not None:
            return True
        if ctx.values.is_numpy_array(index, at):
            return True
        if type(index) is cst.ListComp or self.listed_index(index, at):
            return True
        return self.index_loader_batch(index, at) or (type(index) is cst.Name and self._batch_sampler_batch(index, at))

    def listed_index(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python list of positions written in the code (``q[[0, 1, 2]]``,
        ``logits[:, [-1], :]``, a name bound to one): a few bytes, whose copy costs only
        its wait for the device's queue."""
        ctx = self.ctx
        if type(index) is cst.List:
            return bool(index.elements) and all(_position(e.value) for e in index.elements if not isinstance(e, cst.StarredElement))
        return type(index) is cst.Name and ctx.values.is_sequence_literal(index, at) and not any(
            type(b.value) is cst.Tuple for b in ctx.bindings.lookup(index.value, at))

    def index_loader_batch(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A batch of a DataLoader over indices (``for perm in DataLoader(range(n), b,
        shuffle=True)``): the loader collates the Python ints into a host tensor each step."""
        if type(index) is not cst.Name:
            return False
        binding = self.ctx.bindings.reaching(index.value, at)
        if binding is None or binding.kind != "for" or binding.element is not None or binding.value is None:
            return False
        loader = self.ctx.values.constructed_by(binding.value, binding.node)
        return loader is not None and is_dataloader(self.ctx, loader) and no_work_for_workers(self.ctx, loader) == "indices"

    def _batch_sampler_batch(self, index: cst.Name, at: cst.CSTNode) -> bool:
        """``indices`` in ``for indices in BatchSampler(SubsetRandomSampler(range(n)), mb, ...)``
        (the sampler made there or bound to a name first): a ``BatchSampler`` yields Python
        lists of positions, each copied to the device when it indexes a device tensor."""
        for binding in self.ctx.bindings.lookup(index.value, at):
            if binding.kind != "for" or binding.element is not None:
                continue
            sampler = binding.value
            if type(sampler) is cst.Name:
                made = [b.value for b in self.ctx.bindings.lookup(sampler.value, binding.node) if b.kind == "assign" and b.element is None]
                sampler = made[-1] if len(made) == 1 else None
            if type(sampler) is cst.Call and _BATCH_SAMPLER.match(self.ctx.qname(sampler.func) or dotted(sampler.func) or ""):
                return True
        return False


# torch's sampler that groups another sampler's positions into lists (`torch.utils.data.BatchSampler`).
_BATCH_SAMPLER = re.compile(r"(?:torch\.utils\.data\.(?:sampler\.)?)?BatchSampler$")


def _position(value: cst.BaseExpression) -> bool:
    """An element of an index list: a number (``-1`` too) or a name."""
    if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
        value = value.expression
    return type(value) is cst.Integer or type(value) is cst.Name


def _building(function: cst.FunctionDef | None) -> bool:
    """A method that builds the object (runs once, not per step)."""
    return function is not None and (function.name.value in ("__init__", "setup", "build", "reset_parameters", "__post_init__")
                                     or function.name.value.startswith(("_build", "build_", "_init", "init_")))
# Calls whose result is still the value they are called on, as far as where it lives goes.
KEEPS_THE_VALUE = DTYPE_CONVERSIONS | {"detach", "clone", "squeeze", "unsqueeze", "view", "reshape", "flatten", "astype", "copy", "sort"}
