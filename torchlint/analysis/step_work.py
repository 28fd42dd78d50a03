"""The device work queued around a statement of a step: the levels of blocks around it, what of theirs
queues a kernel or may run a model before or after it. A mixin of :class:`~torchlint.analysis.places.Places`,
which holds its caches; :class:`~torchlint.analysis.step_position.StepPositions` reads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.functions import built_method, called_object_method
from torchlint.analysis.names import dotted
from torchlint.analysis.step_syncs import COPIES_AND_READS
from torchlint.analysis.subtree_calls import INTO_LOOPS, OWN
from torchlint.analysis.values import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class StepWork:
    """Device work before and after a statement of a step: the work half of ``ctx.places``."""

    ctx: FileContext
    _queues_work: dict[tuple[int, int], bool]
    _block_positions: dict[int, dict[int, int]]
    _chains: dict[tuple[int, int], tuple[tuple[cst.CSTNode, int], ...]]
    _first_work: dict[int, tuple[int, int]]
    _last_work: dict[tuple[int, int], tuple[int, int]]
    _call_facts: dict[tuple[int, str], bool]

    def _statements_around(self, node: cst.CSTNode, stop: cst.CSTNode | None, after: bool):  # type: ignore[no-untyped-def]
        """The statements after (or before, nearest first) ``node``'s, level by level up to ``stop``."""
        for block, at in self._levels(node, stop):
            body = block.body
            yield from (body[at + 1:] if after else reversed(body[:at]))

    def _levels(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> tuple[tuple[cst.CSTNode, int], ...]:
        """Each block around ``node`` up to ``stop``, innermost first, with the position in it
        of the statement that holds ``node``."""
        return self._chain(self.ctx.tree.statement_of(node), stop)

    def _chain(self, child: cst.CSTNode | None, stop: cst.CSTNode | None) -> tuple[tuple[cst.CSTNode, int], ...]:
        """The levels of the statement ``child``: its own block, then its enclosing statement's
        levels. Every site of a statement, and every question about a site, asks them (the
        statements before and after, the work before and after): found once per statement
        and stop, each from its enclosing statement's, not by a walk up per question."""
        key = (id(child), id(stop))
        known = self._chains.get(key)
        if known is not None:
            return known
        tree, found = self.ctx.tree, ()
        if child is not None and child is not stop:
            block = tree.parent(child)
            if type(block) is cst.If and block.orelse is child:
                # an `elif` sits where its `if` does: the levels are the `if` statement's
                found = self._chain(block, stop)
                self._chains[key] = found
                return found
            if type(block) in (cst.IndentedBlock, cst.Module):
                at = self._position_in(block).get(id(child))
                if at is not None:
                    found = ((block, at),)
            parent = tree.parent(block) if block is not None else None
            if not (parent is None or parent is stop or type(parent) in (cst.FunctionDef, cst.ClassDef)):
                outer = tree.statement_of(parent) if type(parent) not in (cst.Else, cst.Finally, cst.ExceptHandler) else tree.statement_of(tree.parent(parent))
                found += self._chain(outer, stop)
        self._chains[key] = found
        return found

    def _position_in(self, block: cst.CSTNode) -> dict[int, int]:
        """Each statement of ``block`` (by id) -> its position in the block's body."""
        positions = self._block_positions.get(id(block))
        if positions is None:
            positions = self._block_positions[id(block)] = {id(s): i for i, s in enumerate(block.body)}
        return positions

    def _own_calls(self, statement: cst.CSTNode, into_loops: bool) -> list[cst.Call]:
        """The calls of ``statement``, not in nested scopes (nor nested loops, unless ``into_loops``)."""
        return self.ctx.loops.own_calls(statement, INTO_LOOPS if into_loops else OWN)

    def _work_after(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Does the step queue device work after ``node`` (a model call, a backward, an
        optimizer step, a function of this file that trains)?"""
        # Every read of a function asks of the same blocks: each block's last working statement is found once per stop.
        return any(self._works_after(block, at, stop) for block, at in self._levels(node, stop))

    def _works_after(self, block: cst.CSTNode, at: int, stop: cst.CSTNode | None) -> bool:
        """Does a statement of ``block`` after position ``at`` queue device work? Its last
        such statement, scanned for from the block's end, once per block and stop."""
        key, body = (id(block), id(stop)), block.body
        last, low = self._last_work.get(key, (-1, len(body)))  # body[low:] queues nothing
        if last >= 0:
            return last > at
        while low > at + 1:
            low -= 1
            if self._queues_device_work(body[low], stop):
                self._last_work[key] = (low, low)
                return True
        self._last_work[key] = (-1, low)
        return False

    def _queues_device_work(self, statement: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        key = (id(statement), id(stop))
        works = self._queues_work.get(key)
        if works is None:
            loops, guards = self.ctx.loops, self.ctx.guards
            works = self._queues_work[key] = any(
                (loops.is_step_call(each) or loops._calls_a_trainer(each) or self._runs_a_model(each)) and not guards.rare(each, stop=stop)
                for each in self._own_calls(statement, into_loops=True))  # (a validation every N steps is no device work of this step)
        return works

    def unplaced_calls_after(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> list[cst.Call]:
        """The calls after ``node`` in its step (not under a rare guard) of what this file cannot
        see the body of: a parameter's object (mae's ``loss_scaler(loss, optimizer, ...)``), an
        imported function (``misc.backward_and_step(loss, opt)``). The join knows whether what
        they run queues a backward, an optimizer step or a model: device work after ``node``."""
        ctx, guards, found = self.ctx, self.ctx.guards, []
        for statement in self._statements_around(node, stop, after=True):
            for call in self._own_calls(statement, into_loops=True):
                func = call.func
                if type(func) not in (cst.Name, cst.Attribute) or guards.rare(call, stop=stop):
                    continue  # (a validation every N steps is no work of this step)
                qualified = ctx.qname(func)
                if qualified is not None and qualified.split(".")[0] in _LIBRARIES:
                    continue  # a library's function: what it queues is its own rule's business
                if ctx.functions.called(call, None if type(func) is cst.Attribute else qualified) is None \
                        and built_method(ctx, call) is None and called_object_method(ctx, call) is None:
                    found.append(call)
        return found

    def _runs_a_helper(self, node: cst.CSTNode) -> bool:
        """A call of a project function (``train_step(b)``, ``self.update()``): where it
        stands says nothing of the work its own body queues before its reads."""
        if type(node) is not cst.Call or self.ctx.loops.is_step_call(node):
            return False
        func, ctx = node.func, self.ctx
        if type(func) is cst.Name:
            qualified = ctx.qname(func)
            return ctx.functions.defines(func.value) if qualified is None else not qualified.startswith(("torch.", "numpy.", "math."))
        return ctx.functions.called(node, None) is not None

    def _work_before(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Has the step queued device work before ``node`` (a model call, a backward, an
        optimizer step, a function of this file that trains), in its statement or before?"""
        tree = self.ctx.tree
        statement = tree.statement_of(node)
        start = tree.index(node)
        # its own statement's calls that run before it: earlier ones, and its own arguments and receiver
        own = [n for n in self._own_calls(statement, into_loops=True) if tree.index(n) < start and not tree.is_inside(node, n) or tree.is_inside(n, node) and n is not node] if statement is not None else []
        inside = {id(n) for n in own if tree.is_inside(n, node)}  # the read's own receiver and arguments
        if any(self._may_queue(call) or id(call) not in inside and self._device_op(call) for call in own):
            return True
        # The statements before, level by level: each block's first working statement is found once per file.
        return any(self._works_before(block, at) for block, at in self._levels(node, stop))

    def _may_queue(self, call: cst.Call) -> bool:
        """A model call, a backward, an optimizer step, a trainer of this file, or a call of a value."""
        # Each call is asked once per block around it and per read after it: answered once.
        key = (id(call), "queue")
        known = self._call_facts.get(key)
        if known is None:
            loops = self.ctx.loops
            known = self._call_facts[key] = loops.is_step_call(call) or loops._calls_a_trainer(call) or self._maybe_a_model(call) or self._runs_a_model(call)
        return known

    def _runs_a_model(self, call: cst.Call) -> bool:
        """A call of a function of this file, or of a method of an object of its class, whose own
        body (not a loop in it) calls a model, a backward or an optimizer step (dlrm's
        ``dlrm_wrap(X, ...)``, which returns ``dlrm(X.to(device))`` of the global ``dlrm``): when
        it returns, that work is queued."""
        ctx = self.ctx
        function = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
        if function is None:
            # a method of an object of this file's class built in the scope (mae's `loss_scaler = NativeScaler()`,
            # then `loss_scaler(loss, optimizer)`, whose `__call__` runs the backward and the optimizer step)
            function = built_method(ctx, call) or called_object_method(ctx, call)
        if function is None:
            return False
        known: dict[int, bool] = self.__dict__.setdefault("_model_runners", {})  # each helper scanned once
        if id(function) not in known:
            loops = ctx.loops
            known[id(function)] = any(type(n) is cst.Call and loops.is_step_call(n) for n in loops.own_nodes(function.body))
        return known[id(function)]

    def _works_before(self, block: cst.CSTNode, at: int) -> bool:
        """Does a statement of ``block`` before position ``at`` have calls (those that fall
        through it) that may queue device work? Its first such statement, scanned for from
        the block's start, once per block."""
        body = block.body
        first, high = self._first_work.get(id(block), (-1, 0))  # body[:high] queues nothing
        if first >= 0:
            return first < at
        while high < at:
            if any(self._may_queue(n) or self._device_op(n) for n in self._falling_through(body[high])):
                self._first_work[id(block)] = (high, high + 1)
                return True
            high += 1
        self._first_work[id(block)] = (-1, high)
        return False

    def _falling_through(self, statement: cst.CSTNode) -> list[cst.Call]:
        """The calls of a statement before the one asked about (nested loops' too), less
        those in the branches of an ``if`` that end in ``return`` or ``raise`` (``if targets
        is not None: ...; return``): what ran there never precedes the statements after the ``if``."""
        nodes = self._own_calls(statement, into_loops=True)
        if type(statement) is not cst.If:
            return nodes
        left = [block for block in _branches(statement) if block.body and type(block.body[-1]) is cst.SimpleStatementLine
                and any(type(small) in (cst.Return, cst.Raise) for small in block.body[-1].body)]
        tree = self.ctx.tree
        return [n for n in nodes if not any(tree.is_inside(n, block) for block in left)] if left else nodes

    def _device_op(self, call: cst.Call) -> bool:
        """A torch op or a tensor's method (``th.exp(log_prob - old)``, ``ratio.mean()``), or a
        method of a member (``self.policy.evaluate_actions(obs)``: a model's, maybe): device
        work the step queued, so a read after it is no step start (stable-baselines3's PPO)."""
        key = (id(call), "device")
        known = self._call_facts.get(key)
        if known is None:
            known = self._call_facts[key] = self._queues_a_kernel(call)
        return known

    def _queues_a_kernel(self, call: cst.Call) -> bool:
        ctx, func = self.ctx, call.func
        qualified = ctx.qname(func)
        if qualified is not None:  # a torch op on a device tensor, or a factory told to make one there
            if not qualified.startswith("torch."):
                return False
            device = ctx.keyword(call, "device")
            if device is not None:
                return ctx.devices.device_value(device.value, call) == "device"
            return any(ctx.devices.on_device(arg.value, call) for arg in call.args)
        if type(func) is not cst.Attribute or func.attr.value in COPIES_AND_READS:
            return False  # a pageable `.to(device)` or `.cpu()` waits for its copy: it leaves nothing queued
        receiver = func.value
        if (dotted(receiver) or "").startswith("self.") and ctx.functions.called(call, None) is None:
            return True
        return ctx.values.kind(receiver, call) is Kind.TENSOR or ctx.syncs.tensorish(receiver, call)

    def _maybe_a_model(self, call: cst.Call) -> bool:
        """A call of a value (``model(**batch)`` after ``model, opt = accelerator.prepare(...)``,
        ``self.net(x)``): maybe a model, so maybe device work (a sync after it is mid-step)."""
        func, ctx = call.func, self.ctx
        if type(func) is cst.Name:
            return ctx.qname(func) is None and not ctx.functions.defines(func.value) and bool(ctx.bindings.lookup(func.value, call))
        if type(func) is cst.Subscript:  # `self.lins[i](x)`, `self.heads[k](h)`: a member of a ModuleList or ModuleDict
            # (or a function picked from a table and given the model: ddim's `loss_registry[kind](model, x, t, e, b)`)
            return (dotted(func.value) or "").startswith("self.") or any(
                not arg.star and ctx.values.kind(arg.value, call) is Kind.MODULE for arg in call.args)
        return type(func) is cst.Attribute and dotted(func.value) == "self" and ctx.functions.called(call, None) is None


# Libraries whose functions are no project code the join could resolve (what they queue is known by name, or nothing).
_LIBRARIES = frozenset({"torch", "numpy", "math", "time", "os", "sys", "logging", "random", "builtins"})


def _branches(statement: cst.If) -> list[cst.IndentedBlock]:
    """The blocks of an ``if``/``elif``/``else`` chain."""
    blocks: list[cst.IndentedBlock] = []
    branch: cst.CSTNode | None = statement
    while branch is not None:
        body = branch.body
        if type(body) is cst.IndentedBlock:
            blocks.append(body)
        branch = branch.orelse if type(branch) is cst.If else None
    return blocks
