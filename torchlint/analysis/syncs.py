"""Hidden syncs: where Python needs a device tensor's value, or its size, without a call
that says so. ``if t:``, ``all(done)``, ``int(t)``, ``min(decay, t)``, ``items[t]`` read the
value; ``x[mask]``, ``nonzero()`` and ``unique()`` make a tensor whose size only the device
knows. Each one waits for every kernel queued before it, like ``.item()``.

A value counts as a device tensor when the value analysis calls it a tensor (or the code
uses it as one: ``x.unsqueeze(0)`` in the same function) and the device analysis does not
place it on the host (a DataLoader batch not moved yet, ``torch.arange(n)``, ``.cpu()``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.impact import Where
from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import node_types

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchlint.analysis.context import FileContext

# Methods only a tensor has (NumPy arrays and Python sequences have none of them): a name
# they are called on is a tensor, whatever it was bound to.
TENSOR_ONLY_METHODS = frozenset({
    "unsqueeze", "view", "permute", "contiguous", "detach", "masked_fill", "masked_fill_", "new_zeros",
    "new_ones", "new_full", "new_empty", "new_tensor", "type_as", "index_select", "unbind", "expand",
    "expand_as", "repeat_interleave", "softmax", "log_softmax", "narrow", "size", "dim", "masked_select",
    "nonzero", "long", "bool", "sigmoid", "bmm", "numel",
})
# Tensor methods whose result is not a tensor on the device.
# (Counts too: `Tensor._nnz()`, torch_sparse's `SparseTensor.nnz()`, `sparse_dim()` are Python ints.)
_NOT_TENSOR_RESULTS = frozenset({"item", "tolist", "cpu", "numpy", "size", "dim", "numel", "data_ptr", "get_device",
                                 "is_floating_point", "is_contiguous", "element_size", "nelement", "stride", "keys", "items", "values", "get",
                                 "nnz", "_nnz", "sparse_dim", "dense_dim"})


def mask_name(name: str) -> bool:
    """``mask``, ``train_mask``, ``valid_mask``: an attribute named for a boolean mask."""
    return name == "mask" or name.endswith("_mask")


# Methods and functions whose result is a boolean tensor.
_BOOL_METHODS = frozenset({"bool", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_not",
                           "logical_and", "logical_or", "logical_xor", "isin", "isclose", "__eq__", "__ne__"})
_BOOL_FUNCTIONS = frozenset(f"torch.{name}" for name in (*_BOOL_METHODS, "isneginf", "isposinf", "greater", "less", "bitwise_not"))
# Methods (reductions mostly) that Python lists, dicts and numbers do not have: called on something
# else than a Python value, the result is a tensor (or an array, which dynamo traces as one).
_ARRAY_METHODS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "any", "all", "norm", "std", "var", "prod",
                            "count_nonzero", "argmax", "argmin", "abs", "sin", "cos", "exp", "log", "sqrt", "tanh",
                            "sigmoid", "relu", "round", "clamp", "clip", "floor", "ceil", "pow", "square", "flatten",
                            "reshape", "matmul", "squeeze", "cumsum", "topk", "argsort", "float", "half", "double"})
# Builtins that take a truth value of each element of what they are given.
TRUTH_BUILTINS = frozenset({"all", "any"})


# Ops whose result has as many elements as the input has non-zeros, distinct values or a
# largest value: the host must learn the size from the device (TL106), dynamo cannot trace it (TL504).
SIZED_BY_VALUES = frozenset({"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount",
                             "masked_select_nnz"})  # (torch_sparse: keeps the entries a mask selects)


# Library functions that read a device tensor's values into Python inside them: the qualified
# name -> (the parameter that must be a device tensor: its position and name; a keyword that,
# given, spares the read; what it reads). flash_attn's `unpad_input` runs `nonzero` and
# `seqlens.max().item()` on the mask (and transformers' `_get_unpad_data`, its copy); `one_hot`
# without `num_classes` reads the largest class; `equal`/`allclose` return a Python bool;
# `pack_padded_sequence` copies its lengths to the host.
LIBRARY_READS: dict[str, tuple[int, str, str | None, str]] = {
    "flash_attn.bert_padding.unpad_input": (1, "attention_mask", None, "`nonzero` and `.max().item()` of the mask"),
    "flash_attn.bert_padding.unpad_input_for_concatenated_sequences": (1, "attention_mask_in_length", None, "`nonzero` and `.max().item()` of the mask"),
    "transformers.modeling_flash_attention_utils._get_unpad_data": (0, "attention_mask", None, "`nonzero` and `.max().item()` of the mask"),
    "torch.nn.functional.one_hot": (0, "tensor", "num_classes", "the largest class (`max().item()`)"),
    "torch.equal": (0, "input", None, "a Python bool"),
    "torch.allclose": (0, "input", None, "a Python bool"),
    "torch.nn.utils.rnn.pack_padded_sequence": (1, "lengths", None, "the lengths, copied to the host"),
}


def library_read(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, str] | None:
    """``unpad_input(q, attention_mask)``: a library call that reads a tensor's values into
    Python (:data:`LIBRARY_READS`), with the argument read and the words for what it reads;
    None for any other call, or where the keyword that spares the read is given
    (``F.one_hot(y, num_classes=10)``) or the argument is not there."""
    qualified = ctx.qname(call.func)
    entry = LIBRARY_READS.get(qualified or "")
    if entry is None:
        return None
    position, keyword, spared_by, words = entry
    if spared_by is not None and (ctx.keyword(call, spared_by) is not None or ctx.has_star_kwargs(call)):
        return None  # `num_classes=` given (an explicit -1 is rare, taken as given)
    arg = ctx.keyword(call, keyword) or ctx.argument(call, position)
    if spared_by is not None and arg is not None and ctx.argument(call, position + 1) is not None:
        return None  # `one_hot(y, 10)`: the spared keyword given by position
    return (arg.value, words) if arg is not None and not arg.star else None


def torch_op(ctx: FileContext, call: cst.Call) -> tuple[str | None, cst.BaseExpression | None]:
    """``torch.nonzero(x)`` or ``x.nonzero()``: (op name, the tensor it works on); (None, None)
    for anything but a ``torch.<op>`` function or a method."""
    qualified = ctx.qname(call.func)
    if qualified is not None:
        op = qualified[len("torch."):] if qualified.startswith("torch.") and qualified.count(".") == 1 else None
        return op, call.args[0].value if call.args and not call.args[0].star else None
    if type(call.func) is cst.Attribute:
        return call.func.attr.value, call.func.value
    return None, None


def plainly_python(expr: cst.BaseExpression) -> bool:
    """Is ``expr`` a Python value on sight (a literal, ``-1``, ``x.shape[0]``, ``x.size(1)``,
    ``len(xs)``)? A cheap test that spares the analysis most sizes and indexes."""
    expr_type = type(expr)
    if expr_type is cst.UnaryOperation:
        expr, expr_type = expr.expression, type(expr.expression)
    if expr_type in _LITERALS:
        return True
    if expr_type is cst.Subscript:
        expr, expr_type = expr.value, type(expr.value)
    if expr_type is cst.Attribute:
        return expr.attr.value in ("shape", "ndim", "dtype", "device")
    if expr_type is cst.Call:
        func = expr.func
        return type(func) is cst.Attribute and func.attr.value in ("size", "dim", "numel", "item") or type(func) is cst.Name and func.value in ("len", "int", "float")
    return False


_SIMPLE_OR_COMPOUND = node_types(cst.SimpleStatementLine, cst.BaseCompoundStatement)
# Places inside a statement where code runs on its own terms (a branch, once per item, later).
_OWN_PLACES = node_types(cst.IfExp, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.BooleanOperation)
_LITERALS = frozenset({cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString, cst.Imaginary})


class HiddenSyncs:
    """Facts about device tensors read by Python, for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._judging = False  # an outermost tensorish question is being answered
        self._tensorish_memo: dict[tuple[int, int], tuple[cst.CSTNode, cst.CSTNode, bool]] = {}
        self._assumed: frozenset[str] = frozenset()  # parameters taken for device tensors (`device_parameters`)

    def in_step(self, node: cst.CSTNode) -> bool:
        """May ``node`` run every step on device tensors: in a hot loop (or a function or loop
        the project-wide join may find per-step), not in a rare branch (``step % 100 == 0``),
        not in a file whose tensors never leave the host?"""
        # The answer is the same for every node of a simple statement, unless a conditional
        # expression, a comprehension or a lambda sits between: remembered per statement.
        parents = self.ctx.tree.parents
        current = parents.get(id(node))
        while current is not None and type(current) not in _SIMPLE_OR_COMPOUND:
            if type(current) in _OWN_PLACES:
                return self._in_step(node)
            current = parents.get(id(current))
        if type(current) is not cst.SimpleStatementLine:
            return self._in_step(node)
        memo: dict[int, bool] = self.__dict__.setdefault("_in_step_memo", {})
        known = memo.get(id(current))
        if known is None:
            known = memo[id(current)] = self._in_step(node)
        return known

    def _in_step(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        place = ctx.loops.local_hot_loop(node)
        if place is not None:
            if ctx.devices.host_only():
                return False  # a file whose tensors never leave the host
        else:  # the join decides, device included (`host_only(node)` is False there)
            place = ctx.tree.enclosing_function(node) or ctx.loops.statement_loop(node)
            if place is None:
                return False
        return not ctx.guards.rare(node, stop=place)

    @cached_property
    def _tensor_names(self) -> dict[int, set[str]]:
        """Scope (function or module) -> names a tensor-only method is called on there;
        ``self.x`` names are kept per class (key: the class's id)."""
        found: dict[int, set[str]] = {}
        tree = self.ctx.tree
        for call in self.ctx.method_calls(TENSOR_ONLY_METHODS):
            receiver = call.func.value  # type: ignore[attr-defined]
            while type(receiver) is cst.Subscript:
                receiver = receiver.value
            name = dotted(receiver)
            if name is None or name.count(".") > 1 or "." in name and not name.startswith("self."):
                continue
            owner = tree.enclosing_class(call) if name.startswith("self.") else tree.scope_of(call)
            if owner is not None:
                found.setdefault(id(owner), set()).add(name)
        for call in self.ctx.method_calls("register_buffer"):  # `self.register_buffer("step", t)`: `self.step`
            first = call.args[0].value if call.args else None
            cls = tree.enclosing_class(call)
            if type(first) is cst.SimpleString and cls is not None and dotted(call.func.value) == "self":  # type: ignore[attr-defined]
                found.setdefault(id(cls), set()).add("self." + first.value.strip("\"'"))
        return found

    def used_as_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``expr`` (a name, ``self.x``, or an item of one: ``lengths[i]``) used as a
        tensor in its function (its class for ``self.x``)? Shapes and dtypes
        (``x.shape[0]``) are not the tensor."""
        while type(expr) is cst.Subscript:
            expr = expr.value
        name = dotted(expr)
        if name is None or name.count(".") > 1 or "." in name and not name.startswith("self."):
            return False
        owner = self.ctx.tree.enclosing_class(at) if name.startswith("self.") else self.ctx.tree.scope_of(at)
        return owner is not None and name in self._tensor_names.get(id(owner), ())

    def device_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """May ``expr`` be a tensor on the device where ``at`` stands? A tensor (see
        :meth:`tensorish`) that the device analysis does not place on the host."""
        if not self.tensorish(expr, at):
            return False
        if type(expr) is cst.BinaryOperation:  # `i + 1` on a host index: the tensor operands decide
            return any(self.device_tensor(o, at) for o in (expr.left, expr.right) if not plainly_python(o))
        if type(expr) is cst.UnaryOperation:
            return self.device_tensor(expr.expression, at)
        devices = self.ctx.devices
        return not (devices.is_host_batch(expr, at) or devices.loader_value(expr, at) or devices.moved_to_host(expr, at))

    def tensorish(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """:meth:`_tensorish`; an outermost question's answer is remembered per (expr, at): the
        checks ask it of the same reads again (a test, its operands, the arguments of a call),
        and a third of the questions are repeats."""
        if depth or self._judging or self._assumed:  # inside an outermost question (or an assumption): answered afresh
            return self._tensorish(expr, at, depth)
        key = (id(expr), id(at))
        known = self._tensorish_memo.get(key)
        if known is not None and known[0] is expr and known[1] is at:  # the nodes kept: a reused id is no match
            return known[2]
        self._judging = True
        try:
            answer = self._tensorish(expr, at, 0)
        finally:
            self._judging = False
        self._tensorish_memo[key] = (expr, at, answer)
        return answer

    def _tensorish(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is ``expr`` a tensor: by the value analysis, by use (``x.unsqueeze(0)`` in the same
        function, a registered buffer), moved to the device (``y = y.cuda()``), or computed
        from one by arithmetic, indexing or a tensor method (``y.max()``, ``1 + self.step``)?
        A plain name is judged by the binding that reaches it (``for start in range(...)``
        after ``start = torch.clip(...)`` is a number)."""
        ctx = self.ctx
        expr_type = type(expr)
        if depth > 6:
            return False
        if expr_type is cst.Name:
            return self._name_tensorish(expr, at, depth)
        # Operators: their operands decide (`1 + self.step`, `start + size` after `for start in range(...)`).
        if expr_type is cst.BinaryOperation:
            return self.tensorish(expr.left, at, depth + 1) or self.tensorish(expr.right, at, depth + 1)
        if expr_type is cst.UnaryOperation:
            return self.tensorish(expr.expression, at, depth + 1)
        if expr_type is cst.IfExp:  # `self.model.alphas if original else self.ddim_alphas`: either may be the value
            return self.tensorish(expr.body, at, depth + 1) or self.tensorish(expr.orelse, at, depth + 1)
        if expr_type is cst.Subscript:
            if any(isinstance(e.slice, cst.Index) and type(e.slice.value) in (cst.SimpleString, cst.FormattedString) for e in expr.slice):
                # `data["num_nodes"]`: an entry of a mapping (a graph, a batch dict), a tensor
                # only where this function stores one under that key (`hyp["score"] = s + top[0, j]`)
                key = _string_key(expr)
                return key is not None and self._entry_tensorish(key, at, depth)
            if self.tensorish(expr.value, at, depth + 1):
                return True
            # `scores[0]` of a list of device scalars (`scores = [model(x).max() for x in xs]`)
            return type(expr.value) is cst.Name and _one_index(expr) and self.holds_device_tensors(expr.value, at)
        if expr_type is cst.Comparison:  # `x > 0`: a bool tensor when an operand is a tensor
            return self.bool_mask(expr, at, depth + 1)
        if expr_type is cst.Call and type(expr.func) is cst.Name and ctx.qname(expr.func) is None and ctx.functions.defines(expr.func.value):
            helper = ctx.functions.called(expr, None)  # what a helper of this file returns: each of its returns
            returns = [r.value for r in ctx.values.returns_of(helper) if r.value is not None] if helper is not None else []
            return bool(returns) and all(self.tensorish(value, value, depth + 2) for value in returns)
        if expr_type is cst.Call and "._" in (ctx.qname(expr.func) or ""):
            return False  # `torch._C._len_dispatch_stack()`: a private API's result is no known tensor
        kind = ctx.values.kind(expr, at)
        if kind is Kind.HOST and expr_type is cst.Attribute:
            return self.used_as_tensor(expr, at)  # `self.step += 1` on a registered buffer
        if kind is not Kind.UNKNOWN:
            return kind is Kind.TENSOR
        if expr_type is cst.Call:
            func = expr.func
            if type(func) is not cst.Attribute or ctx.qname(func) is not None or func.attr.value in _NOT_TENSOR_RESULTS:
                return False
            if func.attr.value.startswith(("get_", "is_", "has_", "num_", "to_")):
                return False  # `edge_index.get_sparse_size()`: a subclass's accessor, maybe a Python value
            return self.tensorish(func.value, at, depth + 1)
        if expr_type is cst.Attribute:
            return self.used_as_tensor(expr, at) or ctx.devices.on_device(expr, at) or self._bound_tensorish(expr, at, depth)
        return False

    def _name_tensorish(self, name: cst.Name, at: cst.CSTNode, depth: int) -> bool:
        ctx = self.ctx
        binding = ctx.bindings.reaching(name.value, at)
        if binding is not None and self._host_binding(binding) and self._moved_off_device(name.value, at):
            # `logits = logits.cpu().numpy()`, then `logits[order]`: a NumPy array here, whatever
            # the name held before (its `.detach()` there makes it no tensor here)
            return False
        # A comprehension's variable is what its iterable holds: a use of the same name as a
        # tensor elsewhere in the function (`{k: v.item() for k, v in d.items()}`) is another
        # variable's, not this one's (`{k: f"{v:.2f}" for k, v in floats.items()}`).
        if (binding is None or binding.kind != "comp") and self.used_as_tensor(name, at):
            # `a = np.array(...)`, then `a.nonzero()`: NumPy arrays share some of those methods
            return ctx.values.kind(name, at) is not Kind.NUMPY
        if binding is None or binding.kind not in ("assign", "for", "comp"):
            kind = ctx.values.kind(name, at)
            if kind is Kind.UNKNOWN and binding is not None and binding.kind == "param" and name.value in self._assumed:
                return True  # what every caller passes decides (`device_parameters`)
            return kind is Kind.TENSOR or kind is Kind.UNKNOWN and ctx.devices.on_device(name, at)
        if binding.kind != "assign":  # a loop variable: numbers over `range`, items of a tensor
            if ctx.values._binding_kind(binding) is not Kind.UNKNOWN:
                return ctx.values._binding_kind(binding) is Kind.TENSOR
            source = iterated_item(binding.value, binding.element)  # `for i, n in enumerate(lengths)`, `for x in ys[0, 1:]`
            return source is not None and type(source) in (cst.Name, cst.Attribute, cst.Call, cst.Subscript) and self.tensorish(source, binding.node, depth + 1)
        return self._bound_tensorish(name, at, depth)

    def _moved_off_device(self, name: str, at: cst.CSTNode) -> bool:
        """Is every binding of ``name`` that may reach ``at`` (through the branches before it)
        an assignment of a NumPy array or a Python value (``x.cpu().numpy()``, ``t.tolist()``)?"""
        bindings = self.ctx.bindings.reaching_each(name, at)
        return bool(bindings) and all(self._host_binding(b) for b in bindings)

    def _host_binding(self, binding) -> bool:  # type: ignore[no-untyped-def]
        """``x = t.cpu().numpy()``, ``xs = t.tolist()``: an assignment of a NumPy array or a Python value."""
        return binding.kind == "assign" and binding.element is None and binding.value is not None \
            and self.ctx.values.kind(binding.value, binding.node) in (Kind.NUMPY, Kind.HOST)

    def _bound_tensorish(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Judged by the assignment that reaches ``at``."""
        ctx = self.ctx
        name = dotted(expr)
        binding = ctx.bindings.reaching(name, at) if name is not None else None
        if binding is None or binding.kind != "assign" or binding.value is None:
            return False
        branch = ctx.guards.default_branch(binding.node)
        if branch is not None and branch[1] == name:
            return False  # `if n is None: n = t.max()`: a tensor only when a caller leaves `n` out
        value = binding.value
        if binding.element is not None:  # `x, y = x.cuda(), y.cuda()`
            if type(value) not in (cst.Tuple, cst.List) or binding.element >= len(value.elements):
                return ctx.values.kind(value, binding.node) is Kind.TENSOR
            value = value.elements[binding.element].value
        if type(value) is cst.Call and ctx.devices.move(value) == "device":
            return not self._moves_an_object(value)  # `trainer = trainer.cuda()`: a model or a trainer moved
        return self.tensorish(value, binding.node, depth + 1)

    @cached_property
    def _entries(self) -> dict[tuple[int, str], list[tuple[cst.BaseExpression, cst.CSTNode]]]:
        """(function, key) -> the values that function stores under a string key:
        ``hyp["score"] = v`` and ``{"score": v}`` (value, the statement or dict that holds it)."""
        found: dict[tuple[int, str], list[tuple[cst.BaseExpression, cst.CSTNode]]] = {}
        tree = self.ctx.tree
        for assign in tree.nodes(cst.Assign):
            for target in assign.targets:
                key = _string_key(target.target) if type(target.target) is cst.Subscript else None
                function = tree.enclosing_function(assign) if key is not None else None
                if function is not None:
                    found.setdefault((id(function), key), []).append((assign.value, assign))  # type: ignore[arg-type]
        for mapping in tree.nodes(cst.Dict):
            function = tree.enclosing_function(mapping)
            for element in mapping.elements if function is not None else ():
                if type(element) is cst.DictElement and type(element.key) is cst.SimpleString:
                    found.setdefault((id(function), element.key.evaluated_value), []).append((element.value, mapping))  # type: ignore[arg-type]
        return found

    def _entry_tensorish(self, key: str, at: cst.CSTNode, depth: int) -> bool:
        """Does the function around ``at`` store a tensor under ``key`` that may be what ``at``
        reads (stored before it, or in a loop around both), and never a host value there
        (``hyp["yseq"] = hyp["yseq"].tolist()``)? Literal numbers are starting values
        (``{"score": 0.0}``), then replaced by tensors."""
        tree = self.ctx.tree
        function = tree.enclosing_function(at)
        entries = self._entries.get((id(function), key), ()) if function is not None else ()
        if not entries:
            return False
        where = tree.index(at)
        reaching = [(value, node) for value, node in entries if not plainly_python(value) and not tree.is_inside(at, node)
                    and (tree.index(node) < where or any(tree.is_inside(at, loop) for loop in self.ctx.loops.enclosing_loops(node)))]
        asked: set[tuple[int, str]] = self.__dict__.setdefault("_entries_asked", set())
        if (id(function), key) in asked:
            return False  # `s["value"] = s["value"] + END`: the host test asks of the entry again
        asked.add((id(function), key))
        try:
            if any(self._host_value(value, node) for value, node in reaching):
                return False
        finally:
            asked.discard((id(function), key))
        memo: dict[int, bool] = self.__dict__.setdefault("_entry_memo", {})
        for value, node in reaching:
            if id(value) not in memo:
                memo[id(value)] = False  # `s["score"] = s["score"] + d`: itself, while asked
                memo[id(value)] = self.tensorish(value, node, depth + 1)
            if memo[id(value)]:
                return True
        return False

    def _host_value(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``t.item()``, ``t.tolist()``, ``float(t)``, ``t.cpu()``: a value read to the host."""
        if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in ("float", "int", "bool", "list"):
            return True
        return self.ctx.devices.moved_to_host(value, at)

    def holds_device_tensors(self, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``container`` a Python list (or generator) of device tensors: ``[model(x).max()
        for x in xs]``, or a name bound to one in this function, or ``scores = []`` then
        ``scores.append(loss)`` with ``loss`` one? ``max(scores)``, ``sorted(scores)`` and
        ``scores[0] < scores[1]`` compare them with ``__bool__``: one read per comparison."""
        container_type = type(container)
        if container_type in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self.device_tensor(container.elt, container.elt)
        if container_type in (cst.List, cst.Tuple):
            return any(not isinstance(e, cst.StarredElement) and self.device_tensor(e.value, at) for e in container.elements)
        if container_type is not cst.Name:
            return False
        memo: dict[tuple[int, str], bool] = self.__dict__.setdefault("_holds_memo", {})
        ctx = self.ctx
        scope = ctx.tree.scope_of(at)
        key = (id(scope), container.value)
        if key not in memo:
            memo[key] = False  # `xs = xs + [x]`: the list itself, while asked
            items = [(b.value, b.node) for b in ctx.bindings.lookup(container.value, at)
                     if b.kind == "assign" and b.element is None and type(b.value) in (cst.ListComp, cst.List)]
            items += [(call.args[0].value, call) for call in ctx.method_calls("append")
                      if dotted(call.func.value) == container.value and len(call.args) == 1 and ctx.tree.scope_of(call) is scope]  # type: ignore[attr-defined]
            memo[key] = any(self.holds_device_tensors(value, node) if type(value) in (cst.ListComp, cst.List)
                            else self.device_tensor(value, node) for value, node in items)
        return memo[key]

    def _moves_an_object(self, move: cst.Call) -> bool:
        """``trainer.cuda()`` after ``trainer = ImagenTrainer(...)`` (or ``Net().to(device)``):
        an instance of a class moved, whose methods return whatever they return, not a tensor."""
        receiver = move.func.value  # type: ignore[attr-defined]
        built: cst.BaseExpression | None = receiver
        at: cst.CSTNode = move
        if type(receiver) is not cst.Call:
            name = dotted(receiver)
            binding = self.ctx.bindings.reaching(name, move) if name is not None else None
            built = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
            at = binding.node if binding is not None else move
        if type(built) is not cst.Call:
            return False
        called = self.ctx.qname(built.func) or dotted(built.func) or ""
        # A class is named in CamelCase; torch's tensor classes (`torch.LongTensor(...)`) build tensors.
        return called.rsplit(".", 1)[-1][:1].isupper() and self.ctx.values.kind(built, at) is not Kind.TENSOR

    def reads_truth(self, expr: cst.BaseExpression, at: cst.CSTNode, traced: bool = False) -> bool:
        """Does Python take the truth value of a device tensor to evaluate ``expr`` (a
        condition): ``t``, ``not t``, ``a and t``, ``t > eps``, ``all(done)``,
        ``any(not p.isfinite().all() for p in ps)``? ``traced``: of any tensor, in code
        torch.compile traces (:meth:`traced_tensor`), where the device does not matter."""
        expr_type = type(expr)
        if expr_type is cst.BooleanOperation:
            return self.reads_truth(expr.left, at, traced) or self.reads_truth(expr.right, at, traced)
        if expr_type is cst.UnaryOperation and type(expr.operator) is cst.Not:
            return self.reads_truth(expr.expression, at, traced)
        is_tensor = self.traced_tensor if traced else self.device_tensor
        if expr_type is cst.Comparison:
            if any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons):
                return False  # identity and membership never read a tensor's value
            operands = [expr.left, *(c.comparator for c in expr.comparisons)]
            return any(is_tensor(o, at) for o in operands)
        if expr_type is cst.Call and self.truth_builtin(expr):
            return not traced and self.truth_of_each(expr.args[0].value, at)
        return is_tensor(expr, at)

    def per_token_stop(self, statement: cst.CSTNode) -> bool:
        """``if (idx_next == eos).all(): break`` in a decode loop of this file: a device
        tensor's truth value read once per decoded token to stop early (the read waits
        before the next token's forward can be queued). A read with ``.item()`` in the test
        is a call of its own (TL101 reports it there)."""
        ctx = self.ctx
        if type(statement) is not cst.If or not _leaves_loop(statement):
            return False
        loop = ctx.loops.statement_loop(statement)
        if loop is None or not ctx.loops.decodes(loop) or ctx.devices.host_only(statement.test):
            return False  # a decode loop's own stop check only: elsewhere TL104 (opt-in) decides
        if ctx.loops.local_hot_loop(statement) is loop and ctx.loops.where(loop) is not Where.INFER:
            return False  # a training loop that samples: its stop checks are TL104's
        if ctx.guards.rare(statement, stop=loop) or ctx.guards.rare_test(statement, loop):
            return False  # checked every N tokens: that is the fix
        if any(type(n) is cst.Call and ctx.method_name(n) in ("item", "tolist") for n in ctx.tree.descendants(statement.test)):
            return False
        return self.reads_truth(statement.test, statement.test)

    def condition_read(self, statement: cst.CSTNode, test: cst.BaseExpression) -> bool:
        """``if``/``while``/``assert``/``a if t else b`` whose ``test`` reads a device
        tensor's truth value, where it may run every step (not under a rare guard)."""
        ctx = self.ctx
        loop = ctx.loops.hot_loop(test)
        if loop is None or ctx.devices.host_only(test):
            return False
        return not ctx.guards.rare(statement, stop=loop) and self.reads_truth(test, test)

    def device_parameters(self, node: cst.CSTNode, holds: Callable[[], bool]) -> tuple[str, ...]:
        """The parameters of ``node``'s function, of no kind known here (no annotation but a
        tensor's, no default but None), that make ``holds()`` true when taken for device tensors:
        a sampler's ``sigmas[i] == 0`` where ``sigmas`` is what its callers pass
        (``get_sigmas_karras(..., device=device)``), an attention's ``if input_pos[-1] >= n:`` with
        ``input_pos: Optional[torch.Tensor] = None``. The join keeps such a finding where every call
        that passes the parameter passes a device tensor there (``Steps.device_params``); () when
        none does, or ``holds()`` is true as it is."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None:
            return ()
        params = {p.name.value: p for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
        open_params = {name for name, p in params.items() if name not in ("self", "cls") and _may_be_passed_a_tensor(p)}
        if not open_params:
            return ()  # (checked before the names `node` reads are followed: typed code, `forward(self)`, has none)
        candidates = tuple(dict.fromkeys(name for name in self._names_behind(node, function) if name in open_params))
        if not candidates or not self._holds_assuming(candidates, holds):
            return ()
        if len(candidates) > 1:  # `x[i, :, start:end]` with `start = ids_str[i]`: `ids_str` decides, not `x`
            alone = tuple(name for name in candidates if self._holds_assuming((name,), holds))
            return alone or candidates
        return candidates

    def _holds_assuming(self, names: tuple[str, ...], holds: Callable[[], bool]) -> bool:
        """``holds()`` with ``names`` taken for device tensors; what was learnt meanwhile forgotten."""
        memos = {key: dict(value) for key, value in self.__dict__.items() if key.endswith("_memo") and isinstance(value, dict)}
        self._assumed = frozenset(names)
        try:
            return holds()
        finally:
            self._assumed = frozenset()
            self.__dict__.update(memos)  # what was learnt under the assumption is not known

    def _names_behind(self, node: cst.CSTNode, function: cst.FunctionDef) -> list[str]:
        """The names ``node`` reads, and those the values bound to them in ``function`` read
        (``idx_str = ids_str[i]``: ``ids_str``), a few assignments deep."""
        ctx, tree = self.ctx, self.ctx.tree
        found: list[str] = []
        frontier: list[tuple[cst.CSTNode, cst.CSTNode]] = [(node, node)]
        for _ in range(4):
            following: list[tuple[cst.CSTNode, cst.CSTNode]] = []
            for expr, at in frontier:
                for name in (n for n in ((expr,) if type(expr) is cst.Name else tree.descendants(expr)) if type(n) is cst.Name):
                    if name.value in found:
                        continue
                    found.append(name.value)
                    binding = ctx.bindings.reaching(name.value, at)
                    if binding is not None and binding.kind == "assign" and binding.value is not None and tree.is_inside(binding.node, function):
                        following.append((binding.value, binding.node))
            frontier = following
        return found

    def sized_by_values(self, node: cst.Call | cst.Subscript) -> bool:
        """``x[mask]``, ``nonzero()``, ``unique()``, ``masked_select()``, ``torch.where(c)``,
        ``repeat_interleave(t)`` on a device tensor where it may run every step: a tensor
        whose size the host must learn from the device. A mask write of a Python value
        (``x[m] = 0``: ``masked_fill_``) makes none; an update through a mask (``l[m] -= 1``:
        read, then written back) or a write of a device tensor (``x[m] = y``: ``index_put_``
        with the mask's ``nonzero``) does."""
        ctx = self.ctx
        if type(node) is cst.Subscript:
            if self._filled_in_place(node):
                return False  # `x[mask] = 0` writes in place: no new tensor of unknown size
            masks = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
            mask = next((m for m in masks if self.bool_mask(m, node)), None)
            if mask is not None:
                return self.in_step(node) and (self.device_tensor(mask, node) or self._kept_on_device(mask, node, node.value))
            # `x[node_type == i]` with `node_type` a parameter: a tensor indexed by a comparison
            # is indexed by a mask (a Python bool index would only add a dimension).
            return any(self._compared(m, node) for m in masks) and self.in_step(node) and self.device_tensor(node.value, node)
        op, subject = torch_op(ctx, node)
        function = ctx.qname(node.func) is not None
        if op is None or subject is None or not self._op_sized_by_values(op, node, function):
            return False
        if op == "repeat_interleave":
            subject = self._repeats(node, function) or subject
        return self.in_step(node) and self.device_tensor(subject, node)

    def _filled_in_place(self, node: cst.Subscript) -> bool:
        """``x[m] = 0.0``, ``del d[k]``: a write that learns no size (torch fills through a mask
        where the value is one number on the host). ``l[m] -= 1`` reads ``l[m]`` first; ``x[m] =
        y`` of a device tensor indexes through the mask's positions."""
        parent = self.ctx.tree.parent(node)
        if type(parent) is cst.Del:
            return True
        if type(parent) is not cst.AssignTarget:
            return False
        value = self.ctx.tree.parent(parent).value  # type: ignore[union-attr]
        return plainly_python(value) or not self.device_tensor(value, node)

    def uploaded_mask(self, node: cst.Subscript) -> cst.Param | None:
        """``[y[y != pad] for y in padded]`` in a helper whose ``padded`` is a parameter: a
        mask index sized by its values when a per-step call passes that parameter a batch just
        copied to the device (the join's ``#uploaded:``); the parameter, else None."""
        ctx = self.ctx
        if self._filled_in_place(node) or ctx.tree.enclosing_function(node) is None:
            return None  # `x[m] = 0` writes in place
        for element in node.slice:
            test = element.slice.value if isinstance(element.slice, cst.Index) else None
            if type(test) is not cst.Comparison or any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in test.comparisons):
                continue
            for operand in (test.left, *(c.comparator for c in test.comparisons)):
                param = self._parameter_of_item(operand, node)
                if param is not None and self.in_step(node):
                    return param
        return None

    def _parameter_of_item(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """The parameter ``expr`` is, or a row of (``y`` in ``for y in padded``)."""
        uploads = self.ctx.uploads
        if type(expr) is cst.Name:
            binding = self.ctx.bindings.reaching(expr.value, at)
            if binding is not None and binding.kind in ("for", "comp") and binding.element is None and binding.value is not None:
                return uploads.parameter_behind(binding.value, binding.node) if type(binding.value) is cst.Name else None
        return uploads.parameter_behind(expr, at) if type(expr) in (cst.Name, cst.Subscript) else None

    def _kept_on_device(self, mask: cst.BaseExpression, at: cst.CSTNode, indexed: cst.BaseExpression) -> bool:
        """``data.train_mask`` of a graph moved to the device (``data = dataset[0].to(device)``),
        or indexing a device tensor (``out[data.train_mask]``, the graph maybe remade by a
        transform) where nothing says the graph is on the host; or a name bound to one
        (``mask = graph["paper"].train_mask``)."""
        if type(mask) is cst.Name:
            bound = self.ctx.bindings.reaching(mask.value, at)
            return bound is not None and bound.kind == "assign" and bound.element is None and type(bound.value) is cst.Attribute \
                and self._kept_on_device(bound.value, at, indexed)
        if type(mask) is not cst.Attribute or not mask_name(mask.attr.value):
            return False
        devices, owner = self.ctx.devices, mask.value
        if devices.on_device(owner, at):
            return True
        on_host = devices.is_host_batch(owner, at) or devices.loader_value(owner, at) or devices.moved_to_host(owner, at) \
            or type(owner) is cst.Name and self._bound_unmoved(owner, at)
        return not on_host and self.device_tensor(indexed, at)

    def _bound_unmoved(self, owner: cst.Name, at: cst.CSTNode) -> bool:
        """``data = dataset[0]`` and never moved: every binding that reaches ``owner`` indexes a
        dataset or calls nothing that could move it (a transform might)."""
        bound = self.ctx.bindings.reaching_each(owner.value, at)
        return bool(bound) and all(b.kind == "assign" and b.value is not None and type(b.value) is cst.Subscript for b in bound)

    def _compared(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A value comparison (``a == i``, ``t > 0``), or a name bound only to one."""
        if type(expr) is cst.Name:
            bound = self.ctx.bindings.lookup(expr.value, at)
            return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None and type(b.value) is cst.Comparison
                                       and self._compared(b.value, b.node) for b in bound)
        return type(expr) is cst.Comparison and not any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons)

    def _op_sized_by_values(self, op: str, call: cst.Call, function: bool) -> bool:
        if op in SIZED_BY_VALUES:
            return True
        if op == "where":  # `torch.where(cond)`: the indices of the true elements
            return function and len(call.args) == 1 and call.args[0].keyword is None
        if op == "repeat_interleave":  # with a tensor of repeats and no `output_size=`
            return self.ctx.keyword(call, "output_size") is None and not self.ctx.has_star_kwargs(call) and self._repeats(call, function) is not None
        return False

    def _repeats(self, call: cst.Call, function: bool) -> cst.BaseExpression | None:
        """The repeats of ``repeat_interleave`` when they are a tensor (an int repeats
        every element the same number of times: a known size)."""
        ctx = self.ctx
        arg = ctx.keyword(call, "repeats") or ctx.argument(call, 1 if function else 0)
        if arg is None and function and len(call.args) == 1:
            arg = call.args[0]  # `torch.repeat_interleave(counts)`
        if arg is None:
            return None
        return arg.value if self.tensorish(arg.value, call) else None

    def repeated_in_step(self, node: cst.CSTNode) -> bool | None:
        """Does ``node`` run more than once per step by the loops of its own file (a loop
        over heads or node types inside the step)? None when the project-wide join decides
        (its function or loop runs per step from elsewhere: ``Report.repeated`` waits for it).
        TL101 reports a hidden sync that repeats; TL104/TL106 (opt-in) the one that does not."""
        ctx = self.ctx
        hot = ctx.loops.local_hot_loop(node)
        if hot is None:
            return None
        return bool(ctx.places.repeats(node, ctx.places.update_loop(hot)))

    def traced_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is ``expr`` a tensor in code torch.compile traces: :meth:`tensorish`, or the result
        of a method only tensors and arrays have (``x.sum()``, ``h.sin()``; dynamo traces
        NumPy arrays as tensors too), a comparison with one, arithmetic on one, or a name
        bound to one of those?"""
        if depth > 4:
            return False
        expr_type = type(expr)
        if expr_type is cst.BinaryOperation:
            return self.traced_tensor(expr.left, at, depth + 1) or self.traced_tensor(expr.right, at, depth + 1)
        if expr_type is cst.UnaryOperation:
            return self.traced_tensor(expr.expression, at, depth + 1)
        if expr_type is cst.Comparison:
            return self.bool_mask(expr, at, depth + 1, traced=True)
        if expr_type is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in _ARRAY_METHODS:
            if self.ctx.qname(expr.func) is None and self.ctx.values.kind(expr.func.value, at) is not Kind.HOST:
                return True
        if plainly_python(expr):
            return False
        if self.tensorish(expr, at):
            return True
        if expr_type is cst.Name:  # `y = x.sin()`, then `y > 0`
            binding = self.ctx.bindings.reaching(expr.value, at)
            value = getattr(binding, "value", None) if binding is not None and binding.kind == "assign" and binding.element is None else None
            return value is not None and self.traced_tensor(value, binding.node, depth + 1)
        return False

    def truth_builtin(self, call: cst.Call) -> bool:
        """``all(...)``/``any(...)``, the builtins (not ``torch.all``, not a method)."""
        func = call.func
        return type(func) is cst.Name and func.value in TRUTH_BUILTINS and self.ctx.qname(func) is None and len(call.args) == 1

    def truth_of_each(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``all(value)``: a device tensor (every element is read), or a generator or list of
        tests each of which reads one."""
        value_type = type(value)
        if value_type in (cst.GeneratorExp, cst.ListComp, cst.SetComp):
            return self.reads_truth(value.elt, value.elt)
        if value_type in (cst.List, cst.Tuple):
            return any(self.reads_truth(e.value, at) for e in value.elements)
        return self.device_tensor(value, at)

    def bool_mask(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, traced: bool = False) -> bool:
        """Is ``expr`` a boolean tensor: a comparison with a tensor, ``~m``, ``a & b``,
        ``x.isnan()``, ``torch.isfinite(x)``, ``m.bool()``, or a name bound to one?
        ``traced``: a tensor as :meth:`traced_tensor` knows one."""
        if depth > 4:
            return False
        ctx = self.ctx
        expr_type = type(expr)
        if expr_type is cst.Comparison:
            if any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons):
                return False
            is_tensor = self.traced_tensor if traced else self.tensorish
            return any(is_tensor(o, at) for o in (expr.left, *(c.comparator for c in expr.comparisons)))
        if expr_type is cst.UnaryOperation and type(expr.operator) is cst.BitInvert:
            return self.bool_mask(expr.expression, at, depth + 1, traced)
        if expr_type is cst.BinaryOperation and type(expr.operator) in (cst.BitAnd, cst.BitOr, cst.BitXor):
            return self.bool_mask(expr.left, at, depth + 1, traced) or self.bool_mask(expr.right, at, depth + 1, traced)
        if expr_type is cst.BinaryOperation and type(expr.operator) is cst.Multiply:  # `(u > 0) * (l == u)`: a logical and
            return self.bool_mask(expr.left, at, depth + 1, traced) and self.bool_mask(expr.right, at, depth + 1, traced)
        if expr_type is cst.Call:
            func = expr.func
            if ctx.qname(func) in _BOOL_FUNCTIONS:
                return True
            helper = ctx.functions.called(expr, ctx.qname(func))
            if helper is not None:  # `mask = lengths_to_mask(lengths)`: a helper of this file returning one
                returns = [r.value for r in ctx.values.returns_of(helper) if r.value is not None]
                return bool(returns) and all(self.bool_mask(value, value, depth + 1) for value in returns)
            return type(func) is cst.Attribute and func.attr.value in _BOOL_METHODS and ctx.qname(func) is None and self.tensorish(func.value, at)
        if expr_type is cst.Name:
            bound = [b for b in ctx.bindings.lookup(expr.value, at) if b.kind != "augassign"]
            return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None and self.bool_mask(b.value, b.node, depth + 1, traced)
                                       for b in bound)
        if expr_type is cst.Attribute and mask_name(expr.attr.value):
            # `data.train_mask`: a mask kept on a graph or a batch (PyG's splits), unless this
            # file binds that attribute to something that is no mask (a view of itself,
            # `data.train_mask = data.train_mask[:, 0]`, stays one)
            name = dotted(expr) or ""
            bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None
                     and not (type(b.value) is cst.Subscript and dotted(b.value.value) == name)]
            return all(self.bool_mask(b.value, b.node, depth + 1, traced) for b in bound)
        return False


def _may_be_passed_a_tensor(param: cst.Param) -> bool:
    """``sigmas``, ``input_pos: Optional[torch.Tensor] = None``: a parameter whose callers decide
    what it holds, a tensor maybe. A default other than None holds when a call leaves it out
    (``scale=1.0``, ``levels=DEFAULT_LEVELS``), and the join takes a call that leaves the
    parameter out for one that passes no tensor: only None says "nothing passed"."""
    default = param.default
    if default is not None and not (type(default) is cst.Name and default.value == "None"):
        return False
    return param.annotation is None or _tensor_annotation(param.annotation.annotation)


def _tensor_annotation(annotation: cst.BaseExpression) -> bool:
    """``torch.Tensor``, ``Tensor``, ``Optional[torch.LongTensor]``, ``Tensor | None``,
    ``"torch.Tensor"``: an annotation that names a tensor (or None) and nothing else."""
    if type(annotation) is cst.SimpleString:  # a forward reference: `"torch.Tensor"`
        try:
            annotation = cst.parse_expression(annotation.evaluated_value)  # type: ignore[arg-type]
        except (cst.ParserSyntaxError, TypeError):
            return False
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:  # `Tensor | None`
        sides = [annotation.left, annotation.right]
        return all(_tensor_annotation(side) or type(side) is cst.Name and side.value == "None" for side in sides) \
            and any(_tensor_annotation(side) for side in sides)
    if type(annotation) is cst.Subscript and dotted(annotation.value) in ("Optional", "typing.Optional") and len(annotation.slice) == 1 \
            and type(annotation.slice[0].slice) is cst.Index:
        return _tensor_annotation(annotation.slice[0].slice.value)
    name = dotted(annotation)
    return name is not None and name.rsplit(".", 1)[-1].endswith("Tensor")


def _string_key(subscript: cst.Subscript) -> str | None:
    """``"score"`` for ``hyp["score"]``: the one string key of a subscript, if that is all it is."""
    if len(subscript.slice) != 1 or type(subscript.slice[0].slice) is not cst.Index:
        return None
    key = subscript.slice[0].slice.value
    return key.evaluated_value if type(key) is cst.SimpleString and isinstance(key.evaluated_value, str) else None  # type: ignore[union-attr]


def _one_index(subscript: cst.Subscript) -> bool:
    """``xs[0]``, ``xs[i]``: one item, not a slice."""
    return len(subscript.slice) == 1 and type(subscript.slice[0].slice) is cst.Index


def _leaves_loop(branch: cst.If) -> bool:
    """Does the branch's body leave the loop (``break`` or ``return`` among its statements)?"""
    body = branch.body.body if type(branch.body) is cst.IndentedBlock else (branch.body,)
    for statement in body:
        small = statement.body if type(statement) in (cst.SimpleStatementLine, cst.SimpleStatementSuite) else ()
        if any(type(part) in (cst.Break, cst.Return) for part in small):
            return True
    return False
