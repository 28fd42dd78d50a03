"""Syncs around a node in its step (a part of ``StepPositions``): whether it runs right after a sync
with no device work between, or right before an explicit synchronize; the calls that drain the
queue or leave it quiet, and the reads a sync waits for."""

from __future__ import annotations

import itertools
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.drained_ends import DrainedEnds
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.analysis.output_sizes import vocabulary_sized
from torchlint.analysis.positions import plain_code
from torchlint.analysis.step_drains import READS, DrainIndex, read_expression
from torchlint.analysis.sync_ops import SIZED_BY_VALUES, torch_op

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
# Tensor methods that copy or read (the host waits for them) or ask for metadata: no queued work after them.
COPIES_AND_READS = frozenset({"to", "cuda", "cpu", "item", "tolist", "numpy", "size", "dim", "numel", "type", "get_device"})


class StepSyncs(DrainedEnds):
    """The syncs before and after a node of one file's steps."""

    ctx: FileContext
    _drained: dict[tuple[int, str | None], bool]
    _quiet_calls: dict[int, bool]
    _call_facts: dict[tuple[int, str], bool]

    @cached_property
    def _drain_index(self) -> DrainIndex:
        return DrainIndex(self.ctx, self._drained_helper)  # the calls that may drain the queue, found once per file

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
            return self._noted_drain(node, None)  # `torch.zeros(b[-1].item() + 1).to(d)`: its own argument's read drained the queue
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
                    return self._noted_drain(node, call)  # (a read in a loop or a branch may not have run)
                if not self._quiet(call):
                    return False  # device work, or a call that may queue some, since
        return False

    def _noted_drain(self, node: cst.CSTNode, call: cst.Call | None) -> bool:
        """Note the call that drained the queue before ``node`` (None: a read in its own arguments), for
        ``drained_by_read``; True."""
        self.__dict__.setdefault("_drain_of", {})[id(node)] = call
        return True

    def drained_by_helper_in_pass(self, node: cst.CSTNode) -> bool:
        """Was the drain ``_after_sync`` found before ``node`` a call of a helper of this file that ends drained,
        in the same pass of ``node``'s innermost loop (its wait taken on every pass, as the first read's)?"""
        call = self.__dict__.get("_drain_of", {}).get(id(node))
        loops = self.ctx.loops
        return call is not None and self._drained_helper(call) and loops.statement_loop(call) is loops.statement_loop(node)

    def drained_by_read(self, node: cst.CSTNode) -> bool:
        """Was the drain ``_after_sync`` found before ``node`` a device read (not a synchronize, nor a blocking upload)?"""
        drains = self.__dict__.get("_drain_of", {})
        if id(node) not in drains:
            return False
        call = drains[id(node)]
        return call is None or read_value(self.ctx, call) is not None

    def _ran_before(self, node: cst.CSTNode, stop: cst.CSTNode | None):  # type: ignore[no-untyped-def]
        """The calls that ran before ``node``'s statement in its step, nearest first, level by
        level: (calls, whether they surely ran, the statement). The test of an ``if`` or
        ``while`` whose body holds it ran surely, last before the body (``if loss.item() > 100:
        print(loss.item())``: the print's read waits for nothing more)."""
        tree = self.ctx.tree
        for block, at in self._levels(node, stop):
            for statement in reversed(block.body[:at]):
                chosen = self.ctx.guards.cuda_branch(statement) if type(statement) is cst.If else None
                if chosen is not None:
                    # `elif device == "cuda": torch.cuda.synchronize()` (llm.c): the block a run on the GPU
                    # takes surely ran there; the other blocks (`torch.mps.synchronize()`) never do
                    for inner in reversed(chosen.body):
                        yield self._finish_order(inner), type(inner) is cst.SimpleStatementLine, inner
                    continue
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
        if type(statement) not in (cst.SimpleStatementLine, cst.SimpleStatementSuite):
            return False  # a compound statement's calls decide (its operators are not asked: a branch may not run)
        known: dict[int, bool] = self.__dict__.setdefault("_arithmetic", {})  # each statement asked by every read after it
        if id(statement) not in known:
            known[id(statement)] = self._queues_an_operator(statement)
        return known[id(statement)]

    def _queues_an_operator(self, statement: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> bool:
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
            if any(ctx.syncs.device_tensor(operand, node) for operand in operands_of(node)) \
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
        if self._drained_helper(call):
            return True  # a helper of this file whose run ends in a sync or a read (`x = out.cpu()` its last line)
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
        if type(receiver) is cst.Call and func.attr.value in ("to", "cuda") and vocabulary_sized(ctx, receiver):
            return True  # `torch.zeros(b, max_len, vocab_size).to(device)`: megabytes from pageable memory, after the queue
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
        only Python values or reads of device values: it has no tensor of the step to queue work on."""
        ctx = self.ctx
        if type(call.func) is not cst.Attribute or not call.args or ctx.qname(call.func) is not None or ctx.loops.is_step_call(call):
            return False
        if ctx.functions.called(call, None) is not None:
            return False  # `self.log_and_step(loss.item())`: a method of ours may use the model it keeps
        receiver = call.func.value  # type: ignore[attr-defined]
        if ctx.values.kind(receiver, call) in (Kind.TENSOR, Kind.MODULE) or ctx.syncs.tensorish(receiver, call):
            return False  # `logits.argmax(-1)`: a kernel of its own
        # (`env.step(action.cpu())`: a read handed over is a host value too, and waited for before the call)
        return all(not arg.star and (ctx.values.python_value(arg.value, call) or read_expression(arg.value) is not None) for arg in call.args)


def operands_of(node: cst.CSTNode) -> list[cst.BaseExpression]:
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
