"""What kind of value an expression holds: tensor, NumPy array, module, loader...

A small, conservative inference per scope. It answers UNKNOWN rather than guess,
and checks decide what UNKNOWN means for them (TL101 flags an unknown receiver
of ``.item()``; TL203 flags only a known NumPy array).

``ValueKinds`` is made of parts: ``value_returns`` (what functions return, what built a value),
``losses`` and ``arrays``; ``kind_names`` holds the kinds on sight (library calls, names).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.bounded import Bounded
from torchlint.analysis.arrays import _DATAFRAME_TO_NUMPY, _GENERATOR_METHODS, ArrayFacts
from torchlint.analysis.kind_names import (
    HOST_LITERALS, HOST_METHODS, MODULE_CHAIN, MODULE_EVIDENCE, MOVES, NUMPY_METHODS, ONNX_RUNS, ONNX_SESSIONS, binds_a_count, binds_a_parameter, builds_a_model, library_call_kind,
    looks_like_loader, looks_like_numpy_generator, looks_like_optimizer, optimizer_setting,
)
from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item
from torchlint.analysis.losses import LossFacts
from torchlint.analysis.names import canonical, dotted, last_segment as _last_segment
from torchlint.analysis.value_returns import ValueReturns

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# Objects whose `.backward(loss)` runs the backward pass of the tensor they are given.
# Above this many bindings of one name in a scope, a use's unreaching bindings are only
# its own statement's (the later-in-the-scope refinement walks every binding per use).
_MANY_BINDINGS = 64
_BACKWARD_RUNNER = re.compile(r"accelerator|fabric|engine|trainer|strategy|deepspeed|model|scaler|booster")


class ValueKinds(ValueReturns, LossFacts, ArrayFacts):
    """Memoised value-kind inference for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._memo: dict[tuple[int, str], Kind] = {}
        self._by_statement: dict[int, dict[int, frozenset[int]]] = {}  # see _own_statement_bindings
        self._assignments: dict[int, tuple] = {}  # type: ignore[type-arg]  # see _assignments_of
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
        moved = {name for call in self.ctx.method_calls(MOVES) if (name := dotted(call.func.value)) and name.startswith("self.")}  # type: ignore[attr-defined]
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
        the assignment statement holding ``at`` itself, assignments later in the same
        scope that no enclosing loop carries back to ``at``, and those made only in a mode
        ``at`` never runs in (``Bindings.other_mode``)."""
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
        where, scope = tree.index(at), id(tree.scope_of(at))
        own = id(statement) if isinstance(statement, cst.SimpleStatementLine) else None
        loops: list[cst.CSTNode] | None = None
        skipped = []
        for binding, its_statement, start, its_scope in self._assignments_of(bound):
            if its_statement == own or self.ctx.bindings.other_mode(binding, at):
                skipped.append(id(binding))  # (`if self.training: n = t` never reaches `self.training is False and n`)
            elif start > where and its_scope == scope:
                loops = self.ctx.loops.enclosing_loops(at) if loops is None else loops
                if not any(tree.is_inside(binding.node, loop) for loop in loops):
                    skipped.append(id(binding))
        return frozenset(skipped)

    def _assignments_of(self, bound: list) -> list[tuple]:  # type: ignore[type-arg]
        """The assignments among ``bound``, each with the ids of its statement and scope and its
        position: every use of the name asks of them all, each found once per name and scope."""
        key = id(bound)
        found = self._assignments.get(key)
        if found is None or found[0] is not bound:
            tree = self.ctx.tree
            found = self._assignments[key] = (bound, [(b, id(tree.statement_of(b.node)), tree.index(b.node), id(tree.scope_of(b.node)))
                                                      for b in bound if b.kind in ("assign", "augassign")])
        return found[1]

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

    def _group_parameters(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``group["params"]`` where ``group`` walks an optimizer's ``param_groups`` (a custom optimizer's
        ``step()``, nanoT5's ``AdamWScale``): the tensors it updates, the model's parameters."""
        if type(value) is not cst.Subscript or type(value.value) is not cst.Name or len(value.slice) != 1:
            return False
        index = value.slice[0].slice
        if type(index) is not cst.Index or type(index.value) is not cst.SimpleString or index.value.evaluated_value != "params":
            return False
        group = self.ctx.bindings.reaching(value.value.value, at)
        groups = group.value if group is not None and group.kind == "for" and group.element is None else None
        return type(groups) is cst.Attribute and groups.attr.value == "param_groups"

    def _binding_kind(self, binding) -> Kind:  # type: ignore[no-untyped-def]
        value = binding.value
        if binding.kind == "param":
            return Kind.UNKNOWN if value is None else self._expr_kind(value, binding.node)
        if value is None:
            return Kind.UNKNOWN
        if binding.kind in ("for", "comp"):
            if binds_a_count(value, binding.element):
                return Kind.HOST  # `for i in range(n)`, the index of `enumerate(...)`
            if binds_a_parameter(value, binding.element) and self.kind(value.func.value, binding.node) is Kind.MODULE:  # type: ignore[attr-defined]
                return Kind.TENSOR  # `for p in model.parameters()`, `for n, p in model.named_parameters()`
            if binding.element is None and self._group_parameters(value, binding.node):
                return Kind.TENSOR  # an optimizer's `for p in group["params"]`, `group` of `self.param_groups`
            source = iterated_item(value, binding.element, dict_views=False)
            if source is not None and self.kind(source, binding.node) is Kind.NUMPY:
                return Kind.NUMPY  # `for idx, seq in enumerate(log_probs_idx)` over an array: its rows
            return Kind.UNKNOWN  # items of an iterable; devices.py knows loader batches
        if binding.kind == "with":
            return Kind.UNKNOWN
        if binding.element is not None:
            if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                return self.kind(value.elements[binding.element].value, binding.node)
            inner = self.kind(value, binding.node)
            if inner in (Kind.TENSOR, Kind.NUMPY):
                return inner  # (`enc_out, enc_lens = ort_outs`: the arrays of a list of them, or an array's rows)
            return self._returned_kind(value, binding.element) if isinstance(value, cst.Call) else Kind.UNKNOWN
        return self.kind(value, binding.node)

    def _expr_kind(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Kind:
        # Exact types (no class derives from these): libcst's classes are ABCs, and a failing
        # isinstance against the eleven literal kinds cost more than the rest of the call.
        expr_type = type(expr)
        if expr_type in HOST_LITERALS:
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
            if optimizer_setting(expr):
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
            return library_call_kind(qualified)
        func = call.func
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in ("item", "tolist") and not call.args:
                return Kind.HOST  # a Python number or list, whatever it was read from
            receiver = self.kind(func.value, at)
            if receiver is Kind.TENSOR:
                if method in HOST_METHODS:
                    return Kind.HOST
                return Kind.NUMPY if method in NUMPY_METHODS else Kind.TENSOR
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
            if method in NUMPY_METHODS:
                return Kind.NUMPY
            if method == "to_numpy":
                return Kind.NUMPY
            if method in ONNX_RUNS and self._onnx_session(func.value, at):
                return Kind.NUMPY  # `ort_session.run(None, feeds)`: ONNX Runtime answers with NumPy arrays
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

    def _onnx_session(self, receiver: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``receiver`` an ONNX Runtime session: built by ``onnxruntime.InferenceSession(...)``
        (there, or in every binding of the name or ``self.x``)?"""
        built = self.constructors(receiver, at)
        return bool(built) and all(canonical(self.ctx.qname(call.func)) in ONNX_SESSIONS for call in built)

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
