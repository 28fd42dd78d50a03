"""What kind of value an expression holds: tensor, NumPy array, module, loader...

A small, conservative inference per scope. It answers UNKNOWN rather than guess,
and checks decide what UNKNOWN means for them (TL101 flags an unknown receiver
of ``.item()``; TL203 flags only a known NumPy array).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import canonical, dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class Kind(enum.Enum):
    TENSOR = "tensor"
    NUMPY = "numpy"
    MODULE = "module"  # an nn.Module instance: a model or a loss module
    LOADER = "loader"
    OPTIMIZER = "optimizer"
    HOST = "host"  # a plain Python value: number, string, list, dict...
    UNKNOWN = "unknown"


# torch.* callables that do not return tensors.
_TORCH_NON_TENSOR_PREFIXES = (
    "torch.nn.", "torch.optim.", "torch.utils.", "torch.cuda.", "torch.backends.",
    "torch.distributed.", "torch.device", "torch.dtype", "torch.Size", "torch.manual_seed",
    "torch.set_", "torch.get_", "torch.is_", "torch.no_grad", "torch.enable_grad",
    "torch.inference_mode", "torch.autocast", "torch.amp.", "torch.jit.", "torch.compile",
    "torch.save", "torch.load", "torch.profiler.", "torch.hub.", "torch.multiprocessing.",
    "torch.autograd.grad_mode", "torch.accelerator.", "torch.finfo", "torch.iinfo",
    "torch.use_deterministic", "torch.numel", "torch.typename", "torch.library.",
    "torch.onnx.", "torch.fx.", "torch.export.", "torch.testing.", "torch.random.",
)
_TORCH_TENSOR_IN_NN = ("torch.nn.functional.", "torch.nn.utils.clip_grad_norm_", "torch.nn.init.")
# Tensor methods whose result is not a tensor on the device.
_HOST_METHODS = {
    "item", "tolist", "size", "dim", "numel", "element_size", "nelement", "ndimension",
    "data_ptr", "is_contiguous", "__len__", "keys", "items", "values", "get", "stride",
    "get_device", "is_floating_point", "is_complex", "storage_offset", "backward",
}
_NUMPY_METHODS = {"numpy"}
# Methods of nn.Module that return the module itself.
_MODULE_CHAIN = {"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16", "requires_grad_", "share_memory"}
# Calls on a name that say the name is an nn.Module.
MODULE_EVIDENCE = {"parameters", "named_parameters", "eval", "train", "modules", "named_modules", "children", "load_state_dict", "apply", "register_forward_hook", "zero_grad"}
_DATAFRAME_TO_NUMPY = {"values", "to_numpy"}


def _last_segment(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def looks_like_loader(name: str) -> bool:
    """``train_loader``, ``self.val_dataloader``, ``loader``: named as a DataLoader."""
    last = _last_segment(name).lower()
    return "loader" in last


def looks_like_numpy_generator(name: str | None) -> bool:
    """``rng``, ``self.np_rng``, ``random_state``: named as a NumPy ``Generator``/``RandomState``."""
    last = _last_segment(name or "").lower()
    return last in ("rng", "random_state", "prng") or last.endswith("_rng") or last.startswith("rng_")


def looks_like_optimizer(name: str) -> bool:
    last = _last_segment(name).lower()
    return "optim" in last or last in {"opt", "opt_g", "opt_d", "optimizer_g", "optimizer_d"}


_DIFFERENTIATED_RETURNS = frozenset({"training_step", "compute_loss"})


class ValueKinds:
    """Memoised value-kind inference for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._memo: dict[tuple[int, str], Kind] = {}
        self._in_progress: set[tuple[int, str]] = set()
        self._returning: set[int] = set()  # functions whose returns are being inferred
        self._module_names = self._names_used_as_modules()
        self._backward_names = self._names_with_backward()

    # --- evidence from how names are used -----------------------------------------
    def _names_used_as_modules(self) -> set[str]:
        names: set[str] = set()
        for call in self.ctx.method_calls(MODULE_EVIDENCE):
            receiver = dotted(call.func.value)  # type: ignore[attr-defined]
            if receiver is not None and not looks_like_optimizer(receiver):
                names.add(receiver)
        return names

    def _names_with_backward(self) -> set[str]:
        names: set[str] = set()
        for call in self.ctx.method_calls({"backward"}):
            receiver = dotted(call.func.value)  # type: ignore[attr-defined]
            if receiver is not None:
                names.add(receiver)
        return names

    # --- inference ----------------------------------------------------------------
    def kind(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> Kind:
        """The kind of ``expr`` evaluated where ``at`` (default: ``expr``) stands."""
        at = at or expr
        if isinstance(expr, (cst.Name, cst.Attribute)):
            name = dotted(expr)
            if name is not None:
                # `x = x.cpu().numpy()`: the assignment does not reach its own right-hand
                # side, so there `x` has the kind its other bindings give it.
                own = self._own_binding(name, at)
                key = (id(self.ctx.tree.scope_of(at)), name, id(own) if own is not None else 0)
                if key in self._memo:
                    return self._memo[key]
                if key in self._in_progress:
                    return Kind.UNKNOWN
                self._in_progress.add(key)
                try:
                    result = self._name_kind(name, expr, at, own)
                finally:
                    self._in_progress.discard(key)
                self._memo[key] = result
                return result
        return self._expr_kind(expr, at)

    def is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        return self.kind(expr, at) is Kind.TENSOR

    def _own_binding(self, name: str, at: cst.CSTNode):  # type: ignore[no-untyped-def]
        """The binding of ``name`` made by the assignment statement that holds ``at``."""
        statement = self.ctx.tree.statement_of(at)
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        for binding in self.ctx.bindings.lookup(name, at):
            if binding.kind in ("assign", "augassign") and self.ctx.tree.statement_of(binding.node) is statement:
                return binding
        return None

    def _name_kind(self, name: str, expr: cst.BaseExpression, at: cst.CSTNode, own=None) -> Kind:  # type: ignore[no-untyped-def]
        if name in self._backward_names:
            return Kind.TENSOR
        qualified = self.ctx.qname(expr)
        if qualified is not None:
            return Kind.UNKNOWN  # an imported module or function, not a value
        kinds = set()
        for binding in self.ctx.bindings.lookup(name, at):
            if binding is own:
                continue
            kinds.add(self._binding_kind(binding))
        kinds.discard(Kind.UNKNOWN)
        if len(kinds) == 1:
            return kinds.pop()
        if Kind.TENSOR in kinds and kinds <= {Kind.TENSOR, Kind.HOST}:
            return Kind.TENSOR  # e.g. `total = 0` then `total += loss`
        if name in self._module_names:
            return Kind.MODULE
        if not kinds and looks_like_loader(name):
            return Kind.LOADER
        if not kinds and looks_like_optimizer(name):
            return Kind.OPTIMIZER
        if not kinds and isinstance(expr, cst.Attribute):
            return self._expr_kind(expr, at)  # never bound itself: `frame.values`, `x.data`
        return Kind.UNKNOWN

    def _binding_kind(self, binding) -> Kind:  # type: ignore[no-untyped-def]
        value = binding.value
        if binding.kind == "param":
            return Kind.UNKNOWN if value is None else self._expr_kind(value, binding.node)
        if value is None:
            return Kind.UNKNOWN
        if binding.kind in ("for", "comp"):
            if _counts(value, binding.element):
                return Kind.HOST  # `for i in range(n)`, the index of `enumerate(...)`
            return Kind.UNKNOWN  # items of an iterable; devices.py knows loader batches
        if binding.kind == "with":
            return Kind.UNKNOWN
        if binding.element is not None:
            if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                return self.kind(value.elements[binding.element].value, binding.node)
            inner = self.kind(value, binding.node)
            if inner is Kind.TENSOR:
                return Kind.TENSOR
            return self._returned_kind(value, binding.element) if isinstance(value, cst.Call) else Kind.UNKNOWN
        return self.kind(value, binding.node)

    def _expr_kind(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Kind:
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.BaseString, cst.List, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp, cst.Tuple)):
            return Kind.HOST
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, at)
        if isinstance(expr, cst.BinaryOperation):
            left, right = self.kind(expr.left, at), self.kind(expr.right, at)
            if Kind.TENSOR in (left, right):
                return Kind.TENSOR
            if Kind.NUMPY in (left, right):
                return Kind.NUMPY
            return Kind.HOST if left is right is Kind.HOST else Kind.UNKNOWN
        if isinstance(expr, cst.UnaryOperation):
            return self.kind(expr.expression, at)
        if isinstance(expr, cst.Comparison):
            # `out != 0` on a tensor is a bool tensor; `x is None`, `k in d` are Python bools
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return Kind.HOST
            operands = [self.kind(o, at) for o in (expr.left, *(c.comparator for c in expr.comparisons))]
            if Kind.TENSOR in operands:
                return Kind.TENSOR
            return Kind.NUMPY if Kind.NUMPY in operands else Kind.UNKNOWN  # `labels != -1`: a bool array
        if isinstance(expr, cst.Subscript):
            inner = self.kind(expr.value, at)
            return inner if inner in (Kind.TENSOR, Kind.NUMPY) else Kind.UNKNOWN
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in _DATAFRAME_TO_NUMPY and self.ctx.imports_pandas():
                return Kind.NUMPY
            if expr.attr.value in ("data", "grad", "T", "mT", "real", "imag"):
                inner = self.kind(expr.value, at)
                return inner if inner in (Kind.TENSOR, Kind.NUMPY) else Kind.UNKNOWN
        if isinstance(expr, cst.IfExp):
            a, b = self.kind(expr.body, at), self.kind(expr.orelse, at)
            return a if a is b else Kind.UNKNOWN
        return Kind.UNKNOWN

    def _call_kind(self, call: cst.Call, at: cst.CSTNode) -> Kind:
        qualified = canonical(self.ctx.qname(call.func))
        if qualified is not None:
            return self._library_call_kind(qualified)
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = self.kind(func.value, at)
            if receiver is Kind.TENSOR:
                if method in _HOST_METHODS:
                    return Kind.HOST
                return Kind.NUMPY if method in _NUMPY_METHODS else Kind.TENSOR
            if receiver is Kind.MODULE:
                return Kind.MODULE if method in _MODULE_CHAIN else Kind.UNKNOWN
            if receiver is Kind.NUMPY:
                return Kind.HOST if method in ("item", "tolist") else Kind.NUMPY
            if receiver is Kind.UNKNOWN and method in _GENERATOR_METHODS and looks_like_numpy_generator(dotted(func.value)):
                return Kind.NUMPY  # `rng.normal(size=n)` on a `rng` passed in as a parameter
            if method in _NUMPY_METHODS:
                return Kind.NUMPY
            if method == "to_numpy":
                return Kind.NUMPY
        callee = self.kind(func, at)
        if callee is Kind.MODULE:
            return Kind.TENSOR  # model(x), criterion(out, y)
        local_class = self.ctx.local_module_class(func)
        if local_class:
            return Kind.MODULE
        return self._returned_kind(call, None)

    def _returned_kind(self, call: cst.Call, element: int | None) -> Kind:
        """What a call of a module-level function of this file returns, when all its
        ``return``s agree; with ``element``, that position of the returned tuple."""
        function = self._local_function(call.func)
        if function is None or id(function) in self._returning:
            return Kind.UNKNOWN  # not ours, or recursion
        self._returning.add(id(function))
        try:
            kinds = set()
            for ret in self._returns_of(function):
                value = ret.value
                if element is not None:
                    if not isinstance(value, (cst.Tuple, cst.List)) or element >= len(value.elements):
                        return Kind.UNKNOWN
                    value = value.elements[element].value
                kinds.add(self.kind(value, ret) if value is not None else Kind.HOST)
        finally:
            self._returning.discard(id(function))
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    def _local_function(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The module-level ``def`` a plain name calls (defined once, never rebound)."""
        if not hasattr(self, "_functions"):
            defined: dict[str, list[cst.FunctionDef]] = {}
            for statement in self.ctx.module.body:
                if isinstance(statement, cst.FunctionDef):
                    defined.setdefault(statement.name.value, []).append(statement)
            self._functions = {name: defs[0] for name, defs in defined.items() if len(defs) == 1}
        if not isinstance(func, cst.Name) or self.ctx.qname(func) is not None:
            return None
        function = self._functions.get(func.value)
        if function is None or self.ctx.bindings.lookup(func.value, func):
            return None
        return function

    def _returns_of(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own ``return`` statements; none for a generator (it yields)."""
        found = []
        for node in self.ctx.tree.descendants(function):
            if isinstance(node, (cst.Yield, cst.Await)):
                return []
            if isinstance(node, cst.Return) and self.ctx.tree.enclosing_function(node) is function:
                found.append(node)
        return found

    def _library_call_kind(self, qualified: str) -> Kind:
        if qualified.startswith(("numpy.", "pandas.")):
            return Kind.NUMPY if qualified.startswith("numpy.") else Kind.UNKNOWN
        if qualified == "torch.utils.data.DataLoader":
            return Kind.LOADER
        if qualified.startswith("torch.optim.") and qualified.count(".") == 2:
            return Kind.OPTIMIZER
        if qualified.startswith(_TORCH_TENSOR_IN_NN):
            return Kind.TENSOR
        if qualified.startswith("torch.nn.parallel.") or qualified == "torch.nn.DataParallel":
            return Kind.MODULE
        if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.rsplit(".", 1)[-1][:1].isupper():
            return Kind.MODULE
        if qualified == "torch.compile":
            return Kind.MODULE
        if qualified.startswith(("torchvision.models.", "timm.create_model")):
            return Kind.MODULE
        if qualified.startswith("torch.") and not qualified.startswith(_TORCH_NON_TENSOR_PREFIXES):
            return Kind.TENSOR
        return Kind.UNKNOWN

    def is_numpy_array(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0) -> bool:
        """Is ``expr`` a NumPy *array* (Kind.NUMPY, and not one of the NumPy scalars that
        ``np.mean(a)``, ``a.sum()``, ``np.float32(x)``, ``np.random.rand()`` return)?"""
        at = at or expr
        if _depth > 4 or self.kind(expr, at) is not Kind.NUMPY:
            return False
        if isinstance(expr, cst.Call):
            qualified = canonical(self.ctx.qname(expr.func))
            positional = sum(1 for a in expr.args if a.keyword is None and not a.star)
            keywords = {a.keyword.value for a in expr.args if a.keyword is not None}
            if qualified is not None and qualified.startswith("numpy."):
                last = _last_segment(qualified)
                if last in _NUMPY_SCALAR_TYPES:
                    return last in _NUMPY_DTYPES and self._array_argument(expr, at, _depth)  # np.float32(array)
                if last in _NUMPY_REDUCTIONS:
                    return "axis" in keywords or positional > 1 or "keepdims" in keywords
                if qualified.startswith("numpy.random.") and last in _NUMPY_RANDOM_SIZE:
                    return "size" in keywords or positional > _NUMPY_RANDOM_SIZE[last] or any(a.star for a in expr.args)
                return True
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _NUMPY_REDUCTIONS:
                return "axis" in keywords or positional > 0 or "keepdims" in keywords
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _NUMPY_RANDOM_SIZE:
                return "size" in keywords or positional > _NUMPY_RANDOM_SIZE[expr.func.attr.value]
            return True
        if isinstance(expr, cst.Subscript):
            return self.is_numpy_array(expr.value, at, _depth + 1) and not all(self._integer_index(e, at) for e in expr.slice)
        if isinstance(expr, cst.BinaryOperation):
            return any(self.is_numpy_array(side, at, _depth + 1) for side in (expr.left, expr.right))
        if isinstance(expr, (cst.Name, cst.Attribute)) and not (isinstance(expr, cst.Attribute) and expr.attr.value in _DATAFRAME_TO_NUMPY):
            name = dotted(expr)
            if name is None:
                return True
            for binding in self.ctx.bindings.lookup(name, at):
                if binding.value is None or binding.kind not in ("assign", "augassign"):
                    continue
                value = binding.value
                if binding.element is not None:
                    if not isinstance(value, (cst.Tuple, cst.List)) or binding.element >= len(value.elements):
                        continue
                    value = value.elements[binding.element].value
                if self.kind(value, binding.node) is Kind.NUMPY and not self.is_numpy_array(value, binding.node, _depth + 1):
                    return False  # bound to a NumPy scalar somewhere
        return True

    def _array_argument(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``np.float32(x)`` with a single argument that is an array (or a list literal)."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return False
        value = call.args[0].value
        return self.is_sequence_literal(value, at) or self.is_numpy_array(value, at, depth + 1)

    def _integer_index(self, element: cst.SubscriptElement, at: cst.CSTNode) -> bool:
        """``a[0]``, ``a[-1]``, ``a[i]``: an index that may pick a single element; not
        ``a[mask]`` with an array (or a name that says it holds one: ``mask``, ``indices``)."""
        if not _integer_index(element):
            return False
        value = element.slice.value  # type: ignore[attr-defined]
        if not isinstance(value, cst.Name):
            return True
        if _names_index_array(value.value):
            return False
        return self.kind(value, at) not in (Kind.NUMPY, Kind.TENSOR)

    def is_sequence_literal(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """A list/tuple literal or list comprehension (data, not a size), or a name every
        binding of which is one (``xs = [1.0, 2.0]``)."""
        if isinstance(expr, (cst.List, cst.Tuple, cst.ListComp)):
            return True
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return False
        bound = self.ctx.bindings.lookup(name, at or expr)
        return bool(bound) and all(
            b.kind == "assign" and b.element is None and isinstance(b.value, (cst.List, cst.Tuple, cst.ListComp)) for b in bound
        )

    def constructed_by(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> cst.Call | None:
        """The call that built ``expr``'s value: ``expr`` itself, or the one call every
        binding of the name ``expr`` is assigned from (``ds = TensorDataset(x, y)``)."""
        if isinstance(expr, cst.Call):
            return expr
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return None
        bound = self.ctx.bindings.lookup(name, at or expr)
        if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None and isinstance(bound[0].value, cst.Call):
            return bound[0].value
        return None

    # --- losses: values that carry an autograd graph (TL3xx) ---------------------------
    def is_loss_module(self, func: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``criterion`` bound to ``nn.CrossEntropyLoss()`` (or a local ``*Loss`` module), or
        named like one (``criterion``, ``loss_fn``); also ``nn.MSELoss()`` itself."""
        if isinstance(func, cst.Call):
            return _is_loss_class(canonical(self.ctx.qname(func.func)) or dotted(func.func) or "", self.ctx)
        name = dotted(func)
        if name is None or self.ctx.qname(func) is not None:
            return False
        last = _last_segment(name).lower()
        if last in _LOSS_MODULE_NAMES or last.startswith("criterion"):
            return True
        for binding in self.ctx.bindings.lookup(name, at):
            value = binding.value
            if binding.kind == "assign" and isinstance(value, cst.Call) and binding.element is None:
                if _is_loss_class(canonical(self.ctx.qname(value.func)) or dotted(value.func) or "", self.ctx):
                    return True
        return False

    def is_loss_call(self, call: cst.Call, at: cst.CSTNode | None = None) -> bool:
        """``F.cross_entropy(...)``, ``F.mse_loss(...)``, ``criterion(out, y)``."""
        qualified = canonical(self.ctx.qname(call.func))
        if qualified is not None:
            if qualified.startswith("torch.nn.functional."):
                last = _last_segment(qualified)
                return "loss" in last or last in _FUNCTIONAL_LOSSES
            return False
        return self.is_loss_module(call.func, at or call)

    def has_backward(self, name: str, at: cst.CSTNode) -> bool:
        """Is ``name.backward()`` called in the scope (function or module) of ``at``?"""
        if not hasattr(self, "_backward_by_scope"):
            self._backward_by_scope: set[tuple[int, str]] = set()
            for call in self.ctx.method_calls({"backward"}):
                receiver = dotted(call.func.value)  # type: ignore[attr-defined]
                if receiver is not None:
                    self._backward_by_scope.add((id(self.ctx.tree.scope_of(call)), receiver))
        scope = self.ctx.tree.scope_of(at)
        if (id(scope), name) in self._backward_by_scope:
            return True
        # A framework step's returned loss is differentiated by the framework (Lightning's
        # `training_step`, a Trainer's `compute_loss`); a finding there holds only if the
        # project-wide join finds the method is such a hook.
        return isinstance(scope, cst.FunctionDef) and scope.name.value in _DIFFERENTIATED_RETURNS and name in self._returned_names(scope)

    def _returned_names(self, function: cst.FunctionDef) -> set[str]:
        found = set()
        for node in self.ctx.tree.descendants(function):
            if isinstance(node, cst.Return) and node.value is not None:
                values = node.value.elements if isinstance(node.value, cst.Tuple) else [node.value]
                for value in values:
                    if isinstance(value, cst.BaseElement):
                        value = value.value
                    if isinstance(value, cst.Dict):
                        found.update(dotted(e.value) for e in value.elements if isinstance(e, cst.DictElement))
                    else:
                        found.add(dotted(value))
        return {n for n in found if n}

    def carries_graph(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Is ``expr`` a loss that still holds its autograd graph: a loss call, a name bound
        to one (or on which ``.backward()`` is called), arithmetic on one; not after
        ``.item()``/``.detach()``/``.cpu()``/``.data``/``float()``, nor when computed under no_grad."""
        if _depth > 5:
            return False
        if isinstance(expr, (cst.Name, cst.Attribute)):
            if isinstance(expr, cst.Attribute) and expr.attr.value in _GRAPH_DROPPING_ATTRS:
                return False
            name = dotted(expr)
            if name is None or self.ctx.qname(expr) is not None:
                return False
            binding = self.ctx.bindings.reaching(name, at)
            if binding is not None and binding.value is not None and binding.kind in ("assign", "augassign"):
                if self.ctx.grad.runs_without_grad(binding.node):
                    return False
                value = binding.value
                if binding.element is not None:
                    if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                        value = value.elements[binding.element].value
                    else:
                        return self.has_backward(name, at)
                if self.carries_graph(value, binding.node, _depth + 1):
                    return True
                if binding.kind == "assign" and _drops_graph(value):
                    return False
            return self.has_backward(name, at)
        if isinstance(expr, cst.Call):
            if _drops_graph(expr):
                return False
            if self.is_loss_call(expr, at):
                return True
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _GRAPH_KEEPING_METHODS:
                return self.carries_graph(func.value, at, _depth + 1)
            return False
        if isinstance(expr, cst.BinaryOperation):
            return self.carries_graph(expr.left, at, _depth + 1) or self.carries_graph(expr.right, at, _depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self.carries_graph(expr.expression, at, _depth + 1)
        return False


# NumPy scalar types: np.float32(x) is a scalar, not an array.
_NUMPY_SCALAR_TYPES = {
    "float16", "float32", "float64", "float_", "double", "single", "half", "longdouble",
    "int8", "int16", "int32", "int64", "int_", "intc", "uint8", "uint16", "uint32", "uint64",
    "bool_", "complex64", "complex128", "str_", "bytes_", "isscalar", "ndim", "size", "shape",
}
# The scalar-type constructors among them: given an array they return an array.
_NUMPY_DTYPES = _NUMPY_SCALAR_TYPES - {"isscalar", "ndim", "size", "shape"}
# Methods of numpy.random.Generator / RandomState that draw samples (NumPy-only names, or
# names whose Python `random.Random` twin returns a scalar anyway).
_GENERATOR_METHODS = {
    "normal", "integers", "standard_normal", "permutation", "uniform", "random", "choice", "binomial",
    "poisson", "exponential", "beta", "gamma", "lognormal", "laplace", "multivariate_normal",
    "dirichlet", "multinomial", "randn", "rand", "randint", "random_sample", "standard_cauchy",
    "standard_t", "logistic", "geometric",
}
# Reductions that return a scalar unless an axis is given.
_NUMPY_REDUCTIONS = {
    "sum", "mean", "max", "min", "std", "var", "prod", "median", "argmax", "argmin", "average",
    "amax", "amin", "nanmean", "nansum", "nanmax", "nanmin", "nanstd", "count_nonzero", "trace",
    "all", "any", "ptp", "norm", "det", "percentile", "quantile", "nanmedian",
}
# np.random functions that return a scalar without `size` (the value: how many positional
# arguments come before `size`).
_NUMPY_RANDOM_SIZE = {
    "rand": 0, "randn": 0, "random": 0, "random_sample": 0, "uniform": 2, "normal": 2, "randint": 2,
    "choice": 1, "beta": 2, "binomial": 2, "poisson": 1, "exponential": 1, "gamma": 2,
    "integers": 2, "standard_normal": 0, "laplace": 2, "lognormal": 2, "geometric": 1,
}


def _counts(iterable: cst.BaseExpression, element: int | None) -> bool:
    """Does a loop over ``iterable`` bind a Python int: ``range(n)``, or position 0 of
    ``enumerate(...)``?"""
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Name):
        return False
    if iterable.func.value == "range":
        return element is None
    return iterable.func.value == "enumerate" and element == 0


def _names_index_array(name: str) -> bool:
    """``mask``, ``valid_mask``, ``indices``, ``idxs``: a name for an index array."""
    last = name.lower()
    return "mask" in last or last.endswith(("indices", "idxs"))


def _integer_index(element: cst.SubscriptElement) -> bool:
    """``a[0]``, ``a[-1]``, ``a[i]``: an index that may pick a single element."""
    index = element.slice
    if not isinstance(index, cst.Index):
        return False
    value = index.value
    if isinstance(value, cst.UnaryOperation):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Name))


_LOSS_MODULE_NAMES = {"loss_fn", "loss_func", "loss_function", "lossfn", "loss_fcn", "loss_module", "loss_criterion"}
_FUNCTIONAL_LOSSES = {"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
_GRAPH_DROPPING_METHODS = {"item", "tolist", "detach", "detach_", "cpu", "numpy"}
_GRAPH_DROPPING_ATTRS = {"data"}
_GRAPH_KEEPING_METHODS = {"mean", "sum", "clone", "squeeze", "unsqueeze", "view", "reshape", "float", "double", "half", "to", "cuda", "mul", "div", "add", "sub", "abs", "sqrt", "exp", "log"}


def _drops_graph(expr: cst.BaseExpression) -> bool:
    """``x.item()``, ``x.detach()``, ``x.cpu()``, ``float(x)``, ``x.data``: no graph left."""
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _GRAPH_DROPPING_METHODS:
            return True
        if isinstance(func, cst.Name) and func.value in ("float", "int", "round", "str", "bool"):
            return True
    if isinstance(expr, cst.Attribute) and expr.attr.value in _GRAPH_DROPPING_ATTRS:
        return True
    return isinstance(expr, (cst.Integer, cst.Float, cst.BaseString))


def _is_loss_class(name: str, ctx: FileContext) -> bool:
    """``torch.nn.MSELoss`` and friends, or a local nn.Module subclass named ``*Loss``."""
    last = _last_segment(name)
    if name.startswith("torch.nn.") and last.endswith("Loss"):
        return True
    return "." not in name and last.endswith("Loss") and ctx.is_module_class(last)


def _grad_of(expr: cst.CSTNode, tree_descendants) -> set[str]:  # type: ignore[no-untyped-def]
    """Names ``w`` for every ``w.grad`` inside ``expr``."""
    found: set[str] = set()
    for node in (expr, *tree_descendants(expr)):
        if isinstance(node, cst.Attribute) and node.attr.value == "grad":
            owner = node.value
            if isinstance(owner, cst.Attribute) and owner.attr.value == "data":
                owner = owner.value
            name = dotted(owner)
            if name is not None:
                found.add(name)
    return found


def _strip_data(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.value if isinstance(expr, cst.Attribute) and expr.attr.value == "data" else expr


def optimized_tensors(ctx: FileContext) -> set[str]:
    """Names of tensors trained as parameters: passed to a ``torch.optim`` optimizer, or
    updated from their own gradient (``w -= lr * w.grad``, ``w.data.sub_(lr * w.grad)``)."""
    tree = ctx.tree
    found: set[str] = set()
    for call in tree.nodes(cst.Call):
        qualified = canonical(ctx.qname(call.func)) or ""
        if qualified.startswith("torch.optim.") and qualified.count(".") == 2 and call.args:
            for node in tree.descendants(call.args[0].value):
                name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
                if name is not None:
                    found.add(name)
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value in ("sub_", "add_") and call.args:
            owner = dotted(_strip_data(call.func.value))
            if owner is not None and owner in _grad_of(call.args[0].value, tree.descendants):
                found.add(owner)
    for aug in tree.nodes(cst.AugAssign):
        owner = dotted(_strip_data(aug.target))
        if owner is not None and owner in _grad_of(aug.value, tree.descendants):
            found.add(owner)
    return found


def submodule_attributes(ctx: FileContext) -> set[str]:
    """Attribute names a class of this file binds to an nn.Module: ``self.decoder = nn.GRU(...)``."""
    if not hasattr(ctx, "_submodule_attributes"):
        found: set[str] = set()
        for attrs in ctx.bindings.self_attrs.values():
            for name, bindings in attrs.items():
                for binding in bindings:
                    if binding.kind == "assign" and binding.value is not None and binding.element is None:
                        if ctx.values.kind(binding.value, binding.node) is Kind.MODULE:
                            found.add(name.split(".", 1)[1])
                            break
        ctx._submodule_attributes = found  # type: ignore[attr-defined]
    return ctx._submodule_attributes  # type: ignore[attr-defined]
