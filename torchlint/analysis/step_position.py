"""Where a node sits in its step (``Places.position``): right after a sync, before more
device work, at the step's end, right before an explicit synchronize. A mixin of
:class:`~torchlint.analysis.places.Places`, which holds its caches; the impact model weighs a
single read by it (one the rest of the step's kernels wait behind costs a refill, one right
after a sync almost nothing)."""

from __future__ import annotations

import itertools
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.impact import Position
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.step_drains import READS, DrainIndex, read_expression
from torchlint.analysis.subtree_calls import INTO_LOOPS, OWN
from torchlint.analysis.sync_ops import SIZED_BY_VALUES, torch_op
from torchlint.analysis.values import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Calls that drain the queue, or only read what it made: the host work between a sync and a read.
_QUIET_METHODS = READS | {"synchronize", "append", "write", "info", "debug", "log", "format", "perf_counter", "time", "add_scalar", "update_postfix",
                           "set_postfix", "size", "dim", "numel", "stride",
                           "zero_grad"}  # (grads set to None since torch 2.0; at most a memset per parameter before)
# Host libraries: their functions compute on the host (given a device tensor, they read it first).
_HOST_MODULES = frozenset({"numpy", "math", "random", "time", "os", "json", "logging", "statistics"})
_COMPARING_BUILTINS = frozenset({"min", "max"})
_ARITHMETIC_BUILTINS = frozenset({"sum", "pow", "divmod", "sorted", "list", "tuple", "range", "enumerate", "zip"})
_QUIET_FUNCTIONS = frozenset({"print", "float", "int", "str", "len", "round", "abs", "time.time", "time.perf_counter", "isinstance", "hasattr", "getattr"})


