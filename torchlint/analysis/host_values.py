"""Values on the host: what a NumPy array, a Python value, a tensor moved or built on the host, or a
helper's result computed from such values is, followed through bindings (a part of ``Devices``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import READS_TO_HOST, SAME_TENSOR, host_tensor_class, loads_to_host
from torchlint.analysis.device_reach import HOST_BUILDERS as _HOST_BUILDERS, is_number as _is_number, operands
from torchlint.analysis.host_consumers import environment_info, target_count
from torchlint.analysis.host_shapes import numpy_rooted as _numpy_rooted, returns_host_tensors as _returns_host_tensors, sequence_parts as _sequence_parts
from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item
from torchlint.analysis.names import dotted
if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# How deep a host placement is followed through names and ops: deeper than a device's (`device_reach.DEPTH`),
# since a loop's index into a host batch walks several (`token_idx = idx + 1` of `for idx in torch.where(
# labels[i] == end)[0]`, `labels = input_ids.clone()`, `input_ids = torch.stack([x[0] for x in batch[1]])`).
_DEPTH = 12


class HostValues:
    """Which values of one file are on the host."""

    ctx: FileContext
    # While `host_if` asks: the parameters of `_host_scope` taken for host values, noted as used
    _host_conditions: set[str] | None = None
    _host_scope: cst.FunctionDef | None = None

    def host_if(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, ...] | None:
        """Where ``expr`` lives, given what the function around ``at`` is passed: () on the host as
        it is, the parameters (all of them) that put it there when each holds a host value (``wav[None]``
        in ``write(wav)``, ``wav`` of ``for wav in wavs`` in ``add(wavs)``: the join asks the callers,
        ``join_params.host_call_params``), None when neither is known."""
        function = self.ctx.tree.enclosing_function(at)
        if function is None or self._host_conditions is not None:
            return () if self.moved_to_host(expr, at) else None
        # (a helper's answer found while parameters are taken for host values holds only under that
        # assumption: the memo is put back as it was)
        helpers = dict(self.__dict__.get("_helpers_host", {}))
        self._host_conditions, self._host_scope = set(), function
        try:
            found = self.moved_to_host(expr, at)
            noted = self._host_conditions
        finally:
            self._host_conditions, self._host_scope = None, None
            self.__dict__["_helpers_host"] = helpers
        return tuple(sorted(noted)) if found else None

    def moved_to_host(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Was ``expr`` already moved to the host: ``x.cpu().detach()``, ``y[0]`` after
        ``y = out.cpu()``, ``torch.from_numpy(a)``?"""
        ctx = self.ctx
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Attribute and expr.attr.value in SAME_TENSOR and ctx.qname(expr) is None:
                expr = expr.value  # `loss.data`, `w.T`: the same tensor's storage, where it is
            elif type(expr) is cst.Call and ctx.qname(expr.func) == "torch.autograd.Variable" and expr.args and expr.args[0].keyword is None:
                expr = expr.args[0].value  # `Variable(x)` (pre-0.4) wraps the tensor it is given, on its device
            elif type(expr) is cst.Call and ctx.qname(expr.func) is not None:
                break
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                moved = self.move(expr)
                if moved is not None:
                    return moved == "host"
                if expr.func.attr.value in ("to", "type_as") and not self.dtype_only_to(expr):
                    return False  # `.to(src_tokens)`, `.type_as(x)`: to another tensor's device, wherever that is
                if expr.func.attr.value in READS_TO_HOST and not expr.args:
                    return True  # `tokens = tokens.tolist()`: a Python value, read already
                expr = expr.func.value
            else:
                break
        if _is_number(expr):
            return True  # `norm_fix = 1.`: a Python number
        if type(expr) in (cst.Name, cst.Attribute, cst.Call) and ctx.values.kind(expr, at) is Kind.NUMPY:
            return True  # a NumPy array (`kmeans(wh / s, n)[0]`, `k.copy()`): host memory, whatever is done to it
        if _numpy_rooted(expr, ctx):
            return True  # `np.finfo(np.float32).eps`, `np.iinfo(t).max`: a NumPy scalar or object, never a tensor
        if type(expr) is cst.Call:
            if _returns_host_tensors(expr, ctx):
                return True  # `tokenizer(text, return_tensors="pt")`: tensors built on the host
            if loads_to_host(expr, ctx):
                return True  # `audio, sr = torchaudio.load(path)`: a file read into host memory, not moved yet
            if self.module_on_host(expr.func, at):
                return True  # `model_cpu = model.cpu()` moved the module itself: it runs on the host
            if host_tensor_class(ctx.qname(expr.func)):
                return not self.default_device_set()  # `torch.LongTensor([n])`: a CPU tensor class (its CUDA twin is `torch.cuda.LongTensor`)
            if ctx.qname(expr.func) in _HOST_BUILDERS and self.ctx.keyword(expr, "device") is None:
                if self._copies_a_tensor(expr, at, _depth):
                    return False  # `torch.as_tensor(pred_masks, dtype=torch.uint8)`: the tensor stays where it was
                return not self.default_device_set()  # `torch.set_default_device("cuda")` builds there instead
            if self._torch_op_of_host_values(expr, at, _depth):
                return True
            return self._local_helper_of_host_values(expr, _depth)
        if type(expr) is cst.IfExp and _depth < _DEPTH:
            # `torch.min(torch.as_tensor(g), torch.as_tensor(N)) if g is not None else N`: host on both branches
            return all(self.moved_to_host(branch, at, _depth + 1) or not ctx.syncs.tensorish(branch, at) for branch in (expr.body, expr.orelse))
        if type(expr) in (cst.List, cst.Tuple) or type(expr) is cst.BinaryOperation and _sequence_parts(expr):
            # `[torch.LongTensor([d])] + [torch.LongTensor([h])] * n`: a list whose items are host tensors
            items = [e.value for part in _sequence_parts(expr) for e in part.elements]  # type: ignore[attr-defined]
            return bool(items) and _depth < _DEPTH and all(type(e) is not cst.StarredElement and (_is_number(e) or self.moved_to_host(e, at, _depth + 1))
                                                         for e in items)
        if type(expr) is cst.BinaryOperation:
            # `host_a / host_b`: arithmetic keeps its operands' placement (a device operand
            # would make the result a device value, so both sides must be host or numbers).
            # In a file that names no device at all, one host tensor is enough: the other
            # operands (`scaler.loss_scale`) are Python values or host tensors too, since a
            # host tensor of any size meets a device tensor only by raising. (A number is no host
            # tensor: so-vits-svc's `(1 - dr) ** 2` of a discriminator's outputs is where `dr` is.)
            sides = operands(expr)
            numbers = [_is_number(side) for side in sides]
            on_host = [number or self.moved_to_host(side, at, _depth + 1) for side, number in zip(sides, numbers)]
            if all(on_host):
                return True
            return any(host and not number for host, number in zip(on_host, numbers)) \
                and not self.uses_accelerator() and not self._mentions_devices() \
                and not any(self.ctx.syncs.tensorish(side, at) for side, host in zip(sides, on_host) if not host)
        if type(expr) in (cst.ListComp, cst.GeneratorExp) and _depth < _DEPTH:
            return self.moved_to_host(expr.elt, at, _depth + 1)  # a list of host values: its items are on the host
        if type(expr) is cst.IfExp and _depth < _DEPTH:
            # `x.cpu().numpy() if isinstance(x, torch.Tensor) else x`: the other branch is no tensor at all
            tested = ctx.guards.tensor_tested(expr.test)
            return self.moved_to_host(expr.body, at, _depth + 1) and (
                tested is not None and dotted(expr.orelse) == tested or self.moved_to_host(expr.orelse, at, _depth + 1))
        if type(expr) is cst.Comparison and _depth < _DEPTH:  # `best > thr`: the same, for a mask
            sides = [expr.left, *(target.comparator for target in expr.comparisons)]
            on_host = [_is_number(side) or self.moved_to_host(side, at, _depth + 1) for side in sides]
            if all(on_host):
                return True
            # `labels[i] == end_token_id` with `end_token_id = tokenizer(...)["input_ids"][-1]`: a host tensor
            # compared with what is no known tensor (a Python value) gives a host mask; a device tensor
            # there would raise, unless the host side were a scalar (rare in a comparison's left side).
            syncs = self.ctx.syncs
            return any(host and not _is_number(side) and syncs.tensorish(side, at) for side, host in zip(sides, on_host)) \
                and not any(syncs.tensorish(side, at) for side, host in zip(sides, on_host) if not host)
        if self._every_binding(expr, at, self.moved_to_host, _depth, whole_value_of_tuples=True):
            return True
        # A loader's batch never moved (`batch[1]` of `for batch in loader:`, the rows `x` of `[x[0] for x in
        # batch[1]]`) is host memory: what a torch op makes of it (`torch.stack([x[0] for x in batch[1]])`)
        # stays there until `.to(device)` (open_flamingo's labels, masked in a loop before their move).
        # Only where the code moves values to a device itself: a function handed its model and batches that moves
        # nothing (library code, `fit(model, loader, opt)`) leaves the device to its caller, who may give it device batches.
        return type(expr) is cst.Name and _depth <= _DEPTH and self._moves_to_a_device(at) and self.is_host_batch(expr, at)  # type: ignore[attr-defined]

    def _moves_to_a_device(self, at: cst.CSTNode) -> bool:
        """Does the function holding ``at`` (or the module, outside any) move something to a device
        (``x.to(...)``, ``x.cuda()``)? From the file's method-call index, its scopes found once."""
        moving: set[int] = self.__dict__.get("_moving_scopes")  # type: ignore[assignment]
        if moving is None:
            tree = self.ctx.tree
            moving = self.__dict__["_moving_scopes"] = {id(tree.enclosing_function(call)) for call in self.ctx.method_calls(("to", "cuda"))
                                                         if call.args or call.func.attr.value == "cuda"}  # type: ignore[attr-defined]
        return id(self.ctx.tree.enclosing_function(at)) in moving

    def returns_host(self, function: cst.FunctionDef) -> bool:
        """Does every ``return`` of ``function`` (a few, at least one, no ``yield``) give a host value
        (``torch.multinomial(F.softmax(torch.tensor(out)), 1)[0]``, ``x.cpu().tolist()``)? Its
        callers in other files read that result without a wait (the join: ``FileSummary.host_returns``)."""
        return self._returns_host(function, 0)

    def _helper_returns_host(self, function: cst.FunctionDef) -> bool:
        """:meth:`returns_host`, asked with a fresh depth (what a helper returns does not depend on
        how deep its caller's question is) and memoised; a helper asked while its own answer is being
        made (recursion), or past a few helpers nested this way, is not known to."""
        memo: dict[cst.FunctionDef, bool | None] = self.__dict__.setdefault("_helpers_host", {})
        if function in memo:
            return bool(memo[function])
        if sum(1 for answer in memo.values() if answer is None) >= 4:
            return False  # (helpers returning helpers' results, deeper than code usually nests)
        memo[function] = None
        memo[function] = answer = self._returns_host(function, 0)
        return answer

    def _returns_host(self, function: cst.FunctionDef, depth: int) -> bool:
        tree = self.ctx.tree
        if tree.holds(function, cst.Yield) or tree.holds(function, cst.Await):
            return False  # (a nested function's too)
        returns = self.ctx.values.returns_of(function)
        if not returns or len(returns) > 4 or any(r.value is None for r in returns):
            return False  # returns nothing (a None read raises, not waits), or too many paths to follow
        return all(self.moved_to_host(r.value, r, depth) for r in returns)  # type: ignore[arg-type]

    def result_of_elsewhere(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The call ``expr`` is the result of, where that call runs a function of another file or an object's
        method this file does not define (``char`` after ``char = tokenizer.sample_logits(out, x)``): what it
        returns, only the join can tell."""
        ctx, tree = self.ctx, self.ctx.tree
        if type(expr) is not cst.Name:
            return None
        bound = ctx.bindings.latest_before(ctx.bindings.lookup(expr.value, at), at, lambda b: not tree.is_inside(at, b.node))
        if bound is None or bound.kind != "assign" or bound.element is not None or type(bound.value) is not cst.Call:
            return None
        call = bound.value
        qualified = ctx.qname(call.func)
        if qualified is not None and qualified.split(".")[0] in ("torch", "numpy"):
            return None  # a library op: its own placement rules hold
        if ctx.functions.called(call, qualified) is not None:
            return None  # a function of this file: read here (`_local_helper_of_host_values`)
        if type(call.func) is cst.Attribute and ctx.values.kind(call.func.value, bound.node) is Kind.TENSOR:
            return None  # `last_loss = loss[:, -1].mean()`: a tensor's own method, no other file's
        return call

    def _copies_a_tensor(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``torch.tensor(t)`` / ``torch.as_tensor(t)`` of a tensor not known to be on the host:
        the result is on ``t``'s device (a list, a number or an array is host data)."""
        if self.ctx.qname(call.func) not in ("torch.tensor", "torch.as_tensor") or not call.args or call.args[0].keyword is not None:
            return False
        data = call.args[0].value
        if isinstance(data, (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)) or _is_number(data):
            return False
        return self.ctx.syncs.tensorish(data, at) and not self.moved_to_host(data, at, depth + 1)

    def _torch_op_of_host_values(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``torch.argmin(host[i:j])``, ``torch.cat([a.cpu(), b.cpu()])``, ``F.softmax(host)``: a torch op whose
        tensor inputs are all on the host (and no ``device=``) computes on the host."""
        qualified = self.ctx.qname(call.func) or ""
        if qualified.startswith("torch.nn.functional."):
            qualified = "torch." + qualified.rsplit(".", 1)[1]  # `F.softmax(host, dim=-1)`: an op like `torch.softmax`
        if depth > _DEPTH or not call.args:
            return False
        if qualified.startswith("torchaudio.functional.") and call.args[0].keyword is None:
            # `resample(audio, lsr, sr)`: computes where its waveform is; the other arguments are rates and settings
            return self.moved_to_host(call.args[0].value, at, depth + 1)
        if not qualified.startswith("torch.") or qualified.count(".") != 1:
            return False
        if self.ctx.keyword(call, "device") is not None or self.ctx.keyword(call, "out") is not None:
            return False
        inputs = []
        for arg in call.args:
            if arg.keyword is not None:
                continue
            value = arg.value
            inputs.extend(e.value for e in value.elements) if isinstance(value, (cst.List, cst.Tuple)) else inputs.append(value)
        return bool(inputs) and all(_is_number(v) or self.moved_to_host(v, at, depth + 1) for v in inputs)

    def _local_helper_of_host_values(self, call: cst.Call, depth: int) -> bool:
        """``xyxy2xywh(torch.tensor(box))``: a function of this file, given only host
        values, that moves nothing to a device, returns host values."""
        function = self.ctx.functions.called(call, self.ctx.qname(call.func))
        if function is None:
            return False  # a model, a method of an object, or an import: it may move its input
        if self._helper_returns_host(function):
            return True  # `load_wav_to_torch(path)`: every return is a host value, whatever it is given
        if depth > 4 or not call.args:
            return False
        if any(arg.star or not (_is_number(arg.value) or self.moved_to_host(arg.value, call, depth + 1)) for arg in call.args):
            return False
        # Why the body is read: `def to_device(x): return x.cuda()` takes host values too.
        if any(self.move(inner) == "device" or self.ctx.keyword(inner, "device") is not None
               for inner in self.ctx.tree.descendants(function) if isinstance(inner, cst.Call)):
            return False
        return self._free_values_on_host(function, depth)

    def _free_values_on_host(self, function: cst.FunctionDef, depth: int) -> bool:
        """Are the values a nested function reads from the scope around it (``wh`` of
        ``def fitness(k): return metric(k, wh)``) on the host: a device tensor there makes
        its result one, whatever it is given?"""
        ctx, tree = self.ctx, self.ctx.tree
        outer = tree.scope_of(function)
        if outer is None or type(outer) is cst.Module:
            return True  # a module-level function: its globals are the module's own business
        seen: set[str] = set()
        for node in tree.descendants(function):
            if type(node) is not cst.Name or node.value in seen:
                continue
            bound = ctx.bindings.lookup(node.value, node)
            if not bound or not all(b.kind == "assign" and not tree.is_inside(b.node, function) for b in bound):
                continue  # its own name, a parameter, an import or a function: not a value from outside
            seen.add(node.value)
            if not self.moved_to_host(node, node, depth + 1):
                return False
        return True

    def _every_binding(self, expr: cst.BaseExpression, at: cst.CSTNode, test, depth: int, whole_value_of_tuples: bool) -> bool:  # type: ignore[no-untyped-def]
        """Does ``test`` hold for the value of every assignment that binds the name ``expr``?

        For ``a, b = value`` the matching element is tested; when ``value`` is not a
        literal tuple, ``whole_value_of_tuples`` says whether to test ``value`` itself.
        """
        name = dotted(expr)
        if name is None or depth > _DEPTH or self.ctx.qname(expr) is not None:
            return False
        every = self.ctx.bindings.lookup(name, at)
        if test == self.moved_to_host and any(b.kind == "augassign" and b.value is not None and not test(b.value, b.node, depth + 1) for b in every):
            return False  # `running = 0.0`, then `running += loss.detach()`: a number the loop turns into a device tensor
        bound = [b for b in every if b.kind != "augassign"]
        tree = self.ctx.tree
        # `k = k[order]`: its own right-hand side sees the earlier bindings, not this one
        over = self._latest_over(bound, at)
        bound = [b for b in bound if not (b.kind == "assign" and (at is b.node or tree.is_inside(at, b.node)))
                 and not (b.kind == "comp" and not self._in_comprehension_of(b, at)) and not self._overwritten(b, over, at)]
        if not bound:
            return False
        for binding in bound:
            value = binding.value
            if binding.kind == "param":
                if self._conditions is not None and test == self.on_device and name not in ("self", "cls") \
                        and self.ctx.tree.enclosing_function(binding.node) is self._condition_scope:
                    self._conditions.add(name)  # a device tensor where the callers pass one (`device_if`)
                    continue
                default = getattr(binding.node, "default", None)
                if test == self.moved_to_host and (isinstance(default, (cst.Integer, cst.Float)) or isinstance(default, cst.Name) and default.value in ("True", "False")):
                    continue  # `thr=4.0`: a number on the host unless a caller says otherwise (a tensor threshold is rare)
                if self._host_conditions is not None and test == self.moved_to_host and name not in ("self", "cls") \
                        and self.ctx.tree.enclosing_function(binding.node) is self._host_scope:
                    self._host_conditions.add(name)  # a host value where the callers pass one (`host_if`)
                    continue
                # A nested function's parameter holds what its callers pass: all in this file.
                passed = self.ctx.functions.passed_to(binding)
                if passed is None or not all(test(arg, call, depth + 1) for arg, call in passed):
                    return False
                continue
            if binding.kind in ("for", "comp") and value is not None:
                # `for n in mask.cpu().sum(1)`, `for a, b in zip(x.cpu(), y)`: an item has
                # the placement of what is iterated
                item = iterated_item(value, binding.element, dict_views=False)  # (a dict is on the host, its values need not be)
                if item is None or not test(item, binding.node, depth + 1):
                    return False
                continue
            if binding.kind != "assign" or value is None:
                return False
            if binding.element is not None:
                action = environment_info(value, binding.element, target_count(binding.node)) if test == self.moved_to_host else None
                if action is not None and self.moved_to_host(action, binding.node, depth + 1):
                    continue  # `..., info = env.step(action.cpu().numpy())`: an environment on the host, its info dict too
                if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                    value = value.elements[binding.element].value
                elif isinstance(value, (cst.GeneratorExp, cst.ListComp)):
                    value = value.elt  # `wh, wh0 = (torch.tensor(x) for x in (wh, wh0))`: each element is made alike
                elif not whole_value_of_tuples:
                    return False
            if not test(value, binding.node, depth + 1):
                return False
        return True

    def _in_comprehension_of(self, binding, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
        """Is ``at`` inside the comprehension whose ``for`` made ``binding`` (its variable is
        seen nowhere else)?"""
        tree = self.ctx.tree
        comprehension = next((a for a in tree.ancestors(binding.node) if type(a) is not cst.CompFor), None)
        return comprehension is not None and (at is comprehension or tree.is_inside(at, comprehension))

    def _overwritten(self, binding, over: list, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
        """Does ``binding`` not reach ``at``: made after it with no loop around both to carry
        it back (``for x in k:`` after ``x, best = metric(k, wh0)`` is read), or assigned over
        on every path, by an assignment after it that stands in a block holding ``at``
        (yolov5's ``with open(...) as f:`` in an early branch, then ``f = anchor_fitness(k)``
        before the loop that reads ``f``; ``over``: the latest two of those, :meth:`_latest_over`)?"""
        tree = self.ctx.tree
        start, end = tree.index(binding.node), tree.index(at)
        if start > end and tree.scope_of(binding.node) is tree.scope_of(at):
            carrying = [loop for loop in self.ctx.loops.enclosing_loops(at) if tree.is_inside(binding.node, loop)]
            if not carrying:
                return True
            # Carried back by the loop, unless the loop's body assigns it over before `at` on every path
            # (`labels = input_ids.clone()` at the top of the step, `labels = labels.to(device)` at its end):
            # an assignment inside the innermost loop carrying it, in a block holding `at`.
            innermost = max(carrying, key=tree.index)
            start = tree.index(innermost)
        # (the latest other one is after `start` if any is: two kept, as one may be `binding` itself)
        return any(other is not binding and start < index for index, other in over)

    def _latest_over(self, bound: list, at: cst.CSTNode) -> list:  # type: ignore[type-arg]
        """The latest two (pre-order index, binding) of the assignments in ``bound`` before ``at`` (at
        index ``end``) that stand in a block holding ``at``: every path from them to ``at`` runs them.
        Found once per question, not once per binding: a name bound on every line of a long
        body made that a scan of every binding per binding, cubic in the body's length."""
        tree = self.ctx.tree
        end, latest = tree.index(at), []
        for other in bound:
            if other.kind != "assign" or not (index := tree.index(other.node)) < end:
                continue
            statement = tree.statement_of(other.node)
            block = tree.parent(statement) if statement is not None else None
            if block is not None and not tree.is_inside(at, statement) and tree.is_inside(at, block):
                latest = sorted(latest + [(index, other)], key=lambda pair: -pair[0])[:2]
        return latest
