"""Where a node sits in its step (``Places.position``): right after a sync, before more
device work, at the step's end, right before an explicit synchronize. A mixin of
:class:`~torchlint.analysis.places.Places`, which holds its caches; the impact model weighs a
single read by it (one the rest of the step's kernels wait behind costs a refill, one right
after a sync almost nothing). The syncs around a node are its part ``step_syncs.py``."""

from __future__ import annotations

import itertools

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import generation_before, runs_generate
from torchlint.analysis.guard_shapes import CLOCKS, TIMER_READS
from torchlint.analysis.kinds import Kind
from torchlint.analysis.multiplicity import ENV_STEP, Position, Where
from torchlint.analysis.names import canonical
from torchlint.analysis.step_evaluations import StepEvaluations
from torchlint.analysis.step_reads import StepReads
from torchlint.analysis.step_syncs import StepSyncs, read_value
from torchlint.analysis.step_work import StepWork
from torchlint.analysis.subtree_calls import OWN
from torchlint.analysis.token_reads import holds_token_read, precedes_token_read, token_read

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class StepPositions(StepReads, StepSyncs, StepEvaluations, StepWork):
    """Where in the step: the position half of ``ctx.places``."""

    ctx: FileContext
    _generations: dict[int, bool]
    _decoder_calls: dict[int, bool]
    _token_statements: dict[int, bool]

    def position(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> Position | None:
        """Where ``node`` sits in the step that ``stop`` (the hot loop, else the function)
        runs: right after a sync, before more device work, or at the end. None when that
        depends on the caller (nothing follows it in its function, which is no ``forward``)."""
        if stop is not None and self.ctx.tree.statement_of(node) is stop:
            return Position.MID_STEP  # a `while` loop's test: the body's work follows it
        if type(node) is cst.Call and self.ctx.method_name(node) == "empty_cache":
            return Position.MID_STEP  # what it costs is the next step's allocations, made again: always after it
        if stop is not None and read_value(self.ctx, node) is not None:
            # A sampled token read for the loop's next step (one read per token is the floor), and the
            # reads before it on its path, each an extra wait per token (whatever drained the queue before them).
            if token_read(self.ctx, node):
                return Position.AFTER_SYNC if self._after_sync(node, stop) else Position.TOKEN_READ
            if precedes_token_read(self.ctx, self._statements_around(node, stop, after=True), self._holds_token_read):
                return Position.EXTRA_READ
        if type(node) is cst.Call and self._plain_sync(node) and stop is not None and type(stop) is not cst.FunctionDef \
                and self.ctx.loops.where(stop) is not Where.TRAIN and self._clock_next(node):
            # `torch.cuda.synchronize()` then `elapsed = time.time() - start` in a benchmark's loop: a timing's own wait
            # (in a training loop it still costs every step its refill: the step's tier there)
            return Position.TIMED
        after_sync = self._after_sync(node, stop)
        if (not after_sync or self._in_a_repeated_pass(node, stop)) and self._after_read(node, stop):
            # the pass's first read waited for the queue, this one for its own small kernels, however often the pass
            # repeats (a read after a sync outside its loop waits again on each pass: `AFTER_SYNC` keeps the repetition)
            return Position.AFTER_READ
        if after_sync and type(stop) is cst.FunctionDef and not self._in_a_repeated_pass(node, stop) \
                and type(node) is cst.Call and self.ctx.method_name(node) in ("item", "tolist") and self.drained_by_read(node):
            # A read after another read of the function's own pass with only host work between: wherever its callers
            # repeat the call (rl_games' `update_lr()` per mini-epoch), the first read repeats with it and pays the wait.
            return Position.AFTER_READ
        if after_sync and self._in_a_repeated_pass(node, stop) and self.drained_by_helper_in_pass(node):
            return Position.AFTER_READ  # PlaNet's `act(...)` ending in `env.step(action.cpu())`, then `action.cpu()` in the same pass
        if after_sync or self.helper_after_sync(node, stop):
            return Position.AFTER_SYNC
        if read_value(self.ctx, node) is not None and self._before_sync(node, stop):
            return Position.BEFORE_SYNC  # `loss.item()` then `torch.cuda.synchronize()` for a timer: the sync waits anyway
        if self._after_generation(node, stop):
            return Position.AFTER_DECODE  # the generation's result, read once per sequence: its tokens' waits dwarf it
        turn = self._turning_loop(node, stop) if type(node) is cst.Call and self._plain_sync(node) else None
        if turn is not None:
            # A timer's synchronize, across the turn of the loop that repeats it: the previous
            # iteration ended with a sync (k-diffusion's start-of-step sync after its end-of-step
            # one), or the next wait is a read with only small ops before it (a decode demo's
            # per-token sync, then the next token's `.item()`): it adds no wait of its own.
            if self._fresh(node, turn) and self._drained_at_turn(node, turn):
                return Position.AFTER_SYNC
            if self._read_next(node, turn):
                return Position.BEFORE_READ
        # Nothing of this step queued before it (`_fresh`): it waits only for the previous
        # step's tail, like a read at the step's end. Each kind of stop asks only what
        # decides its answer (both questions walk the statements around `node`).
        if stop is None:  # module-level code outside any loop
            return Position.MID_STEP if self._work_after(node, stop) else None
        if type(stop) is not cst.FunctionDef:  # a loop: its step starts with its iteration
            if not self.ctx.loops.decodes(stop) and self._decoding_after(node, stop):
                return Position.BEFORE_DECODE  # bark's window prompt, uploaded before the window's token loop
            if self._fresh(node, stop):
                return Position.AFTER_LAST_READ if self._after_last_read(node, stop) else Position.STEP_START
            if self.ctx.loops.where(stop) is Where.TRAIN and self._evaluation_next(node, stop):
                return Position.BEFORE_EVAL  # ogb's full-batch `loss = train(...)`, then `result = test(...)`: its read waits anyway
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
        if self._decoding_after(node, stop):
            # fairseq's `torch.arange(bsz).to(device)` after some work, before its beam search: one wait among many;
            # so is DALLE's `torch.tensor([[0]]).cuda()` on the first line of `generate_texts`, before its token loop
            # (whatever its caller queued before the call, the function's call is one generation, not one token)
            return Position.BEFORE_DECODE
        if self._work_after(node, stop):
            return Position.MID_STEP
        # after the function's own work: where its call ends, not the step's start
        return None if self._fresh(node, stop) else Position.CALL_END

    def _after_generation(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Does a whole generation run before ``node`` in its step, ``node`` outside it: a decode
        loop of its function before it (``translate_sentence``'s ``.tolist()`` of the best beam
        after its beam search), or, in a loop over sequences, a statement before it in the
        iteration that runs one (a decode loop nested there, ``.generate(...)``, a function of
        this file that decodes: llama2.c's ``y = model.generate(x, n)`` then ``y[0].tolist()``)?
        It runs once per generated sequence, however many tokens that decoded."""
        if stop is None:
            return False
        loops = self.ctx.loops
        if type(stop) is cst.FunctionDef:
            return generation_before(self.ctx, node) is not None or self._after_called_generation(node, stop)
        if any(type(loop) in (cst.For, cst.While) and loop is not stop and self.ctx.tree.is_inside(loop, stop)
               for loop in loops.enclosing_loops(node)):
            return False  # in a loop of its own inside the iteration (a per-token read after a prefill loop): not once per sequence
        if loops.decodes(stop) or loops.where(stop) is Where.TRAIN:
            # in the token loop itself (a statement after a nested loop there still runs per token); or a training
            # loop, whose iteration after its rollout (cleanrl's PPO) is an update, not a generation read back
            return False
        return any(self._runs_a_generation(statement) for statement in self._statements_around(node, stop, after=False))

    def helper_after_sync(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is ``node`` a call of a helper (no read, no sync, no model itself) that an explicit synchronize
        surely ran before in its step, only small ops between (ConvNeXt's ``torch.cuda.synchronize()``, then
        ``class_acc = (output.max(-1)[-1] == targets).float().mean()``, then ``metric_logger.update(class_acc=class_acc)``,
        whose ``MetricLogger.update`` in another file reads it)? A read on the helper's first lines waits
        for those small kernels only: the sync carries the step's wait (``_read_next`` counts no such helper)."""
        tree = self.ctx.tree
        if not tree.names_valued("synchronize"):
            return False  # (no explicit synchronize in the file, nor a helper of it or a name bound to one: most files)
        if type(node) is not cst.Call or read_value(self.ctx, node) is not None or self._explicit_sync(node) \
                or self._may_queue(node) or tree.statement_of(node) is None:
            return False  # (a read or a sync is placed by its own walk; a model's call queues its forward)
        if any(type(n) is cst.Call and n is not node and self._heavy(n) for n in tree.descendants(node)):
            return False  # `log(model(x))`: its argument's work comes after the sync
        start = tree.index(node)
        own = [n for n in self._finish_order(tree.statement_of(node)) if tree.index(n) < start and not tree.is_inside(node, n)]
        for calls, surely_ran, statement in itertools.chain([(own, True, None)], self._ran_before(node, stop)):
            for call in calls:
                if self._explicit_sync(call):
                    return surely_ran or statement is not None and self.ctx.guards.device_only(call, stop=stop)
                if not self._quiet(call) and not self._small_op(call):
                    return False  # a model, a helper, a heavy op or another object's method (`ema.update(model)`) since
            if type(statement) in (cst.For, cst.While) or statement is not None and any(type(n) in (cst.For, cst.While) for n in tree.descendants(statement)):
                if not all(self._quiet(call) for call in self._own_calls(statement, into_loops=True)):
                    return False  # a loop of device work since (small ops add up; its calls are not in `calls`)
        return False

    def _small_op(self, call: cst.Call) -> bool:
        """A torch op or a tensor's method that is no heavy op (``out.argmax(-1)``, ``(pred == y).float().mean()``)."""
        ctx, func = self.ctx, call.func
        if self._heavy(call):
            return False
        if (ctx.qname(func) or "").startswith("torch."):
            return True
        return type(func) is cst.Attribute and (ctx.values.kind(func.value, call) is Kind.TENSOR or ctx.syncs.tensorish(func.value, call))

    def _after_last_read(self, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
        """Is ``node``, nothing of its pass queued before it, preceded across the loop's turn by a read
        (or a synchronize) that ends every pass, only host work after it (ogb's ``total_loss += loss.item() * n``, then the
        loader's next batch, then ``pos_train_edge[perm]``)? That read drained the queue: ``node`` waits
        for its own copy only (the read at the end pays the pass's wait, and keeps its tier)."""
        if type(stop) not in (cst.For, cst.While) or self.ctx.tree.holds(stop.body, cst.Continue):
            return False  # (a `continue` may skip the end's read: that pass leaves its work queued)
        if self.ctx.loops.where(stop) is Where.INFER or self.ctx.loops.decodes(stop):
            return False  # a decoded token's step is short and latency-bound: its copy's own wait is a real share of it
        if type(stop) is cst.While and not all(self._quiet(call) for call in self._own_calls(stop.test, into_loops=False)):
            return False  # `while model(x).sum() > 0:` queues work at the turn
        own = self._levels(node, stop)[-1:]
        if not own or own[0][0] is not stop.body:
            return False
        for statement in reversed(stop.body.body[own[0][1] + 1:]):
            if self._tensor_arithmetic(statement) or type(statement) is not cst.SimpleStatementLine and self.device_operators(statement):
                return False  # `ema_p.data = 0.99 * ema_p.data + ...` after the read: a kernel queued since
            for call in self._turn_calls(statement, stop):
                if type(statement) is cst.SimpleStatementLine and read_value(self.ctx, call) is not None \
                        or self._plain_sync(call) and self._surely_runs(call, statement, stop):
                    return True
                if not self._quiet(call):
                    return False  # device work after it, or a call that may queue some (`ema.update(model)`)
        return False

    def _holds_token_read(self, statement: cst.CSTNode) -> bool:
        """Does ``statement`` hold a token read? Every read before it in its step asks: answered once."""
        known = self._token_statements.get(id(statement))
        if known is None:
            known = self._token_statements[id(statement)] = holds_token_read(self.ctx, statement)
        return known

    def _runs_a_generation(self, statement: cst.CSTNode) -> bool:
        """Does ``statement``, before a read in a loop over sequences, run a whole generation:
        a decode loop (not an environment's rollout), ``.generate(...)``, a function of this
        file that decodes? Every read after it asks of it: answered once per statement."""
        known = self._generations.get(id(statement))
        if known is None:
            loops = self.ctx.loops
            if type(statement) in (cst.For, cst.While):
                # (a loop of other work before it: its calls run per its own item, not once)
                known = loops.decodes(statement) and self.ctx.places.repeat_of(statement).kind != ENV_STEP  # (an environment's rollout is no generation)
            else:
                known = any(runs_generate(self.ctx, call) or loops.decodes_within(call) for call in loops.own_calls(statement, OWN))
            self._generations[id(statement)] = known
        return known

    def _after_called_generation(self, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
        """Does a statement before ``node``'s in ``function`` call a function of this file that decodes
        (whisper's ``DecodingTask.run``: ``self._main_loop(...)``, then the reads of its tokens), ``node``
        in no ``for``/``while`` of the function's own? It reads the generation's result, once per call."""
        loops = self.ctx.loops
        if any(type(loop) in (cst.For, cst.While) for loop in loops.enclosing_loops(node)):
            return False  # (a loop of its own after a prefill may be the token loop: not once per sequence)
        return any(type(statement) not in (cst.For, cst.While) and self._calls_a_decoder(statement)
                   for statement in self._statements_around(node, function, after=False))

    def _calls_a_decoder(self, statement: cst.CSTNode) -> bool:
        """Does ``statement`` (no loop) call a function of this file that decodes? Every read
        and site after it in its function asks: answered once per statement."""
        known = self._decoder_calls.get(id(statement))
        if known is None:
            loops = self.ctx.loops
            known = self._decoder_calls[id(statement)] = any(loops.decodes_within(call) for call in loops.own_calls(statement, OWN))
        return known

    def turn_of(self, node: cst.CSTNode) -> int:
        """The index of the statement holding ``node`` in the body of its innermost ``for``/``while``
        statement (same scope), -1 where none: what runs before it in the loop's iteration is the
        statements before that one (``CallSite.turn``)."""
        loop = self.ctx.loops.statement_loop(node)
        levels = self._levels(node, loop) if loop is not None else ()
        return levels[-1][1] if levels and levels[-1][0] is loop.body else -1  # type: ignore[union-attr]

    def _plain_sync(self, call: cst.Call) -> bool:
        """``torch.cuda.synchronize()`` or a name bound to it: not a helper that synchronizes
        somewhere in its body among other work (nanochat's ``bench_generate``), whose sync may
        not be its last wait."""
        return self.ctx.method_name(call) == "synchronize" or (self.ctx.aliased_qname(call) or "").endswith(".synchronize")

    def _clock_next(self, call: cst.Call) -> bool:
        """Is the statement right after ``call``'s (in its block) one that reads a clock:
        ``start = time.time()``, ``elapsed = time.perf_counter() - t0``, ``timer.elapsed()``?"""
        statement = self.ctx.tree.statement_of(call)
        block = self.ctx.tree.parent(statement) if statement is not None else None
        body = getattr(block, "body", None)
        if type(statement) is not cst.SimpleStatementLine or not isinstance(body, (list, tuple)) \
                or len(statement.body) != 1 or type(statement.body[0]) is not cst.Expr:
            return False  # (the sync's own line, alone: not `x = f(); torch.cuda.synchronize()`)
        at = next((i for i, s in enumerate(body) if s is statement), None)
        following = body[at + 1] if at is not None and at + 1 < len(body) else None
        if type(following) is not cst.SimpleStatementLine:
            return False
        calls = [n for n in self.ctx.tree.descendants(following) if type(n) is cst.Call]
        return any(canonical(self.ctx.qname(c.func)) in CLOCKS or type(c.func) is cst.Attribute
                   and c.func.attr.value in TIMER_READS and not c.args for c in calls)

    def _turning_loop(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> cst.For | cst.While | None:
        """The innermost ``for``/``while`` statement that repeats ``node`` within its step (``stop``
        itself, or a loop inside it), if any."""
        for loop in self.ctx.loops.enclosing_loops(node):
            if type(loop) in (cst.For, cst.While):
                return loop if stop is loop or stop is None or self.ctx.tree.is_inside(loop, stop) else None
        return None

    def _drained_at_turn(self, node: cst.CSTNode, stop: cst.For | cst.While) -> bool:
        """Did the loop's previous iteration end with an explicit synchronize or a read, only
        host work after it (the statements after ``node``'s in the loop's body, last first)?"""
        body = stop.body.body
        own = self._levels(node, stop)[-1:]  # the loop body's level: the statement holding `node` there
        if not own or own[0][0] is not stop.body:
            return False
        for statement in reversed(body[own[0][1] + 1:]):
            if self._tensor_arithmetic(statement):
                return False
            for call in self._turn_calls(statement, stop):
                if self._plain_sync(call) and self._surely_runs(call, statement, stop):
                    return True
                if type(statement) is cst.SimpleStatementLine and read_value(self.ctx, call) is not None:
                    return True  # a read at the step's end drained it too
                if self._may_queue(call) or self._device_op(call):
                    return False
        return False

    def _read_next(self, node: cst.CSTNode, stop: cst.For | cst.While) -> bool:
        """Is the next wait after ``node`` in the loop (its statement's rest, the statements
        after it, then the next iteration's first ones) a read, with only host work and small
        ops before it: no model, no helper that runs one, no other synchronize? A read right
        after it with only host work between is no such read: that read is the one after a
        sync (``low``), and this synchronize keeps the pair's one wait."""
        own = self._levels(node, stop)[-1:]
        if not own or own[0][0] is not stop.body:
            return False
        after = [(s, False) for s in self._statements_around(node, stop, after=True)] + [(s, True) for s in stop.body.body[:own[0][1]]]
        for statement, turned in after:
            for call in reversed(self._turn_calls(statement, stop)):  # the order Python starts them in
                if self._explicit_sync(call):
                    return False  # that sync carries the wait
                if type(statement) is cst.SimpleStatementLine:
                    if read_value(self.ctx, call) is not None:
                        return turned or not self._after_sync(call, stop)
                    if turned and self._reads_in_helper(call):
                        return True
                if self._may_queue(call):
                    return False
        return False

    def _turn_calls(self, statement: cst.CSTNode, stop: cst.CSTNode) -> list[cst.Call]:
        """The calls of ``statement`` that run on every iteration (not under a rare guard), last finished first."""
        guards = self.ctx.guards
        return [call for call in self._own_calls(statement, into_loops=True) if not guards.rare(call, stop=stop)]

    def _surely_runs(self, call: cst.Call, statement: cst.CSTNode, stop: cst.CSTNode) -> bool:
        """Does ``call`` run whenever ``statement`` does: a simple statement, or under ``if``s that
        only test for the device (``if device.type == 'cuda':``, true where the code is run for)?"""
        return type(statement) is cst.SimpleStatementLine or self.ctx.guards.device_only(call, stop=stop)

    def _reads_in_helper(self, call: cst.Call) -> bool:
        """A call of a function of this file that reads a device value and runs no model
        (a decode demo's ``sample_logits(out)``, ending in ``.item()``)."""
        ctx = self.ctx
        function = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
        if function is None or self._runs_a_model(call):
            return False
        return any(type(n) is cst.Call and read_value(ctx, n) is not None for n in ctx.loops.own_nodes(function.body))

    def _fresh(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Has the step queued no device work before ``node``? (A helper that synchronizes,
        dlrm's `time_wrap()`, queues nothing before its wait.)"""
        return (not self._runs_a_helper(node) or type(node) is cst.Call and self._synchronizes(node)) and not self._work_before(node, stop)

    def _decoding_after(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is the step's next device work after ``node`` a decode loop (a generation's tokens,
        each of which waits for the device)? A wait before it is one among the generation's many."""
        loops = self.ctx.loops
        if not loops.hot_decoding_anywhere():
            return False  # (no hot decode loop in the file: none after `node`, nor in a function it calls)
        for statement in self._statements_around(node, stop, after=True):
            if type(statement) in (cst.For, cst.While):
                if loops.decodes(statement) and loops.is_hot(statement):
                    return True
            elif self._calls_a_decoder(statement):
                return True  # a call of this file's function that decodes (whisper's `self._main_loop(audio_features, tokens)`)
            if self._queues_device_work(statement, stop):
                return False
        return False
