"""Device reach: what is computed from a device tensor is on the device (a model's output, an
op, a tensor method, arithmetic, ``.to(t)``), and where that tensor is a parameter, what the
callers pass decides (``device_if``; the join's ``Steps.device_params``). Mixed into
:class:`devices.Devices`, whose ``move``, ``device_value``, ``dtype_only_to`` and
``_every_binding`` it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# Tensor methods that change the dtype (or layout) and keep the device: `torch.zeros(3).long().cuda()`.
DTYPE_CONVERSIONS = {"long", "float", "half", "double", "int", "bool", "byte", "char", "short", "bfloat16", "contiguous"}
# Factories that fill a new tensor (on the host unless given `device=`).
FACTORIES = frozenset({
    "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
    "torch.randint", "torch.arange", "torch.eye", "torch.linspace", "torch.logspace", "torch.randperm",
    # Windows for `torch.stft` and filters: built on the host unless given `device=` like any factory.
    "torch.hann_window", "torch.hamming_window", "torch.blackman_window", "torch.bartlett_window", "torch.kaiser_window",
})
# Calls that build a tensor on the host unless given `device=`: the factories (a permutation
# `torch.randperm(n, generator=g)` too), and copies of host data.
HOST_BUILDERS = FACTORIES | {"torch.from_numpy", "torch.as_tensor", "torch.tensor"}
# How deep a placement is followed through names and torch ops (`b = a.ge(0)`, `c = torch.where(b)[0]`, ...).
DEPTH = 6
# Tensor methods whose result is no tensor on the receiver's device: sizes, Python values, a
# module's parameters and state.
_NOT_ON_DEVICE_RESULTS = frozenset({
    "item", "tolist", "cpu", "numpy", "size", "dim", "numel", "data_ptr", "get_device", "stride", "element_size", "nelement",
    "ndimension", "storage_offset", "keys", "items", "values", "get", "parameters", "named_parameters", "buffers",
    "named_buffers", "state_dict", "modules", "named_modules", "children", "backward", "__len__", "nnz", "_nnz",
})

# Members of an object moved whole that are no tensors on the device: its device, dtype, shape and sizes.
_NOT_MEMBER_TENSORS = frozenset({"device", "dtype", "shape", "size", "ndim", "batch_size", "T", "mT", "training", "name", "keys"})
_NOT_TENSOR_PREFIXES = ("num_", "n_", "is_", "has_", "_")


def _keeps_device(method: str) -> bool:
    """``a.transpose(1, 2)``, ``a.sum()``: a tensor method whose result stays where ``a`` is."""
    return method not in _NOT_ON_DEVICE_RESULTS and not method.startswith(("get_", "is_", "has_", "num_", "to_", "_"))


class DeviceReach:
    """Mixed into :class:`devices.Devices`: which values are known to live on the device."""

    ctx: FileContext
    # While `device_if` asks: the parameters of `_condition_scope` taken for device tensors, noted as used
    _conditions: set[str] | None = None
    _condition_scope: cst.FunctionDef | None = None

    def on_device(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Is ``expr`` known to live on an accelerator: ``x.to(device)``, ``y.cuda().float()``,
        ``torch.zeros(n, device="cuda")``, what is computed from such a value (``a * 2``,
        ``a.transpose(1, 2)``, ``torch.exp(a)``, ``torch.zeros_like(a)``, ``b.to(a)``,
        ``b.type_as(a)``, a model's output given it), or a name every binding of which is such a value?"""
        ctx = self.ctx
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Call and ctx.qname(expr.func) is not None:
                break
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                moved = self.move(expr)
                if moved is not None:
                    return moved == "device" and self._target_on_device(expr, at, _depth)
                method = expr.func.attr.value
                if method in ("to", "type_as") and not self.dtype_only_to(expr):
                    # `.to(src)`, `.type_as(x)`: to that tensor's device
                    other = next((a.value for a in expr.args if a.keyword is None and not a.star), None)
                    return other is not None and _depth <= DEPTH and self.on_device(other, at, _depth + 1)
                if _depth <= DEPTH and self._model_called(expr, at):
                    return self._any_input_on_device(expr, at, _depth)  # `self.enc_q(y, y_lengths)`: the model's output
                if method not in DTYPE_CONVERSIONS and not self.dtype_only_to(expr) and not _keeps_device(method):
                    return False
                expr = expr.func.value  # `a.transpose(1, 2)`, `a.to(dtype=torch.long)`: where `a` is
            else:
                break
        if type(expr) is cst.Call:
            device = ctx.keyword(expr, "device")
            qualified = ctx.qname(expr.func)
            if type(expr.func) is cst.Name and qualified is None and _depth <= DEPTH:
                # a helper of this file whose every return is on the device (`get_sigmas(n, device=device)`)
                helper = ctx.functions.called(expr, None)
                if helper is None and self._model_called(expr, at):
                    return self._any_input_on_device(expr, at, _depth)  # `net_g(x, x_lengths)`: the model's output
                returns = [r for r in ctx.values.returns_of(helper) if r.value is not None] if helper is not None else []
                return bool(returns) and all(self.on_device(r.value, r, _depth + 1) for r in returns)  # type: ignore[arg-type]
            if not (qualified or "").startswith("torch."):
                return False
            if device is not None:
                return self.device_value(device.value, expr) == "device" and self._named_device_on_device(device.value, at, _depth)
            # no `device=`: an op computes where its tensors are (`torch.exp(a)`, `torch.zeros_like(a)`);
            # a factory builds on the host (`torch.zeros(a.size(0))`)
            if qualified in HOST_BUILDERS or _depth > DEPTH or ctx.values.kind(expr, at) is not Kind.TENSOR:
                return False
            return self._any_input_on_device(expr, at, _depth)
        if type(expr) is cst.BinaryOperation and _depth <= DEPTH:
            # `a * 2`, `torch.rand(b).to(x.device) * n`: a device operand makes a device result
            return any(not is_number(side) and self.on_device(side, at, _depth + 1) for side in operands(expr))
        if type(expr) is cst.UnaryOperation and _depth <= DEPTH:
            return self.on_device(expr.expression, at, _depth + 1)
        return self._moved_by_its_class(expr, at) or self._every_binding(expr, at, self.on_device, _depth, whole_value_of_tuples=True)

    def _moved_by_its_class(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``self.rewards`` outside its class's constructor, where the constructor builds it (on the host)
        and a method of the class moves it to the device it is given (``def to(self, device):
        self.rewards = self.rewards.to(device)``, a2c's RolloutStorage, which main.py calls with the run's
        device): the buffer the class's methods read lives where that move put it."""
        ctx = self.ctx
        if type(expr) is not cst.Attribute or type(expr.value) is not cst.Name or expr.value.value != "self":
            return False
        function = ctx.tree.enclosing_function(at)
        if function is None or function.name.value == "__init__":
            return False  # the constructor reads what it built, before any move
        name = dotted(expr)
        moved = False
        for binding in ctx.bindings.lookup(name, at):  # type: ignore[arg-type]
            owner = ctx.tree.enclosing_function(binding.node)
            if binding.kind != "assign" or binding.value is None or binding.element is not None or owner is None:
                return False  # bound some other way: what it holds is not the class's one buffer
            if owner.name.value == "__init__":
                continue  # the buffer as first built, before the move
            value = binding.value
            if type(value) is not cst.Call or type(value.func) is not cst.Attribute or dotted(value.func.value) != name \
                    or self.move(value) != "device":
                return False  # rebound to something else, or moved back to the host (`self.x = self.x.cpu()`)
            moved = True
        return moved

    def moved_member(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``data.edge_index`` of a graph or batch moved whole (``data = data.to(device)``): its tensors
        went with it. Not a count, a flag, a size or the device itself (``data.num_nodes``,
        ``batch.device``), nor an attribute this file binds to something else."""
        if type(expr) is not cst.Attribute or type(expr.value) is not cst.Name:
            return False
        attr = expr.attr.value
        if attr in _NOT_MEMBER_TENSORS or attr.startswith(_NOT_TENSOR_PREFIXES) or attr.endswith(("_size", "_len", "_count")):
            return False  # (Python values an object keeps beside its tensors)
        if self.ctx.bindings.lookup(f"{expr.value.value}.{attr}", at):
            return False  # bound here: what it holds is whatever was bound, not the moved member
        return self.on_device(expr.value, at)

    def device_if(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, ...] | None:
        """Where ``expr`` lives, given what the function around ``at`` is passed: () on the
        device as it is, the parameters (all of them) that put it there when each is a device
        tensor (``torch.rand(b).to(device=x.device)``, ``self.enc_q(y)`` in ``forward(self, y)``:
        the join asks the callers, ``Steps.device_params``), None when neither is known."""
        function = self.ctx.tree.enclosing_function(at)
        if function is None or self._conditions is not None:
            return () if self.on_device(expr, at) else None
        self._conditions, self._condition_scope = set(), function
        try:
            found = self.on_device(expr, at)
            noted = self._conditions
        finally:
            self._conditions, self._condition_scope = None, None
        return tuple(sorted(noted)) if found else None

    def returns_device(self, function: cst.FunctionDef) -> tuple[cst.Call, ...] | None:
        """Does every ``return`` of ``function`` (a few, at least one, no ``yield``) give a device
        tensor: one known on the device, a module's output, or what a call of an object's attribute
        gives, where the join finds it runs a module's ``forward`` (whisper's ``PyTorchInference.logits``,
        ``return self.model.decoder(tokens, audio_features, kv_cache=self.kv_cache)``): those calls,
        for the join (``FileSummary.device_results``); None where some return may be a host value."""
        tree = self.ctx.tree
        if tree.holds(function, cst.Yield) or tree.holds(function, cst.Await):
            return None  # a generator's or a coroutine's result is no tensor (a nested function's too)
        returns = self.ctx.values.returns_of(function)
        if len(returns) > 4 or any(r.value is None for r in returns):
            return None  # returns nothing on some path, or too many paths to follow
        modules: list[cst.Call] = []
        for r in returns:
            value = r.value
            if type(value) is cst.Call and self._model_called(value, r):
                continue  # a module's output is where its weights are, whatever it is given: the device on a GPU run
            if type(value) is cst.Call and type(value.func) is cst.Attribute and self.ctx.qname(value.func) is None \
                    and dotted(value.func) is not None and dotted(value.func).startswith("self."):
                modules.append(value)  # `self.model.decoder(...)`: a module's output where the join finds one there
                continue
            if not self.on_device(value, r):  # type: ignore[arg-type]
                return None
        return tuple(modules) if returns else None

    def result_elsewhere(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The call whose result ``expr`` is, or a slice of (``logits`` after ``logits =
        self.inference.logits(tokens, features)`` and ``logits = logits[:, -1]``), where that call runs
        a function this file cannot read (``result_of_elsewhere``): the join tells whether it returns
        a device tensor (``CallSite.results``)."""
        bindings, tree = self.ctx.bindings, self.ctx.tree
        for _ in range(DEPTH):
            while type(expr) is cst.Subscript:
                expr = expr.value  # a slice of a tensor is where the tensor is
            if type(expr) is not cst.Name:
                return None
            call = self.result_of_elsewhere(expr, at)  # type: ignore[attr-defined]
            if call is not None:
                return call
            bound = bindings.latest_before(bindings.lookup(expr.value, at), at, lambda b: not tree.is_inside(at, b.node))
            if bound is None or bound.kind != "assign" or bound.element is not None or type(bound.value) is not cst.Subscript:
                return None  # bound to anything but a slice of another value: not followed
            expr, at = bound.value, bound.value
        return None

    def _target_on_device(self, move: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """A move to the device: ``.to(x.device)`` is where ``x`` is (asked while
        ``device_if`` asks; else taken for the device, as the move's author meant)."""
        target = self.ctx.keyword(move, "device")
        if target is None:
            target = next((a for a in move.args if a.keyword is None and not a.star), None)
        return target is None or self._named_device_on_device(target.value, at, depth)

    def _named_device_on_device(self, device: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """``device=x.device`` names ``x``'s device: where ``x`` is one of the asked function's
        parameters, the answer waits for what its callers pass (``device_if``)."""
        if self._conditions is None or type(device) is not cst.Attribute or device.attr.value != "device" or type(device.value) is not cst.Name \
                or device.value.value in ("self", "cls"):
            return True  # (`self.device`: the module's device, where its weights are)
        binding = self.ctx.bindings.reaching(device.value.value, at)
        if binding is None or binding.kind != "param" or self.ctx.tree.enclosing_function(binding.node) is not self._condition_scope:
            return True  # a local tensor's device, or a global's: taken for the device, as before
        return depth <= DEPTH and self.on_device(device.value, at, depth + 1)

    def _model_called(self, call: cst.Call, at: cst.CSTNode) -> bool:
        """``model(x)``, ``self.enc_q(y)``: a call of an ``nn.Module`` (a tensor comes back)."""
        return self.ctx.values.kind(call.func, at) is Kind.MODULE

    def _any_input_on_device(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """Is a tensor given to ``call`` (a model, a torch op) on the device: its output is too."""
        for arg in call.args:
            if arg.star or arg.keyword is not None and arg.keyword.value in ("dtype", "out"):
                continue
            value = arg.value
            items = [e.value for e in value.elements if type(e) is not cst.StarredElement] if type(value) in (cst.List, cst.Tuple) else [value]
            if any(not is_number(item) and self.on_device(item, at, depth + 1) for item in items):
                return True
        return False


def is_number(expr: cst.BaseExpression) -> bool:
    """A number, a string or a constant (``verbose=False``): a Python value on sight."""
    if type(expr) is cst.UnaryOperation:
        expr = expr.expression
    return type(expr) in (cst.Integer, cst.Float, cst.SimpleString) or type(expr) is cst.Name and expr.value in ("True", "False", "None")


def operands(expr: cst.BinaryOperation) -> list[cst.BaseExpression]:
    """The operands of a chain of binary operations (``a + b * c``: ``a``, ``b``, ``c``),
    left to right, without recursion: ``a + a + ...`` may nest thousands deep."""
    found: list[cst.BaseExpression] = []
    stack: list[cst.BaseExpression] = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.BinaryOperation:
            stack.extend((node.right, node.left))  # type: ignore[attr-defined]
        else:
            found.append(node)
    return found
