"""What kind of value an expression holds: tensor, NumPy array, module, loader...

A small, conservative inference per scope. It answers UNKNOWN rather than guess,
and checks decide what UNKNOWN means for them (TL101 flags an unknown receiver
of ``.item()``; TL203 flags only a known NumPy array).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.bounded import Bounded
from torchlint.analysis.arrays import _DATAFRAME_TO_NUMPY, _GENERATOR_METHODS, ArrayFacts
from torchlint.analysis.kinds import Kind
from torchlint.analysis.losses import LossFacts, optimized_tensors  # noqa: F401 - re-exported for checks
from torchlint.analysis.names import canonical, dotted, last_segment as _last_segment
from torchlint.analysis.tree import node_types

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


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
    "torch.serialization.", "torch._dynamo.", "torch.compiler.", "torch.overrides.",
    "torch.futures.", "torch.package.", "torch.mps.", "torch.xpu.", "torch.cpu.", "torch.version",
    "torch.broadcast_shapes", "torch.result_type", "torch.promote_types", "torch.can_cast", "torch.sym_",
    # out-of-tree device backends register their own namespace (torch_npu's `torch.npu`)
    "torch.npu.", "torch.hpu.", "torch.mlu.", "torch.musa.", "torch.mtia.", "torch.xla.",
)
# A predicate of any torch namespace (`torch.npu.is_available()`, `torch.distributed.is_initialized()`)
# answers with a Python bool.
_TORCH_PREDICATE = "is_"
# Objects whose `.backward(loss)` runs the backward pass of the tensor they are given.
# Above this many bindings of one name in a scope, a use's unreaching bindings are only
# its own statement's (the later-in-the-scope refinement walks every binding per use).
_MANY_BINDINGS = 64
_BACKWARD_RUNNER = re.compile(r"accelerator|fabric|engine|trainer|strategy|deepspeed|model|scaler|booster")
_TORCH_TENSOR_IN_NN = ("torch.nn.functional.", "torch.nn.utils.clip_grad_norm_", "torch.nn.init.")
# Tensor methods whose result is not a tensor on the device.
_HOST_METHODS = {
    "item", "tolist", "size", "dim", "numel", "element_size", "nelement", "ndimension",
    "data_ptr", "is_contiguous", "__len__", "keys", "items", "values", "get", "stride",
    "get_device", "is_floating_point", "is_complex", "storage_offset", "backward",
}
_NUMPY_METHODS = {"numpy"}
# Methods of nn.Module that return the module itself.
# Methods that return the object they are called on (a module stays a module).
MODULE_CHAIN = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16", "requires_grad_", "share_memory"})
# Calls on a name that say the name is an nn.Module.
MODULE_EVIDENCE = {"parameters", "named_parameters", "eval", "train", "modules", "named_modules", "children", "load_state_dict", "apply", "register_forward_hook", "zero_grad"}
# Moves: a name that is moved and also called is a module (a tensor is not callable).
_MOVES = frozenset({"to", "cuda", "half", "bfloat16"})
# Class methods that build a model (`AutoModel.from_pretrained(name)`), and the classes
# whose `from_pretrained` builds something else.
PRETRAINED = frozenset({"from_pretrained", "from_config", "load_from_checkpoint"})
_NOT_MODELS = ("Tokenizer", "Processor", "Config", "Scheduler", "Extractor", "Vocab", "Dataset", "Generation")


def builds_a_model(receiver: str | None, method: str) -> bool:
    """``AutoModelForCausalLM.from_pretrained(...)``, ``LitNet.load_from_checkpoint(...)``:
    a model, even when its source is never read (not a tokenizer's or a config's)."""
    last = (receiver or "").rsplit(".", 1)[-1]
    return method in PRETRAINED and last[:1].isupper() and not any(word in last for word in _NOT_MODELS)


# What `_expr_kind` calls a Python value on sight: literals, displays, comprehensions.
_HOST_LITERALS = node_types(cst.Integer, cst.Float, cst.Imaginary, cst.BaseString, cst.List, cst.Dict, cst.Set,
                            cst.ListComp, cst.DictComp, cst.SetComp, cst.Tuple)
_NUMBERS_AND_STRINGS = node_types(cst.Integer, cst.Float, cst.BaseString)


def looks_like_loader(name: str) -> bool:
    """``train_loader``, ``self.val_dataloader``, ``loader``: named as a DataLoader
    (``dataloaders``, a collection of them, is not one)."""
    last = _last_segment(name).lower()
    return "loader" in last and not last.endswith("loaders")


def looks_like_numpy_generator(name: str | None) -> bool:
    """``rng``, ``self.np_rng``, ``random_state``: named as a NumPy ``Generator``/``RandomState``."""
    last = _last_segment(name or "").lower()
    return last in ("rng", "random_state", "prng") or last.endswith("_rng") or last.startswith("rng_")


def looks_like_optimizer(name: str) -> bool:
    last = _last_segment(name).lower()
    return "optim" in last or last in {"opt", "opt_g", "opt_d", "optimizer_g", "optimizer_d"}


class ValueKinds(LossFacts, ArrayFacts):
    """Memoised value-kind inference for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._memo: dict[tuple[int, str], Kind] = {}
        self._by_statement: dict[int, dict[int, frozenset[int]]] = {}  # see _own_statement_bindings
        self._kind_counts: dict[int, tuple[dict[int, Kind], Counter[Kind]]] = {}  # see _kinds_of
        self._in_progress: set[tuple[int, str]] = set()
        self._depth = Bounded()
        self._counting: set[int] = set()  # names whose many bindings' kinds are being counted (see _kinds_of)
        self._expr_memo: dict[tuple[int, int], Kind] = {}  # expressions answered from the top (see Bounded)
        self._returning: set[int] = set()  # functions whose returns are being inferred
        # (id(expr), id(at)) -> (expr, at, the memo key of a name read there, or None): the
        # bindings that do not reach a use are the same each time the use is asked about
        # (and the nodes are kept with the key, so a reused id is never mistaken for them)
        self._name_keys: dict[tuple[int, int], tuple[cst.CSTNode, cst.CSTNode, tuple | None]] = {}  # type: ignore[type-arg]
        self._module_names = self._names_used_as_modules()
        self._backward_names = self._names_with_backward()

    # --- evidence from how names are used -----------------------------------------
    def _names_used_as_modules(self) -> set[str]:
        names: set[str] = set()
        for call in self.ctx.method_calls(MODULE_EVIDENCE):
            receiver = dotted(call.func.value)  # type: ignore[attr-defined]
            if receiver is not None and not looks_like_optimizer(receiver):
                names.add(receiver)
        # `self.policy = self.policy.to(device)` and `self.policy(obs)`: a module kept on self
        moved = {name for call in self.ctx.method_calls(_MOVES) if (name := dotted(call.func.value)) and name.startswith("self.")}  # type: ignore[attr-defined]
        if moved:
            called = {dotted(call.func) for call in self.ctx.tree.nodes(cst.Call) if type(call.func) in (cst.Name, cst.Attribute)}
            names |= {name for name in moved & called if name is not None and name.split(".")[0] not in self.ctx.imports.aliases}  # type: ignore[misc]
        return names

    def _names_with_backward(self) -> set[str]:
        names: set[str] = set()
        for call in self.ctx.method_calls({"backward"}):
            receiver = dotted(call.func.value)  # type: ignore[attr-defined]
            if receiver is None:
                continue
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            if positional and _BACKWARD_RUNNER.search(receiver.rsplit(".", 1)[-1].lower()):
                # `accelerator.backward(loss)`, `fabric.backward(loss)`, DeepSpeed's
                # `model_engine.backward(loss)`: the argument is the tensor, not the receiver
                argument = dotted(positional[0])
                if argument is not None:
                    names.add(argument)
                continue
            names.add(receiver)
        return names

    # --- inference ----------------------------------------------------------------
    def kind(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> Kind:
        """The kind of ``expr`` evaluated where ``at`` (default: ``expr``) stands."""
        at = at or expr
        if type(expr) is cst.Name or type(expr) is cst.Attribute:  # not isinstance: see _expr_kind
            entry = self._name_keys.get((id(expr), id(at)))
            if entry is not None and entry[0] is expr and entry[1] is at:
                key = entry[2]
            else:
                key = self._name_key(expr, at)
                self._name_keys[(id(expr), id(at))] = (expr, at, key)
            if key is not None:
                name, skipped = key[1], key[2]
                if key in self._memo:
                    return self._memo[key]
                if key in self._in_progress or self._depth.waiting(key):
                    return Kind.UNKNOWN
                return self._depth.call(key, lambda: self._named_kind(key, name, expr, at, skipped))
        if self._expr_memo:
            known = self._expr_memo.get((id(expr), id(at)))
            if known is not None:
                return known
        # Nested expressions (`a + a + ...`, a value returned through 1,400 helpers) recurse
        # here: past the depth bound, this one is answered from the top and memoised.
        return self._depth.call((id(expr), id(at)), lambda: self._expr_memo.setdefault((id(expr), id(at)), self._expr_kind(expr, at)) if self._depth.level == 1 else self._expr_kind(expr, at))

    def _name_key(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple | None:  # type: ignore[type-arg]
        """The memo key of the name ``expr`` read at ``at``: its scope, the name, and the ids
        of its bindings that do not reach ``at``; None when ``expr`` is no dotted name."""
        name = dotted(expr)
        if name is None:
            return None
        # Bindings that cannot reach `at`: `x = x.cpu().numpy()` does not reach its
        # own right-hand side, and `beta = torch.tensor(beta)` after `if beta == 0:`
        # does not reach the test (unless a loop around both carries it back).
        skipped = self._unreaching(name, at)
        return (id(self.ctx.tree.scope_of(at)), name, skipped)

    def _named_kind(self, key: tuple, name: str, expr: cst.BaseExpression, at: cst.CSTNode, skipped: frozenset[int]) -> Kind:  # type: ignore[type-arg]
        self._in_progress.add(key)
        try:
            result = self._name_kind(name, expr, at, skipped)
        finally:
            self._in_progress.discard(key)
        self._memo[key] = result
        return result

    def is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        return self.kind(expr, at) is Kind.TENSOR

    def _unreaching(self, name: str, at: cst.CSTNode) -> frozenset[int]:
        """Ids of the bindings of ``name`` (in the scope of ``at``) that do not reach ``at``:
        the assignment statement holding ``at`` itself, and assignments later in the same
        scope that no enclosing loop carries back to ``at``."""
        tree = self.ctx.tree
        bound = self.ctx.bindings.lookup(name, at)
        if len(bound) < 2 or "." in name:
            return frozenset()  # one binding always stands; `self.x` is set in other methods
        statement = tree.statement_of(at)
        if len(bound) > _MANY_BINDINGS:
            # Hundreds of bindings of one name (generated code, a long flat script): only
            # the statement's own binding is left out, found in an index, so each use costs
            # no walk over every binding (that made such files quadratic).
            return self._own_statement_bindings(bound).get(id(statement), frozenset())
        where, scope = tree.index(at), tree.scope_of(at)
        loops: list[cst.CSTNode] | None = None
        skipped = []
        for binding in bound:
            if binding.kind not in ("assign", "augassign"):
                continue
            if isinstance(statement, cst.SimpleStatementLine) and tree.statement_of(binding.node) is statement:
                skipped.append(id(binding))
            elif tree.index(binding.node) > where and tree.scope_of(binding.node) is scope:
                loops = self.ctx.loops.enclosing_loops(at) if loops is None else loops
                if not any(tree.is_inside(binding.node, loop) for loop in loops):
                    skipped.append(id(binding))
        return frozenset(skipped)

    def _name_kind(self, name: str, expr: cst.BaseExpression, at: cst.CSTNode, skipped: frozenset[int] = frozenset()) -> Kind:
        if name in self._backward_names:
            return Kind.TENSOR
        qualified = self.ctx.qname(expr)
        if qualified is not None:
            return Kind.UNKNOWN  # an imported module or function, not a value
        kinds = self._kinds_of(self.ctx.bindings.lookup(name, at), skipped)
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

    def _own_statement_bindings(self, bound: list) -> dict[int, frozenset[int]]:  # type: ignore[type-arg]
        """For many bindings of one name: id(statement) -> ids of its assignments' bindings."""
        key = id(bound)
        if key not in self._by_statement:
            statement_of = self.ctx.tree.statement_of
            index: dict[int, set[int]] = {}
            for binding in bound:
                if binding.kind in ("assign", "augassign"):
                    index.setdefault(id(statement_of(binding.node)), set()).add(id(binding))
            self._by_statement[key] = {k: frozenset(v) for k, v in index.items()}
        return self._by_statement[key]

    def _kinds_of(self, bound: list, skipped: frozenset[int]) -> set[Kind]:  # type: ignore[type-arg]
        """The kinds of the bindings in ``bound`` but not in ``skipped``."""
        if len(bound) <= _MANY_BINDINGS:
            return {self._binding_kind(b) for b in bound if id(b) not in skipped}
        key = id(bound)
        if key not in self._kind_counts:  # each binding's kind once, then counts per use
            if key in self._counting:
                return set()  # `x = x + 1` read while its name's bindings are counted: unknown (else quadratic)
            self._counting.add(key)
            try:
                kinds = {id(b): self._binding_kind(b) for b in bound}
            finally:
                self._counting.discard(key)
            self._kind_counts[key] = (kinds, Counter(kinds.values()))
        kinds, counts = self._kind_counts[key]
        left = counts - Counter(kinds[i] for i in skipped if i in kinds)
        return set(left)

    def _binding_kind(self, binding) -> Kind:  # type: ignore[no-untyped-def]
        value = binding.value
        if binding.kind == "param":
            return Kind.UNKNOWN if value is None else self._expr_kind(value, binding.node)
        if value is None:
            return Kind.UNKNOWN
        if binding.kind in ("for", "comp"):
            if _counts(value, binding.element):
                return Kind.HOST  # `for i in range(n)`, the index of `enumerate(...)`
            if _parameters_of(value, binding.element) and self.kind(value.func.value, binding.node) is Kind.MODULE:  # type: ignore[attr-defined]
                return Kind.TENSOR  # `for p in model.parameters()`, `for n, p in model.named_parameters()`
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
        # Exact types (no class derives from these): libcst's classes are ABCs, and a failing
        # isinstance against the eleven literal kinds cost more than the rest of the call.
        expr_type = type(expr)
        if expr_type in _HOST_LITERALS:
            return Kind.HOST
        if expr_type is cst.Call:
            return self._call_kind(expr, at)  # type: ignore[arg-type]
        if expr_type is cst.Name:
            return Kind.UNKNOWN  # none of the cases below
        if expr_type is cst.BinaryOperation:
            left, right = self.kind(expr.left, at), self.kind(expr.right, at)
            if Kind.TENSOR in (left, right):
                return Kind.TENSOR
            if Kind.NUMPY in (left, right):
                return Kind.NUMPY
            return Kind.HOST if left is right is Kind.HOST else Kind.UNKNOWN
        if expr_type is cst.UnaryOperation:
            return self.kind(expr.expression, at)
        if expr_type is cst.BooleanOperation:  # `warm and step % every == 0`: one of its operands, Python values both
            return Kind.HOST if self.kind(expr.left, at) is self.kind(expr.right, at) is Kind.HOST else Kind.UNKNOWN
        if expr_type is cst.Comparison:
            # `out != 0` on a tensor is a bool tensor; `x is None`, `k in d` are Python bools
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return Kind.HOST
            operands = [self.kind(o, at) for o in (expr.left, *(c.comparator for c in expr.comparisons))]
            if Kind.TENSOR in operands:
                return Kind.TENSOR
            if all(o is Kind.HOST for o in operands):
                return Kind.HOST  # `step % every == 0` of Python ints: a Python bool, no device read
            return Kind.NUMPY if Kind.NUMPY in operands else Kind.UNKNOWN  # `labels != -1`: a bool array
        if expr_type is cst.Subscript:
            if _optimizer_setting(expr):
                return Kind.HOST  # `optimizer.param_groups[0]["lr"]`: a hyperparameter, a Python number
            inner = self.kind(expr.value, at)
            if inner not in (Kind.TENSOR, Kind.NUMPY) and self._holds_loaders(expr.value, at):
                return Kind.LOADER  # `dataloaders["train"]`, `loaders[split]`
            return inner if inner in (Kind.TENSOR, Kind.NUMPY) else Kind.UNKNOWN
        if expr_type is cst.Attribute:
            if expr.attr.value in _DATAFRAME_TO_NUMPY and self.ctx.imports_pandas():
                return Kind.NUMPY
            if expr.attr.value in ("data", "grad", "T", "mT", "real", "imag"):
                inner = self.kind(expr.value, at)
                return inner if inner in (Kind.TENSOR, Kind.NUMPY) else Kind.UNKNOWN
        if expr_type is cst.IfExp:
            a, b = self.kind(expr.body, at), self.kind(expr.orelse, at)
            return a if a is b else Kind.UNKNOWN
        return Kind.UNKNOWN

    def _holds_loaders(self, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``container`` a collection of DataLoaders: named for them (``dataloaders``,
        ``self.loaders``, ``train_loader`` when it is indexed), or bound to a literal whose
        values are loaders (``loaders = {"train": DataLoader(...), ...}``)?"""
        name = dotted(container)
        if name is None:
            return False
        if "loader" in _last_segment(name).lower():
            return True
        bound = self.ctx.bindings.lookup(name, at) if type(container) is cst.Name else []
        values = [b.value for b in bound if b.kind == "assign" and b.element is None]
        if len(values) != 1 or type(values[0]) not in (cst.Dict, cst.List, cst.Tuple):
            return False
        items = [e.value for e in values[0].elements if type(e) in (cst.DictElement, cst.Element)]
        # the loaders built right there (asking each item's kind could recurse through nested literals)
        return bool(items) and all(type(item) is cst.Call and canonical(self.ctx.qname(item.func)) == "torch.utils.data.DataLoader" for item in items)

    def _call_kind(self, call: cst.Call, at: cst.CSTNode) -> Kind:
        qualified = canonical(self.ctx.qname(call.func))
        if qualified is not None:
            return self._library_call_kind(qualified)
        func = call.func
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in ("item", "tolist") and not call.args:
                return Kind.HOST  # a Python number or list, whatever it was read from
            receiver = self.kind(func.value, at)
            if receiver is Kind.TENSOR:
                if method in _HOST_METHODS:
                    return Kind.HOST
                return Kind.NUMPY if method in _NUMPY_METHODS else Kind.TENSOR
            if receiver is Kind.MODULE:
                if method in MODULE_CHAIN:
                    return Kind.MODULE
                # `self.norm(h)`, `self.transformer.ln_f(x)`: a submodule called is a forward
                submodule = self.kind(func, at) is Kind.MODULE or self._module_dict_entry(func.value, method, at)
                return Kind.TENSOR if submodule else Kind.UNKNOWN
            if receiver is Kind.NUMPY:
                return Kind.HOST if method in ("item", "tolist") else Kind.NUMPY
            if receiver is Kind.UNKNOWN and method in _GENERATOR_METHODS and looks_like_numpy_generator(dotted(func.value)):
                return Kind.NUMPY  # `rng.normal(size=n)` on a `rng` passed in as a parameter
            if method in _NUMPY_METHODS:
                return Kind.NUMPY
            if method == "to_numpy":
                return Kind.NUMPY
            if builds_a_model(dotted(func.value), method):
                return Kind.MODULE  # a project class's `from_pretrained`
        if type(func) is cst.Name and func.value == "sum" and call.args and type(call.args[0].value) in (cst.GeneratorExp, cst.ListComp) \
                and not self.ctx.bindings.lookup("sum", func):
            # the builtin adds its items with `+`: tensors give a tensor (`sum(p.grad.norm() for p in ...)`), ints an int
            element = call.args[0].value.elt  # type: ignore[attr-defined]
            added = self.kind(element, element)
            return added if added in (Kind.TENSOR, Kind.HOST) else Kind.UNKNOWN
        callee = self.kind(func, at)
        if callee is Kind.MODULE:
            return Kind.TENSOR  # model(x), criterion(out, y)
        local_class = self.ctx.local_module_class(func)
        if local_class:
            return Kind.MODULE
        return self._returned_kind(call, None)

    def _module_dict_entry(self, container: cst.BaseExpression, key: str, at: cst.CSTNode) -> bool:
        """``self.transformer.ln_f`` with ``self.transformer = nn.ModuleDict(dict(ln_f=nn.LayerNorm(d), ...))``
        (nanoGPT's layout): a module its container holds under that key, so calling it is a forward."""
        built = self.constructed_by(container, at)
        if built is None or canonical(self.ctx.qname(built.func)) != "torch.nn.ModuleDict" or not built.args:
            return False
        mapping = built.args[0].value
        if type(mapping) is cst.Call and dotted(mapping.func) == "dict":
            entries = [(a.keyword.value, a.value) for a in mapping.args if a.keyword is not None]
        elif type(mapping) is cst.Dict:
            entries = [(e.key.evaluated_value, e.value) for e in mapping.elements
                       if type(e) is cst.DictElement and type(e.key) is cst.SimpleString]
        else:
            return False
        return any(name == key and self.kind(value, built) is Kind.MODULE for name, value in entries)

    def _returned_kind(self, call: cst.Call, element: int | None) -> Kind:
        """What a call of a module-level function of this file returns, when all its
        ``return``s agree; with ``element``, that position of the returned tuple."""
        function = self._local_function(call.func)
        if function is None or id(function) in self._returning:
            return Kind.UNKNOWN  # not ours, or recursion
        if element is None and _annotated_python_value(function):
            return Kind.HOST  # `def cutoff(...) -> int:`
        self._returning.add(id(function))
        try:
            kinds = set()
            for ret in self.returns_of(function):
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
        """The ``def`` a plain name calls (one visible where it is called, never rebound)."""
        if not isinstance(func, cst.Name) or self.ctx.qname(func) is not None:
            return None
        function = self.ctx.functions.named(func.value, func)
        if function is None or self.ctx.bindings.lookup(func.value, func):
            return None
        return function

    def python_value(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Known to be a plain Python value: a literal, ``x.item()``, ``float(...)``, or a
        name or subscript the value analysis calls one. Other calls are not inferred
        (what they return may be a tensor, and asking costs more than it saves)."""
        value_type = type(value)  # exact types: libcst's ABCs make a failing isinstance slow
        if value_type in _NUMBERS_AND_STRINGS:
            return True
        if value_type is cst.Call:
            func = value.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute:
                return func.attr.value in ("item", "tolist", "size", "dim", "numel") and (not value.args or func.attr.value == "size")
            return isinstance(func, cst.Name) and func.value in ("float", "int", "bool", "str", "len") and self.ctx.qname(func) is None
        return self.kind(value, at) is Kind.HOST

    def returns_of(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own ``return`` statements; none for a generator (it yields)."""
        return self._returns_by_function.get(id(function), [])

    @cached_property
    def _returns_by_function(self) -> dict[int, list[cst.Return]]:
        """Each function's own returns, from one pass over the file's returns and yields
        (every call of a local function asks for its returns)."""
        tree = self.ctx.tree
        found: dict[int, list[cst.Return]] = {}
        for node in tree.nodes(cst.Return):
            function = tree.enclosing_function(node)
            if function is not None:
                found.setdefault(id(function), []).append(node)
        for kind in (cst.Yield, cst.Await):
            for node in tree.nodes(kind):
                function = tree.enclosing_function(node)
                if function is not None:
                    found[id(function)] = []  # a generator or a coroutine
        return found

    def _library_call_kind(self, qualified: str) -> Kind:
        if qualified.startswith(("numpy.", "pandas.", "scipy.")):
            return Kind.UNKNOWN if qualified.startswith("pandas.") else Kind.NUMPY  # (scipy computes on NumPy arrays)
        if qualified == "torch.utils.data.DataLoader":
            return Kind.LOADER
        if qualified.startswith("torch.optim.") and qualified.count(".") == 2:
            return Kind.OPTIMIZER
        if qualified.startswith(_TORCH_TENSOR_IN_NN):
            return Kind.TENSOR
        if qualified in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer"):
            return Kind.TENSOR  # a tensor, on the device once its module is moved
        if qualified.startswith("torch.nn.parallel.") or qualified == "torch.nn.DataParallel":
            return Kind.MODULE
        if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.rsplit(".", 1)[-1][:1].isupper():
            return Kind.MODULE
        if qualified == "torch.compile" or qualified.startswith("torch.distributed.fsdp.Fully"):
            return Kind.MODULE
        receiver, _, method = qualified.rpartition(".")
        if builds_a_model(receiver, method):
            return Kind.MODULE
        if qualified.startswith(("torchvision.models.", "timm.create_model")):
            return Kind.MODULE
        if qualified.startswith("torch.") and not qualified.startswith(_TORCH_NON_TENSOR_PREFIXES) \
                and not method.startswith(_TORCH_PREDICATE):
            return Kind.TENSOR
        return Kind.UNKNOWN

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

    def constructors(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> list[cst.Call]:
        """Every call that may have built ``expr``'s value: ``expr`` itself, or the call of
        each binding of the name (``ds = A(...)`` in one branch, ``ds = A(...)`` in the
        other). Empty when a binding is anything but a call assigned whole."""
        if isinstance(expr, cst.Call):
            return [expr]
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return []
        bound = self.ctx.bindings.lookup(name, at or expr)
        if not bound or not all(b.kind == "assign" and b.element is None and isinstance(b.value, cst.Call) for b in bound):
            return []
        return [b.value for b in bound]  # type: ignore[misc]


def _annotated_python_value(function: cst.FunctionDef) -> bool:
    """Is the function annotated to return a plain Python number, flag or string?"""
    returns = function.returns
    return returns is not None and isinstance(returns.annotation, cst.Name) and returns.annotation.value in ("int", "float", "bool", "str")


def _optimizer_setting(expr: cst.Subscript) -> bool:
    """``opt.param_groups[i][key]``: one setting of one parameter group."""
    inner = expr.value
    return (isinstance(inner, cst.Subscript) and isinstance(inner.value, cst.Attribute)
            and inner.value.attr.value == "param_groups")


def _parameters_of(iterable: cst.BaseExpression, element: int | None) -> bool:
    """Does a loop over ``iterable`` bind a module's parameter: ``m.parameters()``, or
    position 1 of ``m.named_parameters()``? (The module's kind is the caller's question.)"""
    if type(iterable) is not cst.Call or type(iterable.func) is not cst.Attribute:
        return False
    method = iterable.func.attr.value
    return method == "parameters" and element is None or method == "named_parameters" and element == 1


def _counts(iterable: cst.BaseExpression, element: int | None) -> bool:
    """Does a loop over ``iterable`` bind a Python int: ``range(n)``, or position 0 of
    ``enumerate(...)``?"""
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Name):
        return False
    if iterable.func.value == "range":
        return element is None
    return iterable.func.value == "enumerate" and element == 0


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
