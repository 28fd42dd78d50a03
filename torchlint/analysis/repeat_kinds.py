"""What a loop within a step goes over, told by its shape: a few fixed items, copies only, the top k,
environments, batches drawn, a container's members; the base :class:`~torchlint.analysis.places.Places` builds on."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from torchlint.analysis.device_elements import may_hold_values
from torchlint.analysis.host_consumers import environment_step
from torchlint.analysis.item_members import item_members
from torchlint.analysis.members import CONTAINERS
from torchlint.analysis.multiplicity import FEW_ITEMS
from torchlint.analysis.names import dotted, is_range
from torchlint.analysis.positions import plain_code
from torchlint.analysis.step_position import StepPositions
from torchlint.analysis.step_syncs import read_value
from torchlint.analysis.subtree_calls import IN_SCOPE

_FEW = FEW_ITEMS  # a loop over at most this many fixed items (the splits of a dataset) is "a few"
# What a loop whose reads after the first are copies (``Repeat.copies``) may call besides reads and
# host work: views, and copies the host waits for. Only a range over rows, or a loop over a dict's
# values (a loss dict's, read for the log), is asked (`_repeat`): not a loop over parameters, elements
# of a device tensor, tokens or blocks, of which there may be thousands, nor one over items whose
# values it cannot see (``out[mask].cpu()`` per split).
_VIEWS_AND_COPIES = frozenset({"unsqueeze", "squeeze", "view", "transpose", "permute", "expand", "narrow", "select", "detach",
                               "to", "cuda", "cpu", "size", "dim", "numel"})
_HOST_TENSORS = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})  # made on the host (a copy when moved)
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


class RepeatKinds(StepPositions):
    """The shapes of the loops that repeat a node within its step (``Places._repeat`` asks them)."""

    def _handed_in(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``iterable`` a parameter of the function around ``at`` annotated as a container
        (``values: list``; a bare ``padded`` may be a batch tensor, its rows each a wait)?"""
        bound = self.ctx.bindings.reaching(iterable.value, at) if type(iterable) is cst.Name else None
        return bound is not None and bound.kind == "param" and type(bound.node) is cst.Param and bound.node.annotation is not None \
            and may_hold_values(bound.node)

    def _own_keywords(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``iterable`` its function's own ``**`` parameter (``kwargs``, ``kwargs.items()``,
        ``.values()``, ``.keys()``), never bound again: as many items as a call passes keywords?"""
        if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and iterable.func.attr.value in ("items", "values", "keys") \
                and not iterable.args:
            iterable = iterable.func.value
        if type(iterable) is not cst.Name:
            return False
        function = self.ctx.tree.enclosing_function(at)
        star = function.params.star_kwarg if function is not None else None
        # (`kwargs = {**kwargs, "x": 1}` before the loop: no longer only what the call passed)
        bound = self.ctx.bindings.lookup(iterable.value, at) if isinstance(star, cst.Param) and star.name.value == iterable.value else ()
        return len(bound) == 1 and bound[0].kind == "param"

    def _per_environment(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``iterable`` (through ``enumerate``/``zip``) a name bound by the last assignment before
        ``at`` to what an environment's step returned (``next_obs, reward, done, info = envs.step(a)``)?"""
        while type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("enumerate", "zip") and iterable.args:
            iterable = iterable.args[0].value
        if type(iterable) is not cst.Name:
            return False
        bound = self.ctx.bindings.reaching(iterable.value, at)
        return bound is not None and bound.kind == "assign" and environment_step(bound.value)

    def _few_items(self, iterable: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> int | None:
        """How many items a loop over a few fixed ones goes over: a literal list, tuple or set
        (``[data.train_mask, data.val_mask, data.test_mask]``), a dict literal's keys, values or
        items (``y_true = {'train': [], 'valid': [], 'test': []}``), a name bound once to one, through
        ``enumerate``/``zip``, or an object called with the keys it yields (PyG's ``data('train_mask',
        'val_mask')``; one key, ``data('test_mask')``, yields one pair: the loop runs once); None for
        anything else or more than ``_FEW`` items."""
        if depth > 3:
            return None
        node_type = type(iterable)
        if node_type is cst.Call:
            func = iterable.func
            if type(func) is cst.Name and func.value in ("enumerate", "zip", "list", "sorted", "reversed") and iterable.args and self.ctx.qname(func) is None:
                return self._few_items(iterable.args[0].value, at, depth + 1)
            if type(func) is cst.Attribute and func.attr.value in ("keys", "values", "items") and not iterable.args:
                return self._few_items(func.value, at, depth + 1)
            if 1 <= len(iterable.args) <= _FEW and all(type(a.value) is cst.SimpleString and a.keyword is None and not a.star for a in iterable.args) \
                    and self.ctx.qname(func) is None:
                return len(iterable.args)  # PyG's `data('train_mask', 'val_mask', 'test_mask')`: one (key, value) per key
            return None
        if node_type in (cst.List, cst.Tuple, cst.Set, cst.Dict):
            elements = iterable.elements
            if any(type(e) in (cst.StarredElement, cst.StarredDictElement) for e in elements):
                return None
            return len(elements) if 0 < len(elements) <= _FEW else None
        if node_type is cst.Name:
            bound = self.ctx.bindings.lookup(iterable.value, at)
            # (a parameter defaulted to a few values, `def accuracy(output, target, topk=(1, 5))`: its callers pass
            # cut-offs of the same kind; the loop runs a few times per call)
            if len(bound) == 1 and bound[0].kind in ("assign", "param") and bound[0].element is None and bound[0].value is not None:
                return self._few_items(bound[0].value, bound[0].node, depth + 1)
        return None

    def _light(self, loop: cst.CSTNode) -> bool:
        """Does the loop's body queue only small tensor ops: no model, no backward or
        optimizer step, no helper of the project whose own work is unknown here?"""
        loops = self.ctx.loops
        return not any(loops.is_step_call(n) or loops._calls_a_trainer(n) or self._maybe_a_model(n) or self._runs_a_helper(n)
                       for n in loops.loop_calls(loop))

    def _copies_only(self, loop: cst.CSTNode) -> bool:
        """Does the loop's body queue nothing a read in it would wait for, but its own copy: only
        reads, views, host work and uploads (``int(lengths[i].item() / 2)``, ``np.random.randint``,
        ``clips.append(x[i, :, a:b])``, ``torch.from_numpy(y).to(device)``; a fill by assignment,
        ``trg[i, :n] = 1``, is one tiny kernel)? No op of its own that the next read must wait for
        (``torch.median(d)`` before a mask's read, ``torch.cat(...)``, ``x[i] * 2``), no model, no
        unknown call."""
        # Asked of each loop once (``repeat_of`` is memoised): a scan of its calls.
        if type(loop) in _COMPREHENSIONS:  # its element (and key) is its body: `{k: v.item() for k, v in losses.items()}`
            parts = (loop.key, loop.value) if type(loop) is cst.DictComp else (loop.elt,)  # type: ignore[attr-defined]
            calls = [call for part in parts for call in self.ctx.loops.own_calls(part, IN_SCOPE)]
            return all(self._quiet(call) or read_value(self.ctx, call) is not None or self._copy_or_view(call) or self._asks_the_host(call)
                       for call in calls) \
                and not any(self.device_operators(part) or self._unread_operands(part) for part in parts)
        if type(loop) is not cst.For:
            return False
        return all(self._quiet(call) or read_value(self.ctx, call) is not None or self._copy_or_view(call)
                   for call in self.ctx.loops.loop_calls(loop)) and not self.device_operators(loop)

    def _unread_operands(self, part: cst.CSTNode) -> bool:
        """Does an operator in ``part`` take anything but values read to the host and host values
        (``(v * 2).item()`` queues a kernel on each item, whatever ``v`` is; ``v.item() / n`` does not)?"""
        ctx = self.ctx
        for node in ctx.tree.descendants(part):
            if type(node) is cst.BinaryOperation and not all(
                    read_value(ctx, side) is not None or ctx.values.python_value(side, node)
                    or type(side) is cst.Call and self._asks_the_host(side) for side in (node.left, node.right)):
                return True
        return False

    def _asks_the_host(self, call: cst.Call) -> bool:
        """A call of another module's function given nothing (dinov2's ``distributed.get_global_size()``
        dividing each loss read): given no tensor, it has none to queue work on."""
        qualified = self.ctx.qname(call.func)
        return not call.args and qualified is not None and not qualified.startswith("torch.")

    def _copy_or_view(self, call: cst.Call) -> bool:
        """``x.unsqueeze(0)``, ``t.detach()``, ``y.to(device)``, ``torch.from_numpy(a)``: a view, or a copy the host waits for."""
        qualified = self.ctx.qname(call.func)
        if qualified is not None:
            return qualified in _HOST_TENSORS
        return type(call.func) is cst.Attribute and call.func.attr.value in _VIEWS_AND_COPIES

    def _indexes_top_k(self, loop: cst.CSTNode, index: str) -> bool:
        """Does ``loop``'s body index the result of a ``topk`` with its variable
        (``local_best_ids[0, j]`` after ``scores, ids = torch.topk(logp, beam)``)?"""
        ctx = self.ctx
        if type(loop) is not cst.For or not index:
            return False
        for node in ctx.loops.own_nodes(loop.body):
            if type(node) is not cst.Subscript or type(node.value) is not cst.Name or not any(
                    type(e.slice) is cst.Index and dotted(e.slice.value) == index for e in node.slice):
                continue
            bound = ctx.bindings.reaching(node.value.value, node)
            value = bound.value if bound is not None and bound.kind == "assign" else None
            if type(value) is cst.Call and ((ctx.qname(value.func) or "") == "torch.topk" or ctx.method_name(value) == "topk"):
                return True
        return False

    def _over_device_tensor(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``words``, ``enumerate(words)``, ``zip(words, ...)``, ``seq[0, 1:]`` with ``words``,
        ``seq`` a device tensor; or ``for t, l in pairs:`` over pairs made of its rows
        (``pairs = [(tv, l) for tv, l in zip(t, losses)]``, returned by a method of the file)."""
        target = at.target if type(at) is cst.For else None
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("enumerate", "zip") and iterable.args:
            iterable = iterable.args[0].value
        elif type(target) is cst.Tuple and type(iterable) in (cst.Name, cst.Subscript) \
                and any(self.ctx.syncs.device_tensor(member, member_at) for i in range(len(target.elements))
                        for member, member_at in item_members(self.ctx, iterable, i, at)):
            return True
        if type(target) is cst.Name and any(self.ctx.method_name(call) == "item" and not call.args and type(call.func.value) is cst.Name  # type: ignore[attr-defined]
                                            and call.func.value.value == target.value for call in self.ctx.loops.loop_calls(at)):  # type: ignore[attr-defined]
            return True  # `for label in labels: if label.item() == eos:` (kospeech's `label_to_string`): each item a 0-d tensor, read
        return type(iterable) in (cst.Name, cst.Attribute, cst.Subscript) and self.ctx.syncs.device_tensor(iterable, at)

    def _draws_batches(self, loop: cst.For | cst.While) -> bool:
        """Does the loop's body draw from an iterator with the builtin ``next(...)`` (a loader's batches), or
        call a function or method named for a batch (llm.c's ``x, y = val_loader.next_batch()``, nanoGPT's
        ``X, Y = get_batch(split)``)?"""
        return any(type(call.func) is cst.Name and call.func.value == "next" and self.ctx.qname(call.func) is None
                   or "batch" in (self.ctx.method_name(call) or dotted(call.func) or "").lower()
                   for call in self.ctx.loops.loop_calls(loop))

    def _steps_an_environment(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (not a loop nested in it, but its comprehensions: dreamerv3's
        ``results = [e.step(a) for e, a in zip(envs, action)]``) step an environment (``envs.step(action)``)?"""
        loops, tree = self.ctx.loops, self.ctx.tree
        return any(environment_step(call, tree) and next((each for each in loops.enclosing_loops(call) if type(each) in (cst.For, cst.While)), None) is loop
                   for call in loops.own_calls(loop.body, IN_SCOPE))  # type: ignore[attr-defined]

    def _decoded(self, kind: str | None, loop: cst.CSTNode) -> str | None:
        """A loop over tokens (not a range of them) decodes them only when it runs a model:
        ``for token in tokens`` inside a decode step goes over that step's tokens (one per sequence)."""
        if type(loop) is cst.For and (kind == "token" and self._calls_a_model(loop) or self.ctx.loops.decodes(loop)):
            return "decoded token"
        return kind

    def _bound_code(self, bound: cst.BaseExpression) -> str:
        """A range's bound as code, with what a local name was set to once (``n_audio =
        tokens.shape[0] // beam_size``: the batch's rows)."""
        code = plain_code(self.ctx.module, bound).lower()
        if type(bound) is cst.Name:
            bindings = self.ctx.bindings.lookup(bound.value, bound)
            value = getattr(bindings[0], "value", None) if len(bindings) == 1 and bindings[0].kind == "assign" else None
            if value is not None:
                code += " " + plain_code(self.ctx.module, value).lower()
        return code

    def _range_count(self, iterable: cst.BaseExpression) -> int | None:
        if not is_range(iterable) or len(iterable.args) != 1:
            return None
        count = self.ctx.constants.int_value(iterable.args[0].value, iterable)
        return count if count is not None and count > 0 else None

    def _container_size(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> int | None:
        members = self._members(iterable, at)
        return members[1] if members is not None else None

    def _members(self, container: cst.BaseExpression, at: cst.CSTNode) -> tuple[bool, int | None, str] | None:
        """``self.blocks`` built as ``nn.ModuleList([Block() for _ in range(12)])`` (the same
        class N times: True) or of a literal list (``[A(), B()]``: several classes, False),
        how many members when the code says, and the container's class name."""
        name = dotted(container)
        cls = self.ctx.tree.enclosing_class(at)
        if name is None or not name.startswith("self.") or cls is None:
            return None
        assign = self._first_assignments.get((id(cls), name))
        if assign is not None:
            value = assign.value
            if type(value) is cst.List and not value.elements:  # `self.filters = []`, then one `append` per kind
                return self._appended_kinds(name, cls)
            qualified = self.ctx.qname(value.func) if type(value) is cst.Call else None
            if qualified not in CONTAINERS or len(value.args) != 1:
                return None
            members = value.args[0].value
            if type(members) in (cst.List, cst.Tuple) and not any(type(e) is cst.StarredElement for e in members.elements):
                size = len(members.elements) if not self._grown(name, cls) else None  # `.append(...)` later: more than the literal
                return len(members.elements) < 2, size or None, qualified
            if type(members) is cst.ListComp and type(members.for_in.iter) is cst.Call and members.for_in.inner_for_in is None:
                return True, self._range_count(members.for_in.iter), qualified
            if value.args[0].star == "*" and type(members) is cst.Name:  # `nn.Sequential(*layers)`, `layers` filled in a loop
                count = self._filled_in_a_loop(members, assign)
                return (True, count[0], qualified) if count is not None else None
            return None
        return None

    def _filled_in_a_loop(self, name: cst.Name, at: cst.CSTNode) -> tuple[int | None] | None:
        """``layers = []`` then ``for _ in range(k): layers.append(ActNorm(c)); layers.append(InvConv(c))``:
        each class it holds is there once per iteration of one loop; (that loop's count, when
        the code says), else None."""
        binding = self.ctx.bindings.reaching(name.value, at)
        if binding is None or binding.kind != "assign" or type(binding.value) is not cst.List or binding.value.elements:
            return None
        scope = self.ctx.tree.scope_of(at)
        appends = [call for call in self.ctx.method_calls(("append", "extend", "insert"))
                   if dotted(call.func.value) == name.value and self.ctx.tree.scope_of(call) is scope]  # type: ignore[attr-defined]
        loops = {id(loop): loop for call in appends for loop in [next(iter(self.ctx.loops.enclosing_loops(call)), None)]}
        if not appends or len(loops) != 1 or None in loops or any(self.ctx.method_name(call) != "append" for call in appends):
            return None
        loop = next(iter(loops.values()))
        if type(loop) is not cst.For or self.ctx.tree.is_inside(binding.node, loop) or self.ctx.tree.is_inside(at, loop):
            return None
        tree = self.ctx.tree
        if any(type(a) in (cst.If, cst.IfExp, cst.Try) for call in appends for a in tree.ancestors(call) if tree.is_inside(a, loop) and a is not loop):
            return None  # timm's EdgeNeXt: `if i < depth - num_global_blocks: ConvBlock else: SplitTransposeBlock`, some iterations each
        return (self._range_count(loop.iter),)

    @cached_property
    def _first_assignments(self) -> dict[tuple[int, str], cst.Assign]:
        """(id of a class, ``self.x``) -> the first ``self.x = ...`` in the class: one pass
        over the assignments, not one per container a loop goes over."""
        found: dict[tuple[int, str], cst.Assign] = {}
        tree = self.ctx.tree
        for assign in tree.nodes(cst.Assign):
            if len(assign.targets) != 1:
                continue
            name = dotted(assign.targets[0].target)
            if name is None or not name.startswith("self."):
                continue
            cls = tree.enclosing_class(assign)
            if cls is not None:
                found.setdefault((id(cls), name), assign)
        return found

    def _appended_kinds(self, name: str, cls: cst.ClassDef) -> tuple[bool, int | None, str] | None:
        """A list filled by appends in ``cls``, each of a different class written there
        (whisper's ``self.logit_filters.append(SuppressBlank(...))``, ``SuppressTokens(...)``, ...,
        none in a loop): several classes, each member's method run once per pass. None otherwise."""
        tree, names = self.ctx.tree, []
        for call in self.ctx.method_calls(("append", "extend", "insert")):
            if type(call.func) is not cst.Attribute or dotted(call.func.value) != name or tree.enclosing_class(call) is not cls:
                continue
            value = call.args[-1].value if call.args and call.func.attr.value == "append" else None
            made = dotted(value.func) if type(value) is cst.Call else None
            if made is None or not made.rsplit(".", 1)[-1][:1].isupper() or self.ctx.loops.enclosing_loops(call):
                return None  # something else, or appended in a loop: maybe several of one class
            names.append(made)
        return (False, None, "list") if len(names) >= 2 and len(set(names)) == len(names) else None

    def _grown(self, name: str, cls: cst.ClassDef) -> bool:
        """Is the container ``self.<name>`` appended to in ``cls`` (``self.input_blocks.append(...)``)?"""
        tree = self.ctx.tree
        return any(type(call.func) is cst.Attribute and dotted(call.func.value) == name and tree.enclosing_class(call) is cls
                   for call in self.ctx.method_calls(("append", "extend", "insert")))

    def _calls_a_model(self, loop: cst.CSTNode) -> bool:
        loops = self.ctx.loops
        return any(loops.is_step_call(n) for n in loops.loop_calls(loop))
