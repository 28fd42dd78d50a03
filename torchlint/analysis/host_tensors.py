"""Host tensors: where a tensor made on the host comes from (a factory, data, a helper's return, a
Python number), a part of ``Uploads``; how far it travels on the host and the move that uploads it
are ``host_moves.py``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import is_cpu_device
from torchlint.analysis.device_reach import DTYPE_CONVERSIONS, FACTORIES
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.analysis.sync_ops import ELEMENTWISE_TESTS, JOINING_FUNCTIONS

if TYPE_CHECKING:
    from torchlint.analysis.bounded import Bounded
    from torchlint.analysis.context import FileContext

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
# Of those, the ones whose only tensor is their first argument (`torch.tril(ones)`): the result
# is where that one is, whatever the others (sizes, dimensions, bounds) say.
ONE_TENSOR_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "exp", "log", "sin", "cos", "sqrt", "rsqrt", "cumsum", "cumprod", "flip", "clamp", "abs", "neg", "sigmoid",
    "tanh", "floor", "ceil", "round", "tril", "triu", "unsqueeze", "reshape", "exp2", "log2", "erf", "inverse",
))
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power, cst.MatrixMultiply)


# Decorators that keep a function's result for its arguments: the same object on every call.
_MEMOISERS = frozenset({"lru_cache", "functools.lru_cache", "cache", "functools.cache"})


class HostTensors:
    """Where one file's host tensors come from."""

    ctx: FileContext
    _depth: Bounded
    _asking: set[int]

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

    def loop_number(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``expr`` a name a loop binds to the items of a Python sequence (``for i, j in
        zip(reversed(seq), reversed(seq_next))``, ``for t in timesteps`` over a list): a number
        each time, or a host scalar. Not where the loop walks a tensor, an array or a loader
        (rows of data), nor where the code uses the name as a tensor."""
        ctx = self.ctx
        if type(expr) is not cst.Name:
            return False
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is None or binding.kind not in ("for", "comp") or binding.value is None:
            return False
        if ctx.values.kind(expr, at) in (Kind.TENSOR, Kind.NUMPY, Kind.MODULE, Kind.LOADER) or ctx.syncs.used_as_tensor(expr, at):
            return False  # known to be a tensor, or used as one (`t.view(...)`)
        walked = _walked(ctx, binding.value, binding.element)
        return walked is not None and self._sequence_of_numbers(walked, binding.node)

    def _sequence_of_numbers(self, root: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``range(n)``, a list literal, ``[-1] + list(seq[:-1])``, or a name bound to those or
        a parameter of unknown kind (a schedule passed in), never a tensor, an array or a loader."""
        ctx = self.ctx
        root_type = type(root)
        if root_type is cst.Call and type(root.func) is cst.Name and root.func.value in ("range", "reversed", "list", "sorted", "tuple") \
                and ctx.qname(root.func) is None:
            return root.func.value == "range" or bool(root.args) and self._sequence_of_numbers(root.args[0].value, at)
        if root_type in (cst.List, cst.Tuple):
            return all(type(e) is cst.Element and self.python_number(e.value, at) for e in root.elements)
        if root_type is cst.BinaryOperation and type(root.operator) is cst.Add:
            return self._sequence_of_numbers(root.left, at) and self._sequence_of_numbers(root.right, at)
        if root_type is cst.Subscript:  # `seq[:-1]`: a slice of the sequence
            return all(type(e.slice) is cst.Slice for e in root.slice) and self._sequence_of_numbers(root.value, at)
        if root_type is not cst.Name or ctx.values.kind(root, at) in (Kind.TENSOR, Kind.NUMPY, Kind.LOADER, Kind.MODULE):
            return False
        if ctx.devices.loader_value(root, at):
            return False  # batches
        bound = ctx.bindings.lookup(root.value, at)
        if not bound:
            return False
        for binding in bound:
            if binding.kind == "param":
                continue  # a schedule passed in: the loop's other uses decide (a tensor's are above)
            if binding.kind != "assign" or binding.element is not None or binding.value is None \
                    or not self._sequence_of_numbers(binding.value, binding.node):
                return False
        return True

    # --- where a host tensor comes from --------------------------------------------------
    def host_factory(self, call: cst.Call) -> bool:
        """A factory call without a device (or with ``device="cpu"``); without one, not in a file
        that sets a default device (``torch.set_default_device(device)``: cleanrl's ppo_trxl)."""
        ctx = self.ctx
        if ctx.qname(call.func) not in FACTORIES:
            return False
        device = ctx.keyword(call, "device")
        if device is not None and self._asking and (param := self.cpu_default_parameter(device.value, call)) is not None \
                and id(self.ctx.tree.enclosing_function(param)) in self._asking:
            return True  # the asked helper's `device=device`, CPU unless its caller passes one: `host_helper` asks the call
        return not ctx.devices.default_device_set() if device is None else ctx.devices.device_value(device.value, call) == "host"

    def cpu_default_parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """``device`` where it is a parameter of ``at``'s function defaulting to the CPU
        (``device: torch.device = torch.device("cpu")``, wenet's ``subsequent_mask``)."""
        if type(expr) is not cst.Name:
            return None
        binding = self.ctx.bindings.reaching(expr.value, at)
        param = binding.node if binding is not None and binding.kind == "param" else None
        if type(param) is not cst.Param or param.default is None or not is_cpu_device(param.default, self.ctx):
            return None
        return param

    def made_on_host(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, filled: bool = False) -> cst.Call | None:
        """The call that made ``expr`` on the host, through place-keeping methods, arithmetic
        with numbers and names bound in the same scope: a factory (``torch.arange(n)``),
        a copy of host data (``torch.tensor(xs)``, ``torch.from_numpy(a)``), or a call of a
        helper of this file that returns one. With ``filled``, also a name written into since
        (``arr[-shift:] = torch.arange(shift)``): it holds more than its factory made, but where it lives is the same."""
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
                return self.made_on_host(func.value, at, depth + 1, filled)
            if qualified is None and self.host_helper(expr, filled) is not None:
                return expr
            if qualified in ONE_TENSOR_FUNCTIONS and expr.args and expr.args[0].keyword is None and not expr.args[0].star:
                return self.made_on_host(expr.args[0].value, at, depth + 1, filled)  # `return torch.tril(ret)`
            if qualified in JOINING_FUNCTIONS and expr.args and expr.args[0].keyword is None:
                return self._joined_on_host(expr.args[0].value, at, depth, filled)  # `torch.cat([torch.arange(b) for _ in ...])`
            return None
        if expr_type is cst.BinaryOperation and type(expr.operator) in ARITHMETIC:
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                made = self.made_on_host(side, at, depth + 1, filled)
                if made is not None and self.python_number(other, at):
                    return made
            return None
        if expr_type is cst.Comparison and len(expr.comparisons) == 1 and type(expr.comparisons[0].operator) in ELEMENTWISE_TESTS:
            # `mask <= arange` of two host-made tensors (wenet's `subsequent_mask`), or of one and a number: a host mask
            made = self.made_on_host(expr.left, at, depth + 1, filled)
            other = expr.comparisons[0].comparator
            if made is not None and (self.python_number(other, at) or self.made_on_host(other, at, depth + 1, filled) is not None):
                return made
            return None
        if expr_type is cst.UnaryOperation:
            return self.made_on_host(expr.expression, at, depth + 1, filled)
        if expr_type is cst.Subscript:
            return self.made_on_host(expr.value, at, depth + 1, filled)
        if expr_type is cst.Name:
            binding = ctx.bindings.reaching(expr.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
                return None
            if ctx.tree.scope_of(binding.node) is not ctx.tree.scope_of(at) or not filled and self._filled(expr.value, binding.node, at):
                return None
            return self.made_on_host(binding.value, binding.node, depth + 1, filled)
        return None

    def _joined_on_host(self, parts: cst.BaseExpression, at: cst.CSTNode, depth: int, filled: bool) -> cst.Call | None:
        """The factory of the first of ``parts`` (a list, a tuple or a list comprehension of tensors) where
        every part is made on the host: what a ``torch.cat``/``torch.stack`` of them is made from."""
        if type(parts) is cst.ListComp:
            return self.made_on_host(parts.elt, at, depth + 1, filled)
        if type(parts) not in (cst.List, cst.Tuple) or not parts.elements:
            return None
        made = [self.made_on_host(e.value, at, depth + 1, filled) if type(e) is cst.Element else None for e in parts.elements]
        return made[0] if all(m is not None for m in made) else None

    def memoised_host(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.FunctionDef | None:
        """The memoised function of this file (``@lru_cache``, ``@functools.cache``) whose result ``expr``
        is, or the element of it ``expr`` unpacks, where every ``return`` makes that on the host
        (VQ-VAE-2's ``mask, start_mask = causal_mask(height * width)``, each ``torch.from_numpy(...)``):
        the same host tensor on every call, so a move of it to the device copies the same data each time.
        None otherwise (a cache keyed by a device it builds on: its results are there already)."""
        ctx = self.ctx
        if type(expr) is not cst.Name:
            return None
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is None or binding.kind != "assign" or type(binding.value) is not cst.Call \
                or ctx.tree.scope_of(binding.node) is not ctx.tree.scope_of(at) or self._filled(expr.value, binding.node, at):
            return None
        function = ctx.functions.called(binding.value, ctx.qname(binding.value.func))
        if function is None or not any(_MEMOISERS & {dotted(d.decorator.func if type(d.decorator) is cst.Call else d.decorator)}
                                       for d in function.decorators):
            return None
        returns = [r for r in ctx.values.returns_of(function) if r.value is not None]
        for returned in returns:
            value = returned.value
            if binding.element is not None:
                if type(value) not in (cst.Tuple, cst.List) or binding.element >= len(value.elements):  # type: ignore[union-attr]
                    return None
                value = value.elements[binding.element].value  # type: ignore[union-attr]
            if self.made_on_host(value, returned) is None:  # type: ignore[arg-type]
                return None
        return function if returns else None

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

    def host_helper(self, call: cst.Call, filled: bool = False) -> cst.Call | None:
        """``noise_like(shape)``, a function of this file every ``return`` of which is a
        tensor made on the host: the factory it uses (None when it is not such a helper).
        With ``filled``, also one that writes into it before returning it (see ``made_on_host``)."""
        ctx = self.ctx
        function = ctx.functions.called(call, ctx.qname(call.func))
        if function is None:
            return None
        factory = self._factory_of(function, filled)
        device = ctx.keyword(factory, "device") if factory is not None else None
        if device is not None and (param := self.cpu_default_parameter(device.value, factory)) is not None \
                and passes(call, function, param):  # type: ignore[arg-type]
            return None  # the caller gives the device: made there
        return factory

    def _factory_of(self, function: cst.FunctionDef, filled: bool) -> cst.Call | None:
        memo: dict[tuple[int, bool], cst.Call | None] = self.__dict__.setdefault("_helpers", {})
        if (id(function), filled) in memo:
            return memo[id(function), filled]
        if id(function) in self._asking or self._depth.waiting(id(function)):
            return None  # recursion
        return self._depth.call(id(function), lambda: self._helper_factory(function, filled))  # 1,400 helpers returning the next one's result

    def helper_device(self, function: cst.FunctionDef) -> tuple[str, int] | None:
        """For the summary: where ``function`` is a helper every ``return`` of which is a tensor a
        factory made on the host (see ``host_helper``), the parameter that factory's ``device=`` is,
        CPU by default, and its position among the positional arguments a call passes (``("", -1)``:
        none, it always builds on the host); None where it is no such helper."""
        factory = self._factory_of(function, False)
        if factory is None:
            return None
        device = self.ctx.keyword(factory, "device")
        param = self.cpu_default_parameter(device.value, factory) if device is not None else None
        if param is None:
            return "", -1
        positional = _positional(function)
        return param.name.value, next((i for i, p in enumerate(positional) if p is param), -1)

    def _helper_factory(self, function: cst.FunctionDef, filled: bool) -> cst.Call | None:
        ctx = self.ctx
        self._asking.add(id(function))
        try:
            returns = [r for r in ctx.values.returns_of(function) if r.value is not None]
            made = [self.made_on_host(r.value, r, filled=filled) for r in returns]
        finally:
            self._asking.discard(id(function))
        found = made[0] if made and all(m is not None and ctx.qname(m.func) in FACTORIES for m in made) else None
        self.__dict__["_helpers"][id(function), filled] = found
        return found


def _walked(ctx, iterable: cst.BaseExpression, element: int | None) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
    """What a loop's target at ``element`` walks: ``zip(a, b)``'s ``a`` or ``b``, ``enumerate(xs)``'s
    ``xs`` (its position 1), the iterable itself for a plain target; None for a part of each item
    (``for x, y in loader``: what the items hold is not known)."""
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and ctx.qname(iterable.func) is None:
        name = iterable.func.value
        positional = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if name == "zip" and element is not None and element < len(positional) and len(positional) == len(iterable.args):
            return positional[element]
        if name == "enumerate" and element == 1 and positional:
            return positional[0]
    return iterable if element is None else None


def passes(call: cst.Call, function: cst.FunctionDef, param: cst.Param) -> bool:
    """Does ``call`` (of ``function``) pass ``param``, by name, by position or through a splat?"""
    if any(arg.star for arg in call.args):
        return True  # `*args`, `**kwargs`: it may
    if any(arg.keyword is not None and arg.keyword.value == param.name.value for arg in call.args):
        return True
    positional = _positional(function)
    index = next((i for i, p in enumerate(positional) if p is param), None)
    return index is not None and sum(1 for arg in call.args if arg.keyword is None) > index


def _positional(function: cst.FunctionDef) -> list[cst.Param]:
    """The parameters a call's positional arguments fill, in order (a method's ``self`` or ``cls`` left out)."""
    positional = [*function.params.posonly_params, *function.params.params]
    return positional[1:] if positional and positional[0].name.value in ("self", "cls") else positional
