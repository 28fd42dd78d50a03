"""Device tensors by value, use or move: whether an expression is a tensor (the value analysis, a
tensor-only method called on it, a move to the device, arithmetic or indexing of one, an entry a
function stores under a string key) and whether it may be on the device (a part of ``HiddenSyncs``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.host_consumers import device_environment_output, target_count
from torchlint.analysis.item_members import item_members
from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import string_key
from torchlint.analysis.summary import ELEMENTS
from torchlint.analysis.sync_ops import NOT_TENSOR_RESULTS, TENSOR_ONLY_METHODS, plainly_python, string_compared

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class DeviceTensors:
    """Which expressions of one file are tensors, and which may be on the device."""

    ctx: FileContext
    _judging: bool
    _tensorish_memo: dict[tuple[int, int], tuple[cst.CSTNode, cst.CSTNode, bool]]
    _assumed: frozenset[str]

    @cached_property
    def _tensor_names(self) -> dict[int, set[str]]:
        """Scope (function or module) -> names a tensor-only method is called on there;
        ``self.x`` names are kept per class (key: the class's id)."""
        found: dict[int, set[str]] = {}
        tree = self.ctx.tree
        for call in self.ctx.method_calls(TENSOR_ONLY_METHODS):
            receiver = call.func.value  # type: ignore[attr-defined]
            if call.func.attr.value == "unique" and type(receiver) is not cst.Name:  # type: ignore[attr-defined]
                continue  # `df["label"].unique()`, `df.label.unique()`: a pandas column's, no tensor named
            item = None
            while type(receiver) is cst.Subscript:
                item = _literal_index(receiver)
                receiver = receiver.value
            # `x[0].view(...)` of a record (`zip(tensors, sizes)`): its first item a tensor, not the
            # record nor its other items (`x[1][0]`, a `torch.Size`'s int); `xs[i].view` says `xs` holds tensors
            name = dotted(receiver)
            if name is not None and item is not None:
                name = f"{name}[{item}]"
            owner = self._owner_of(name, call)
            if owner is not None:
                found.setdefault(id(owner), set()).add(name)  # type: ignore[arg-type]
        for call in self.ctx.method_calls("register_buffer"):  # `self.register_buffer("step", t)`: `self.step`
            first = call.args[0].value if call.args else None
            cls = tree.enclosing_class(call)
            if type(first) is cst.SimpleString and cls is not None and dotted(call.func.value) == "self":  # type: ignore[attr-defined]
                found.setdefault(id(cls), set()).add("self." + first.value.strip("\"'"))
        return found

    def _owner_of(self, name: str | None, node: cst.CSTNode) -> cst.CSTNode | None:
        """The scope a plain name (its function or module) or a ``self.x`` (its class) belongs to at
        ``node``; None for other dotted names (``a.b.c``, ``model.x``: not this scope's to judge)."""
        if name is None or name.count(".") > 1 or "." in name and not name.startswith("self."):
            return None
        tree = self.ctx.tree
        if name.startswith("self."):
            return tree.enclosing_class(node)
        scope = tree.scope_of(node)
        base = name.split("[", 1)[0]
        for ancestor in tree.ancestors(node):
            if ancestor is scope:
                break
            # a lambda's parameter is its own variable: `lambda x: x.size()` says nothing of the `x`
            # of another lambda beside it (`lambda x: x[1][0]` over sizes) nor of the function's
            if type(ancestor) is cst.Lambda and any(p.name.value == base for p in _lambda_params(ancestor)):
                return ancestor
        return scope

    @cached_property
    def _string_names(self) -> dict[int, set[str]]:
        """Scope (function or module; the class for ``self.x``) -> names compared with a string
        literal there (``if self._std == "learned":``, ``dist == "normal"``): strings, not tensors."""
        found: dict[int, set[str]] = {}
        tree = self.ctx.tree
        for comparison in tree.nodes(cst.Comparison):
            for operand in string_compared(comparison):
                name = dotted(operand)
                owner = self._owner_of(name, comparison)
                if owner is not None:
                    found.setdefault(id(owner), set()).add(name)  # type: ignore[arg-type]
        return found

    def compared_with_strings(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``expr`` (a name or ``self.x``) compared with a string literal in its function (its
        class for ``self.x``)? A str parameter or setting, whatever else it is handed to."""
        name = dotted(expr)
        if name is None or not self._string_names:
            return False
        owner = self._owner_of(name, at)
        return owner is not None and name in self._string_names.get(id(owner), ())

    def used_as_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``expr`` (a name, ``self.x``, or an item of one: ``lengths[i]``) used as a
        tensor in its function (its class for ``self.x``)? Shapes and dtypes
        (``x.shape[0]``) are not the tensor."""
        item = None
        while type(expr) is cst.Subscript:
            item = _literal_index(expr)
            expr = expr.value
        name = dotted(expr)
        owner = self._owner_of(name, at)
        names = self._tensor_names.get(id(owner), ()) if owner is not None else ()
        return name in names or item is not None and f"{name}[{item}]" in names

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
        if depth > 8:
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
            if self._assumed and one_index(expr) and self._assumed_values(expr.value, at):
                return True  # `metrics[k]`, `metrics["loss"]` where every caller passes device tensors as the values
            if any(isinstance(e.slice, cst.Index) and type(e.slice.value) in (cst.SimpleString, cst.FormattedString) for e in expr.slice):
                # `data["num_nodes"]`: an entry of a mapping (a graph, a batch dict), a tensor
                # only where this function stores one under that key (`hyp["score"] = s + top[0, j]`)
                key = string_key(expr)
                return key is not None and self._entry_tensorish(key, at, depth)
            if self.tensorish(expr.value, at, depth + 1) or self.used_as_tensor(expr, at):
                return True  # (`x[0]` where `x[0].view(...)` says that item is a tensor)
            # `scores[0]` of a list of device scalars (`scores = [model(x).max() for x in xs]`)
            return type(expr.value) is cst.Name and one_index(expr) and self.holds_device_tensors(expr.value, at)
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
            if type(func) is not cst.Attribute or ctx.qname(func) is not None or func.attr.value in NOT_TENSOR_RESULTS:
                return False
            if func.attr.value.startswith(("get_", "is_", "has_", "num_", "to_")):
                return False  # `edge_index.get_sparse_size()`: a subclass's accessor, maybe a Python value
            return self.tensorish(func.value, at, depth + 1)
        if expr_type is cst.Attribute:
            if self.compared_with_strings(expr, at):
                return False  # `self._std == "learned"` in its class: a string setting (or a number), no tensor
            return self.used_as_tensor(expr, at) or ctx.devices.on_device(expr, at) or self._bound_tensorish(expr, at, depth)
        return False

    def _name_tensorish(self, name: cst.Name, at: cst.CSTNode, depth: int) -> bool:
        ctx = self.ctx
        binding = ctx.bindings.reaching(name.value, at)
        if binding is not None and self._host_binding(binding) and self._moved_off_device(name.value, at):
            # `logits = logits.cpu().numpy()`, then `logits[order]`: a NumPy array here, whatever
            # the name held before (its `.detach()` there makes it no tensor here)
            return False
        if binding is not None and binding.kind == "param" and ctx.guards.no_tensor_here(at, name.value):
            return False  # `if isinstance(ref, torch.Tensor): ... else: n = ref`: a number there, whatever else it is used as
        # A comprehension's variable is what its iterable holds: a use of the same name as a
        # tensor elsewhere in the function (`{k: v.item() for k, v in d.items()}`) is another
        # variable's, not this one's (`{k: f"{v:.2f}" for k, v in floats.items()}`).
        if (binding is None or binding.kind != "comp") and self.used_as_tensor(name, at):
            # `a = np.array(...)`, then `a.nonzero()`: NumPy arrays share some of those methods
            return ctx.values.kind(name, at) is not Kind.NUMPY
        if binding is None or binding.kind not in ("assign", "for", "comp"):
            if self.compared_with_strings(name, at):
                return False  # `def dist(self, dist, ...): if dist == "normal":`: a string parameter
            kind = ctx.values.kind(name, at)
            if kind is Kind.UNKNOWN and binding is not None and binding.kind == "param" and name.value in self._assumed:
                return True  # what every caller passes decides (`device_parameters`)
            return kind is Kind.TENSOR or kind is Kind.UNKNOWN and ctx.devices.on_device(name, at)
        if binding.kind != "assign":  # a loop variable: numbers over `range`, items of a tensor
            if ctx.values._binding_kind(binding) is not Kind.UNKNOWN:
                return ctx.values._binding_kind(binding) is Kind.TENSOR
            source = iterated_item(binding.value, binding.element, dict_views=True)  # `for i, n in enumerate(lengths)`, `for x in ys[0, 1:]`
            if self._assumed and self._assumed_values(source, binding.node):
                return True  # `for k, v in metrics.items()` where every caller passes device tensors as the values
            if source is None and binding.element is not None and binding.value is not None:
                return self._unpacked_member(binding)  # `for t, l in pairs:` of `pairs = [(tv, l) for tv, l in zip(t, losses)]`
            return source is not None and type(source) in (cst.Name, cst.Attribute, cst.Call, cst.Subscript) and self.tensorish(source, binding.node, depth + 1)
        return self._bound_tensorish(name, at, depth)

    def _unpacked_member(self, binding) -> bool:  # type: ignore[no-untyped-def]
        """Is the position a loop unpacks from each item of a list a device tensor where the
        list was made: ``for t, l in pairs:`` with ``pairs`` the second result of ``rf.forward(x, c)``,
        whose ``return loss.mean(), [(tv, l) for tv, l in zip(t, losses)]`` pairs rows of the device
        tensor ``t`` with Python floats (minRF's per-sample losses binned by ``int(t * 10)``)? A
        member on the host (``zip(t.cpu(), losses)``, ``t.tolist()``) is no device tensor."""
        asked: set[int] = self.__dict__.setdefault("_members_asked", set())
        if id(binding.node) in asked:
            return False  # `pairs = [(a, b) for a, b in pairs]` in a loop: the list itself, while asked
        asked.add(id(binding.node))
        try:
            return any(self.device_tensor(member, at) for member, at in item_members(self.ctx, binding.value, binding.element, binding.node))
        finally:
            asked.discard(id(binding.node))

    def _assumed_values(self, container: cst.BaseExpression | None, at: cst.CSTNode) -> bool:
        """Is ``container`` a parameter whose values are taken for device tensors (``elements:`` of
        ``device_parameters``: what every caller passes decides)?"""
        if type(container) is not cst.Name or f"{ELEMENTS}{container.value}" not in self._assumed:
            return False
        binding = self.ctx.bindings.reaching(container.value, at)
        return binding is not None and binding.kind == "param"

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
            action = device_environment_output(value, binding.element, target_count(binding.node))
            if action is not None:  # `next_obs, reward, next_done, info = envs.step(action)`, the action a device tensor
                return not ctx.devices.moved_to_host(action, binding.node) \
                    and (self.tensorish(action, binding.node, depth + 1) or self._policy_output(action, binding.node))
            items = self._listed_items(value, binding.node)
            if items is not None:  # `batch = [b.to(device) for b in batch]`, then `texts, lengths = batch`: each item
                moved = type(items) is cst.Call and ctx.devices.move(items) == "device"
                return not self._moves_an_object(items) if moved else self.tensorish(items, items, depth + 1)
            if type(value) not in (cst.Tuple, cst.List) or binding.element >= len(value.elements):
                # (`x, _ = pad_packed_sequence(...)`: the position of the result that holds a tensor)
                return Kind.TENSOR in (ctx.values.kind(value, binding.node), ctx.values._binding_kind(binding))
            value = value.elements[binding.element].value
        if type(value) is cst.Call and ctx.devices.move(value) == "device":
            return not self._moves_an_object(value)  # `trainer = trainer.cuda()`: a model or a trainer moved
        return self.tensorish(value, binding.node, depth + 1)

    def _listed_items(self, value: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The element of the list comprehension a name unpacked at ``at`` is bound to
        (``batch = [b.to(device) for b in batch[1:]]``): what each unpacked name holds."""
        binding = self.ctx.bindings.reaching(value.value, at) if type(value) is cst.Name else None
        if binding is None or binding.kind != "assign" or binding.element is not None or type(binding.value) is not cst.ListComp:
            return None
        return binding.value.elt

    def _policy_output(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``expr`` bound to what a model (or a method of one) returned: ``action, logprob, _, value =
        agent.get_action_and_value(next_obs)``, a policy's action, a tensor where the model is?"""
        binding = self.ctx.bindings.reaching(expr.value, at) if type(expr) is cst.Name else None
        value = binding.value if binding is not None and binding.kind == "assign" else None
        if type(value) is not cst.Call:
            return False
        func = value.func
        owner = func.value if type(func) is cst.Attribute else func
        return self.ctx.values.kind(owner, binding.node) is Kind.MODULE  # type: ignore[union-attr]

    @cached_property
    def _entries(self) -> dict[tuple[int, str], list[tuple[cst.BaseExpression, cst.CSTNode]]]:
        """(function, key) -> the values that function stores under a string key:
        ``hyp["score"] = v`` and ``{"score": v}`` (value, the statement or dict that holds it)."""
        found: dict[tuple[int, str], list[tuple[cst.BaseExpression, cst.CSTNode]]] = {}
        tree = self.ctx.tree
        for assign in tree.nodes(cst.Assign):
            for target in assign.targets:
                key = string_key(target.target) if type(target.target) is cst.Subscript else None
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


def _lambda_params(lam: cst.Lambda) -> list[cst.Param]:
    """Every parameter a lambda binds."""
    params = lam.params
    star = [params.star_arg] if isinstance(params.star_arg, cst.Param) else []
    extra = [params.star_kwarg] if params.star_kwarg is not None else []
    return [*params.posonly_params, *params.params, *star, *params.kwonly_params, *extra]


def _literal_index(subscript: cst.Subscript) -> str | None:
    """``x[1]``: the integer literal indexing one item, as written; None for any other subscript."""
    if not one_index(subscript):
        return None
    index = subscript.slice[0].slice.value  # type: ignore[attr-defined]
    return index.value if type(index) is cst.Integer else None


def one_index(subscript: cst.Subscript) -> bool:
    """``xs[0]``, ``xs[i]``: one item, not a slice."""
    return len(subscript.slice) == 1 and type(subscript.slice[0].slice) is cst.Index