class StepPositions:
    """Where in the step: the position half of ``ctx.places``."""

    ctx: FileContext
    _queues_work: dict[tuple[int, int], bool]
    _block_positions: dict[int, dict[int, int]]
    _chains: dict[tuple[int, int], tuple[tuple[cst.CSTNode, int], ...]]
    _first_work: dict[int, tuple[int, int]]
    _last_work: dict[tuple[int, int], tuple[int, int]]
    _drained: dict[tuple[int, str | None], bool]
    _quiet_calls: dict[int, bool]
    _call_facts: dict[tuple[int, str], bool]

    @cached_property
    def _drain_index(self) -> DrainIndex:
        return DrainIndex(self.ctx)  # the calls that may drain the queue, found once per file

    def position(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> Position | None:
        """Where ``node`` sits in the step that ``stop`` (the hot loop, else the function)
        runs: right after a sync, before more device work, or at the end. None when that
        depends on the caller (nothing follows it in its function, which is no ``forward``)."""
        if stop is not None and self.ctx.tree.statement_of(node) is stop:
            return Position.MID_STEP  # a `while` loop's test: the body's work follows it
        if type(node) is cst.Call and self.ctx.method_name(node) == "empty_cache":
            return Position.MID_STEP  # what it costs is the next step's allocations, made again: always after it
        if self._after_sync(node, stop):
            return Position.AFTER_SYNC
        if read_value(self.ctx, node) is not None and self._before_sync(node, stop):
            return Position.BEFORE_SYNC  # `loss.item()` then `torch.cuda.synchronize()` for a timer: the sync waits anyway
        # Nothing of this step queued before it (`_fresh`): it waits only for the previous
        # step's tail, like a read at the step's end. Each kind of stop asks only what
        # decides its answer (both questions walk the statements around `node`).
        if stop is None:  # module-level code outside any loop
            return Position.MID_STEP if self._work_after(node, stop) else None
        if type(stop) is not cst.FunctionDef:  # a loop: its step starts with its iteration
            if self._fresh(node, stop):
                return Position.STEP_START
            if self._work_after(node, stop):
                return Position.BEFORE_DECODE if self._decoding_after(node, stop) else Position.MID_STEP
            return Position.STEP_END
        if stop.name.value in ("forward", "__call__"):
            # On a `forward`'s first lines, where the model's call stands decides (mid-step
            # when the step queued work before it); after them, the model's other layers,
            # then its backward, follow.
            if self._fresh(node, stop):
                return None
            return Position.BEFORE_DECODE if self._decoding_after(node, stop) else Position.MID_STEP
        if self._work_after(node, stop):
            # fairseq's `torch.arange(bsz).to(device)` after some work, before its beam search: one wait among many
            return Position.BEFORE_DECODE if not self._fresh(node, stop) and self._decoding_after(node, stop) else Position.MID_STEP
        # after the function's own work: where its call ends, not the step's start
        return None if self._fresh(node, stop) else Position.CALL_END

    def _fresh(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Has the step queued no device work before ``node``? (A helper that synchronizes,
        dlrm's `time_wrap()`, queues nothing before its wait.)"""
        return (not self._runs_a_helper(node) or type(node) is cst.Call and self._synchronizes(node)) and not self._work_before(node, stop)

    def _decoding_after(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is the step's next device work after ``node`` a decode loop (a generation's tokens,
        each of which waits for the device)? A wait before it is one among the generation's many."""
        loops = self.ctx.loops
        for statement in self._statements_around(node, stop, after=True):
            if type(statement) in (cst.For, cst.While) and loops.decodes(statement) and loops.is_hot(statement):
                return True
            if self._queues_device_work(statement, stop):
                return False
        return False

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
        """A call of a function of this file whose own body (not a loop in it) calls a model
        (dlrm's ``dlrm_wrap(X, ...)``, which returns ``dlrm(X.to(device))`` of the global
        ``dlrm``): when it returns, the model's work is queued."""
        ctx = self.ctx
        function = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
        if function is None:
            return False
        known: dict[int, bool] = self.__dict__.setdefault("_model_runners", {})  # each helper scanned once
        if id(function) not in known:
            loops = ctx.loops
            known[id(function)] = any(type(n) is cst.Call and loops.is_step_call(n) for n in loops._own_nodes(function.body))
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
        if type(func) is not cst.Attribute or func.attr.value in _COPIES_AND_READS:
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
            return (dotted(func.value) or "").startswith("self.")
        return type(func) is cst.Attribute and dotted(func.value) == "self" and ctx.functions.called(call, None) is None

    def _after_sync(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is ``node`` a read (or a sync) that only host work separates from an explicit
        ``synchronize()`` or an earlier device read (the same value or another: a read waits
        for everything queued before it), earlier in its statement or in the ones before?
        The calls are taken nearest first, in the order Python finishes them."""
        read = read_value(self.ctx, node)
        tree = self.ctx.tree
        statement = tree.statement_of(node)
        if statement is None or any(self._works(n) for n in tree.descendants(node) if type(n) is cst.Call):
            return False  # `(helper(out) / g).tolist()`: the read waits for the helper's work
        may_drain = self._drain_index.may_drain
        if read is None and type(node) is cst.Call and any(may_drain(n) and self._drains(n, None, n) for arg in node.args
                                                           for n in tree.descendants(arg) if type(n) is cst.Call):
            return True  # `torch.zeros(b[-1].item() + 1).to(d)`: its own argument's read drained the queue
        if not self._drain_index.any_before(node, stop):
            return False  # no call before it in its step may drain the queue: the walk back below would find none
        start = tree.index(node)
        own = [n for n in self._finish_order(statement) if tree.index(n) < start and not tree.is_inside(node, n)]
        branch = statement
        while type(parent := tree.parent(branch)) is cst.If and parent.orelse is branch:
            own += self._own_calls(parent.test, into_loops=False)  # an `elif`'s test runs after its `if`'s
            branch = parent
        # Lazily: the nearest statements before usually decide.
        blocks = itertools.chain([(own, True, None)], self._ran_before(node, stop))
        for calls, surely_ran, statement_before in blocks:
            if statement_before is not None and self._tensor_arithmetic(statement_before):
                return False  # `scaled = out * 2`: a kernel queued since (whatever the statement read before it)
            for call in calls:
                if surely_ran and may_drain(call) and self._drains(call, read, node):
                    return True  # (a read in a loop or a branch may not have run)
                if not self._quiet(call):
                    return False  # device work, or a call that may queue some, since
        return False

    def _ran_before(self, node: cst.CSTNode, stop: cst.CSTNode | None):  # type: ignore[no-untyped-def]
        """The calls that ran before ``node``'s statement in its step, nearest first, level by
        level: (calls, whether they surely ran, the statement). The test of an ``if`` or
        ``while`` whose body holds it ran surely, last before the body (``if loss.item() > 100:
        print(loss.item())``: the print's read waits for nothing more)."""
        tree = self.ctx.tree
        for block, at in self._levels(node, stop):
            for statement in reversed(block.body[:at]):
                yield self._finish_order(statement), type(statement) is cst.SimpleStatementLine, statement
            owner = tree.parent(block)
            if type(owner) is cst.Else:
                owner = tree.parent(owner)
            while type(owner) in (cst.If, cst.While) and owner is not stop:
                yield [n for n in self._own_calls(owner.test, into_loops=False)], True, None
                parent = tree.parent(owner)  # an `elif` ran its `if`'s test before its own
                owner = parent if type(parent) is cst.If and parent.orelse is owner else None

    def _tensor_arithmetic(self, statement: cst.CSTNode) -> bool:
        """Does ``statement`` queue a kernel with an operator on a device tensor, outside a read's
        own operands: ``scaled = out * 2``, ``acc += (pred == y).sum()``, ``trg[i, :n] = 1``? (A
        fill of a host tensor, StyleTTS2's alignment ``pred_aln[i, a:b] = 1``, queues nothing.)"""
        if type(statement) is not cst.SimpleStatementLine:
            return False  # a compound statement's calls decide (its operators are not asked: a branch may not run)
        known: dict[int, bool] = self.__dict__.setdefault("_arithmetic", {})  # each statement asked by every read after it
        if id(statement) not in known:
            known[id(statement)] = self._queues_an_operator(statement)
        return known[id(statement)]

    def _queues_an_operator(self, statement: cst.SimpleStatementLine) -> bool:
        ctx = self.ctx
        for small in statement.body:
            targets = [t.target for t in small.targets] if type(small) is cst.Assign else [small.target] if type(small) is cst.AugAssign else []
            if any(type(t) is cst.Subscript and ctx.syncs.device_tensor(t.value, small) for t in targets):
                return True
        return self.device_operators(statement, within_reads=False)

    def device_operators(self, statement: cst.CSTNode, within_reads: bool = True) -> bool:
        """Does ``statement`` apply an operator to a device tensor (``out * 2``, ``acc += d``,
        ``changes[:, 0] == i``, ``~mask``, an index by a tensor ``x[mask]``), anywhere or (not
        ``within_reads``) outside the operands of a read or a sync that waits for it
        (``(torch.rand_like(x) > 0.5).nonzero()``)?"""
        ctx, tree = self.ctx, self.ctx.tree
        for node in tree.descendants(statement):
            if type(node) is cst.AugAssign and ctx.syncs.device_tensor(node.target, node):
                return True
            if any(ctx.syncs.device_tensor(operand, node) for operand in _operands(node)) \
                    and (within_reads or not any(type(a) is cst.Call and self._drains(a, None, a) for a in tree.ancestors(node))):
                return True
        return False

    def _before_sync(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is ``node`` followed, in its step, by an explicit synchronize with only host work
        between (the rest of its statement and the statements after it, level by level)?"""
        tree = self.ctx.tree
        statement = tree.statement_of(node)
        if statement is None or type(statement) is not cst.SimpleStatementLine:
            return False
        end = tree.index(node)
        rest = [n for n in self._finish_order(statement) if tree.index(n) > end and not tree.is_inside(n, node)]
        if any(not self._quiet(call) for call in rest):
            return False
        for later in self._statements_around(node, stop, after=True):
            if type(later) is not cst.SimpleStatementLine:
                return False  # a branch or a loop: the sync after it may not run, or work may come first
            for call in reversed(self._finish_order(later)):  # the order Python starts them in
                if self._explicit_sync(call):
                    return True
                if not self._quiet(call):
                    return False
        return False

    def _explicit_sync(self, call: cst.Call) -> bool:
        """``torch.cuda.synchronize()``, a name bound to it, or a helper of this file that calls it."""
        return self.ctx.method_name(call) == "synchronize" or self._synchronizes(call) \
            or (self.ctx.aliased_qname(call) or "").endswith(".synchronize")

    def _works(self, call: cst.Call) -> bool:
        """A call that may queue more than a tensor method's kernel: a model, a helper."""
        return self.ctx.loops.is_step_call(call) or type(call.func) is cst.Name and not self._quiet(call)

    def _finish_order(self, statement: cst.CSTNode) -> list[cst.Call]:
        """The calls of ``statement`` (not in nested loops), the one Python finishes last first."""
        # Python finishes a call after its arguments: last first is the reverse of a
        # post-order, the order `own_calls` gives them in (no sort per statement).
        return self._own_calls(statement, into_loops=False)

    def _drains(self, call: cst.Call, read: str | None, at: cst.CSTNode) -> bool:
        """Does ``call`` wait for the device's queue: a synchronize, a read of the same value,
        or a read of another tensor on the device?"""
        key = (id(call), read)
        drains = self._drained.get(key)
        if drains is None:
            drains = self._drained[key] = self._waits(call, read)
        return drains

    def _waits(self, call: cst.Call, read: str | None) -> bool:
        if self._explicit_sync(call) or self._blocking_upload(call):  # (`synchronize = torch.cuda.synchronize if ... else ...` too)
            return True
        value = read_value(self.ctx, call)
        if value is None:
            return self._sized_by_values(call)
        if value == read:
            return True
        receiver = call.func.value if type(call.func) is cst.Attribute else call.args[0].value
        return self._may_be_on_device(receiver, call)

    def _blocking_upload(self, call: cst.Call) -> bool:
        """A host batch copied to the device without ``non_blocking=True`` (``x.to(device)``,
        ``batch["A"].type(Tensor)`` with ``Tensor = torch.cuda.FloatTensor``, ``Tensor(array)``):
        a pageable copy the stream runs after everything queued, the host waiting for it."""
        ctx = self.ctx
        func = call.func
        if type(func) is cst.Name:  # `Tensor(np.ones(...))`: a legacy CUDA class built from host data
            return bool(call.args) and ctx.device_makeable.typed_device_class(func) is not None
        if type(func) is not cst.Attribute:
            return False
        if not ctx.devices.blocking_move(call):
            return False  # `non_blocking=True` (or the user's choice): it may not wait
        receiver = func.value
        return ctx.devices.loader_value(receiver, call) or ctx.values.kind(receiver, call) in (Kind.HOST, Kind.NUMPY)

    def _sized_by_values(self, call: cst.Call) -> bool:
        """``mask.nonzero()``, ``torch.unique(x)`` of a device tensor: the host waited for the
        queue to learn the result's size (gpt-fast's ``(...).nonzero()`` before
        ``rejected_locations[0].item()``)."""
        op, tensor = torch_op(self.ctx, call)
        return op in SIZED_BY_VALUES and tensor is not None and self._may_be_on_device(tensor, call)

    def _may_be_on_device(self, receiver: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A read the sync rules would report: of a value not known to be on the host
        (TL101's own test), so a run of reads is judged alike, the first one and the rest."""
        ctx = self.ctx
        if ctx.values.kind(receiver, at) in (Kind.HOST, Kind.NUMPY):
            return False
        devices = ctx.devices
        return not (devices.is_host_batch(receiver, at) or devices.loader_value(receiver, at) or devices.moved_to_host(receiver, at))

    def _synchronizes(self, call: cst.Call) -> bool:
        """A helper of this file that synchronizes (gpt-fast's ``device_sync(device)``:
        ``torch.cuda.synchronize`` behind a device test): its call drains the queue too."""
        helper = self.ctx.functions.called(call, self.ctx.qname(call.func))
        if helper is None:
            return False
        known = self.__dict__.setdefault("_synchronizing", {})  # each helper scanned once
        if id(helper) not in known:
            known[id(helper)] = any(type(n) is cst.Call and self.ctx.method_name(n) == "synchronize"
                                    for n in self.ctx.tree.descendants(helper))
        return known[id(helper)]

    def _quiet(self, call: cst.Call) -> bool:
        quiet = self._quiet_calls.get(id(call))
        if quiet is None:
            quiet = self._quiet_calls[id(call)] = self._leaves_no_work(call)
        return quiet

    def _leaves_no_work(self, call: cst.Call) -> bool:
        """Host bookkeeping, a metadata query, or a helper that synchronizes: no device work queued."""
        method = self.ctx.method_name(call)
        if method in _QUIET_METHODS and not self.ctx.loops.is_step_call(call):
            return True
        if self._given_python_values(call):
            return True  # `loss_meter.update(loss.item(), n)`: host bookkeeping of values read already
        if self.ctx.qname(call.func) == "torch.autograd.Variable":
            return True  # `Variable(x)` (pre-0.4) hands back the tensor it wraps: PyTorch-GAN's `Variable(batch.type(Tensor))`
        return dotted(call.func) in _QUIET_FUNCTIONS or self._synchronizes(call) or self._host_call(call)

    def _host_call(self, call: cst.Call) -> bool:
        """Python arithmetic on values already read (``min(int(n.item() / 2 - 1), max_len // 2)``),
        a host library's function (``np.random.randint(0, n)``, ``math.ceil(x)``; given a device
        tensor it reads it, which drains, never queues), or a method of a host array
        (``a.numpy().astype(np.int32)``): nothing queued on the device."""
        ctx, func = self.ctx, call.func
        qualified = ctx.qname(func)
        if qualified is not None:
            return qualified.partition(".")[0] in _HOST_MODULES
        if type(func) is cst.Name:
            if func.value in _COMPARING_BUILTINS:
                return not ctx.functions.defines(func.value)  # a comparison of device values reads them (a drain), of numbers nothing
            return func.value in _ARITHMETIC_BUILTINS and not ctx.functions.defines(func.value) and all(
                not arg.star and ctx.values.python_value(arg.value, call) for arg in call.args)
        return type(func) is cst.Attribute and ctx.values.kind(func.value, call) in (Kind.HOST, Kind.NUMPY)

    def _given_python_values(self, call: cst.Call) -> bool:
        """A method of an object (not a library's function, not a model or a step) given
        only Python values: it has no tensor of the step to queue work on."""
        ctx = self.ctx
        if type(call.func) is not cst.Attribute or not call.args or ctx.qname(call.func) is not None or ctx.loops.is_step_call(call):
            return False
        if ctx.functions.called(call, None) is not None:
            return False  # `self.log_and_step(loss.item())`: a method of ours may use the model it keeps
        receiver = call.func.value  # type: ignore[attr-defined]
        if ctx.values.kind(receiver, call) in (Kind.TENSOR, Kind.MODULE) or ctx.syncs.tensorish(receiver, call):
            return False  # `logits.argmax(-1)`: a kernel of its own
        return all(not arg.star and ctx.values.python_value(arg.value, call) for arg in call.args)


# Tensor methods that copy or read (the host waits for them) or ask for metadata: no queued work after them.
_COPIES_AND_READS = frozenset({"to", "cuda", "cpu", "item", "tolist", "numpy", "size", "dim", "numel", "type", "get_device"})


def _operands(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The operands of an operator that queues a kernel on a tensor: arithmetic, a comparison, a
    unary operator, an index by a tensor (a gather; a slice or an int index is a view)."""
    node_type = type(node)
    if node_type is cst.BinaryOperation:
        return [node.left, node.right]
    if node_type is cst.Comparison:
        return [node.left, *(target.comparator for target in node.comparisons)]
    if node_type is cst.UnaryOperation and type(node.operator) is not cst.Not:
        return [node.expression]
    if node_type is cst.Subscript:
        return [element.slice.value for element in node.slice if type(element.slice) is cst.Index]
    return []


def read_value(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The code of the value a read reads: ``loss`` for ``loss.item()``, ``t`` for ``int(t)``."""
    value = read_expression(node)
    return plain_code(ctx.module, value) if value is not None else None


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

