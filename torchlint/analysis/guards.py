"""Rare-branch guards: ``if step % 100 == 0:`` and ``if i == 0:`` do not run every step (the
shapes of the tests themselves: ``guard_shapes.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.devices import string_value
from torchlint.analysis.guard_defaults import ParameterDefaults
from torchlint.analysis.cache_hits import CACHE_MISS_WORDS, grows_a_kept_cache, returned_hit
from torchlint.analysis.guard_shapes import (
    AVAILABILITY, CLOCKS, COMPAT_ERRORS, DEVICE_FLAG, EXPORT_TESTS, KEEPS_OPTIMIZER, ON_BY_DEFAULT, PLATFORM_TESTS,
    TIMER_READS, TIMER_RESTARTS, TIMER_WORDS, WITHIN_A_STEP, after_returning_branch, assigned_targets, conjuncts,
    constant, counted_or_flagged, counts_steps, first_rare_exit, frequent_modulo, is_counter, is_main_guard, is_none, is_rare_test,
    mentions, mentions_device, mentions_version, none_tested, only_return, raises, reports_bad_values, target_of,
)
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import FUNCTION_OR_CLASS
from torchlint.analysis.values import looks_like_optimizer

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class Guards(ParameterDefaults):
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._statement_guards: dict[tuple[int, int], cst.CSTNode | None] = {}

    def conditions(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> list[cst.If]:
        """The ``if`` statements whose body (or else branch) holds ``node``, up to ``stop``."""
        found: list[cst.If] = []
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is stop or type(ancestor) in FUNCTION_OR_CLASS:
                break
            if type(ancestor) is cst.If and not self.ctx.tree.is_inside(node, ancestor.test):  # type: ignore[attr-defined]
                found.append(ancestor)
        return found

    def rare(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in the body of an ``if`` that runs every N steps or once, or in an
        ``except`` handler?"""
        return self._rare_guard(node, stop) is not None

    def rare_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """How often the guard that makes ``node`` rare lets it run, where it says more than
        "every N steps": a wall-clock timer's branch runs at most once per interval."""
        guard = self._rare_guard(node, stop)
        if type(guard) is cst.Assert:
            return "only when the assertion fails (its message is built then)"
        if type(guard) is cst.IndentedBlock:  # after an early exit: a cache's return on a hit, or a modulo's
            exit_ = first_rare_exit(guard)
            return CACHE_MISS_WORDS if exit_ is not None and returned_hit(exit_) else ""
        if type(guard) not in (cst.If, cst.IfExp):
            return ""
        option = self.option_off(guard.test)  # type: ignore[attr-defined]
        if option is not None:
            return option
        if type(guard) is cst.IfExp:
            return ""
        if self.timed(guard):
            return TIMER_WORDS
        if reports_bad_values(guard):
            return "only when the check finds a bad value (a report under a sanity check)"
        if self._fills_its_key(guard, stop):
            return "once per key (a cache filled on its first use)"
        if grows_a_kept_cache(guard):  # type: ignore[arg-type]
            return CACHE_MISS_WORDS
        return self._period_words(guard)

    def _period_words(self, branch: cst.If) -> str:
        """"every `policy_delay` steps (`timer % policy_delay`)" for a branch whose test counts
        steps with a modulo, whatever the branch is for (a delayed policy update, not only
        logging); "" for other rare branches (the place's own words: every N steps)."""
        tree, module = self.ctx.tree, self.ctx.module
        for node in (branch.test, *tree.descendants(branch.test)):
            if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo and not isinstance(node.left, cst.BaseString):
                divisor = node.right
                period = divisor.value if type(divisor) is cst.Integer else f"`{' '.join(plain_code(module, divisor).split())}`"
                return f"every {period} steps (`{' '.join(plain_code(module, node).split())}`)"
        return ""

    def frequent_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """How often an every-N guard whose N is known to be 2 or 3 lets ``node`` run: no rare
        guard (it runs on a half or a third of the steps, as good as every step for the tier),
        but the reason says so: "but only on every 2nd step (`if timer % policy_delay == 0:`,
        `policy_delay` is 2)". "" where no such guard holds it (a modulo on the index of a loop
        inside the step, ``for i in range(B): if i % 2 == 0:``, picks items, not steps)."""
        tree = self.ctx.tree
        for branch in self.conditions(node, stop):
            if not tree.is_inside(node, branch.body):
                continue
            found = frequent_modulo(branch.test, tree.descendants, lambda e, at=branch: self.ctx.constants.int_value(e, at))
            if found is None or self._counts_items(found[0], branch, stop):
                continue
            modulo, period = found
            divisor = plain_code(self.ctx.module, modulo.right)
            value = "" if type(modulo.right) is cst.Integer else f", `{divisor}` is {period}"
            return f"but only on every {period}{'nd' if period == 2 else 'rd'} step (`if {plain_code(self.ctx.module, branch.test)}:`{value})"
        return ""

    def _counts_items(self, modulo: cst.BinaryOperation, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Is the counter of ``modulo`` the variable of a loop between ``branch`` and ``stop``?"""
        tree = self.ctx.tree
        counters = {n.value for n in (modulo.left, *tree.descendants(modulo.left)) if type(n) is cst.Name}
        for ancestor in tree.ancestors(branch):
            if ancestor is stop or type(ancestor) in FUNCTION_OR_CLASS:
                break
            if type(ancestor) is cst.For and any(type(n) is cst.Name and n.value in counters for n in (ancestor.target, *tree.descendants(ancestor.target))):
                return True
        return False

    def _rare_guard(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> cst.CSTNode | None:
        """The ``if`` (or handler, or block with an early exit) that makes ``node`` rare."""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            # Exact types, not isinstance (libcst's ABCs make a failing one slow): this runs
            # for every ancestor of every call the step summary places.
            ancestor_type = type(ancestor)
            if ancestor is stop or ancestor_type in FUNCTION_OR_CLASS:
                return None
            if ancestor_type is cst.SimpleStatementLine:
                # Above a simple statement the answer is the statement's: asked of each of its
                # calls and names, it is found once per statement and stop.
                return self._statement_guard(ancestor, stop)
            if ancestor_type is cst.ExceptHandler or ancestor_type is cst.ExceptStarHandler:
                return ancestor  # runs when something failed: an error path, an OOM retry, the end of an iterator
            if ancestor_type is cst.Assert and child is ancestor.msg:  # type: ignore[attr-defined]
                return ancestor  # `assert ok, f"{x.cpu()}"`: the message is built only when the assertion fails
            if ancestor_type is cst.IndentedBlock and self._after_rare_exit(ancestor, child):  # type: ignore[arg-type]
                return ancestor
            if ancestor_type is cst.If and child is ancestor.body and self._rare_branch(ancestor, stop):  # type: ignore[arg-type]
                return ancestor
            if ancestor_type is cst.IfExp and child is ancestor.body:  # type: ignore[attr-defined]
                if self.option_off(ancestor.test) is not None:  # type: ignore[attr-defined]
                    return ancestor  # `loss.item() if args.debug else 0`: read only when the run turns it on
                if is_rare_test(ancestor.test, tree.descendants, period=lambda e: self.ctx.constants.int_value(e, ancestor)):
                    return ancestor
            child = ancestor
        return None

    def _statement_guard(self, statement: cst.SimpleStatementLine, stop: cst.CSTNode | None) -> cst.CSTNode | None:
        """:meth:`_rare_guard` of ``statement``, remembered per statement and stop."""
        key = (id(statement), id(stop))
        if key not in self._statement_guards:
            self._statement_guards[key] = self._rare_guard(statement, stop)
        return self._statement_guards[key]

    def _rare_branch(self, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Does the body of ``branch`` run rarely per step of ``stop``? Asked for every call
        under it (each of the step summary's call sites): answered once per branch and stop."""
        known: dict[tuple[int, int], bool] = self.__dict__.setdefault("_rare_branches", {})
        key = (id(branch), id(stop))
        rare = known.get(key)
        if rare is None:
            rare = known[key] = (
                raises(branch.body)  # `if bad.any(): raise ValueError(f"{bad.sum().item()}")`
                or reports_bad_values(branch)  # `if torch.min(y) < -1.: print("min value is", torch.min(y))`
                or self._leaves_the_loop(branch, stop)  # `if step >= max_steps: save(model); break`: once, on the way out
                or ((self._rare_test(branch, stop) or self.option_off(branch.test) is not None) and not self._steps_optimizer(branch))
                or self.first_pass(branch, stop)
                or grows_a_kept_cache(branch))  # `if max_pos > self.weights.size(0): self.weights = ...`: once per larger size
        return rare

    def _leaves_the_loop(self, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Does the branch end by leaving the loop around it (``break`` out of ``stop`` or the
        innermost loop, ``return`` out of any)? Its body runs once per loop, not per step."""
        body = branch.body.body if type(branch.body) is cst.IndentedBlock else ()
        last = body[-1] if body else None
        if type(last) is not cst.SimpleStatementLine:
            return False
        ends = {type(s) for s in last.body}
        for ancestor in self.ctx.tree.ancestors(branch):
            if type(ancestor) in FUNCTION_OR_CLASS:
                return False
            if type(ancestor) in (cst.For, cst.While):
                return cst.Return in ends or (cst.Break in ends and (stop is None or ancestor is stop or type(stop) is cst.FunctionDef))
            if ancestor is stop:
                return False
        return False

    def _after_rare_exit(self, block: cst.IndentedBlock, child: cst.CSTNode) -> bool:
        """Is ``child`` preceded in ``block`` by an early exit that only lets rare steps
        past? Each block is scanned once (per statement, N statements cost N², not N)."""
        exits: dict[int, cst.CSTNode | None] = self.__dict__.setdefault("_rare_exits", {})
        if id(block) not in exits:
            exits[id(block)] = first_rare_exit(block)
        found = exits[id(block)]
        tree = self.ctx.tree
        return found is not None and found is not child and tree.index(found) < tree.index(child)

    def accumulates_gradients(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` step its optimizer only in a modulo branch (``if (i + 1) % N == 0:
        opt.step()``) while its backward runs on every iteration: gradient accumulation?"""
        tree = self.ctx.tree
        steps = [n for n in tree.descendants(loop) if self._optimizer_step(n)]
        if not steps:
            return False
        for step in steps:
            branch = next((a for a in tree.ancestors(step) if type(a) is cst.If or a is loop), loop)
            if branch is loop or not self._rare_test(branch, loop) or not self._steps_optimizer(branch):  # type: ignore[arg-type]
                return False
        return True

    def rare_test(self, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Is the branch's own test rare per step (``if step % 16 == 0 and done.all():``)?"""
        return self._rare_test(branch, stop)

    def _rare_test(self, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Is the branch's test rare *per step*? A modulo on an inner loop's own index
        (``for i in range(B): if i % G == 0:``) is rare per item, not per step."""
        tree = self.ctx.tree
        test = self._named_test(branch.test, branch)
        # `shown = 0` each step, then `if shown < 3:` in a loop within it: a few times per step, every step
        parts = [p for p in conjuncts(test) if not self._counted_each_step(p, branch, stop)]
        if not any(is_rare_test(p, tree.descendants, lambda e: self._derived_counter(e, branch), lambda e: self.ctx.constants.int_value(e, branch))
                   or self._calls_rare_predicate(p) or self._timed(p, branch)
                   for p in parts):
            return False
        loops = []
        for ancestor in tree.ancestors(branch):
            if ancestor is stop or type(ancestor) in FUNCTION_OR_CLASS:
                break
            if type(ancestor) is cst.For:
                loops.append(ancestor)
        if type(stop) not in (cst.For, cst.While):
            # No hot loop stops the walk: the join picks the step among these loops later. A
            # loop that counts steps or epochs (`for step in range(max_steps): if step %
            # save_every == 0:`) is that step or outside it, unless it goes over what a step
            # holds (batch rows, beams, parameters): a modulo on its counter is rare.
            loops = [loop for loop in loops if not counts_steps(loop) or self.ctx.places.repeat_of(loop).kind in WITHIN_A_STEP]
        inner = {n.value for loop in loops for n in (loop.target, *tree.descendants(loop.target)) if isinstance(n, cst.Name)}
        return not inner or not any(isinstance(n, cst.Name) and n.value in inner for n in tree.descendants(branch.test))

    def timed(self, branch: cst.If) -> bool:
        """Is ``branch`` a wall-clock timer's: a conjunct of its test holds once a timer's
        reading passes a bound (``time.time() - last > interval``, ``timer.elapsed() >=
        every_seconds``, a name bound to such a reading), and the body starts that timer
        again (``last = time.time()``, ``timer.reset()``)? It runs at most once every few
        seconds, whatever the step's length."""
        test = self._named_test(branch.test, branch)
        return any(self._timed(part, branch) for part in conjuncts(test))

    def _timed(self, test: cst.BaseExpression, branch: cst.If) -> bool:
        if type(test) is not cst.Comparison or len(test.comparisons) != 1:
            return False
        operator, bound = test.comparisons[0].operator, test.comparisons[0].comparator
        if type(operator) in (cst.GreaterThan, cst.GreaterThanEqual):
            reading = test.left  # `elapsed > interval`: past the bound, once per interval
        elif type(operator) in (cst.LessThan, cst.LessThanEqual):
            reading = bound  # `interval < elapsed`
        else:
            return False  # `elapsed < budget` holds on every step until the budget is spent
        timers = self._clock_owners(reading, branch)
        if timers is None:
            return False
        # Restarted in the body: without that (`if time.time() - start > warmup_s:`) the
        # branch holds on every step once the bound is passed.
        for node in self.ctx.tree.descendants(branch.body):
            if type(node) in (cst.Assign, cst.AugAssign) and any(dotted(t) in timers for t in assigned_targets(node)):
                return True
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in TIMER_RESTARTS \
                    and dotted(node.func.value) in timers:
                return True
        return False

    def _clock_owners(self, reading: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> set[str] | None:
        """The names a clock reading is made from (``last`` in ``time.time() - last``,
        ``timer`` in ``timer.elapsed()``), or None when ``reading`` reads no clock. A name
        bound once to such a reading (``eval_delta = gather(timer.elapsed())``) is followed."""
        ctx = self.ctx
        nodes = (reading, *ctx.tree.descendants(reading))
        calls = [n for n in nodes if type(n) is cst.Call]
        clocks = [c for c in calls if ctx.qname(c.func) in CLOCKS
                  or type(c.func) is cst.Attribute and c.func.attr.value in TIMER_READS and not c.args]
        owners = {dotted(n) for n in nodes if type(n) in (cst.Name, cst.Attribute) and dotted(n) is not None and ctx.qname(n) is None}
        if clocks:
            return owners | {dotted(c.func.value) for c in clocks if type(c.func) is cst.Attribute and ctx.qname(c.func) is None}  # type: ignore[attr-defined]
        if type(reading) is cst.Name and depth < 2:
            binding = ctx.bindings.reaching(reading.value, at)
            if binding is not None and binding.kind == "assign" and binding.element is None and binding.value is not None:
                found = self._clock_owners(binding.value, binding.node, depth + 1)
                return None if found is None else found | {reading.value}
        return None

    def _steps_optimizer(self, branch: cst.If) -> bool:
        """Does the branch hold its loop's only optimizer steps (``if (i + 1) % accumulate
        == 0: opt.step()``, or, every N iterations, a whole training step of this file:
        Rainbow's ``if T % replay_frequency == 0: dqn.learn(mem)``)? Then it is the optimizer
        step of gradient accumulation, or the training step itself, every step, not a rare one. A loop or
        function that also steps outside it (lazy regularization every N steps, after the
        step of every batch; TD3's delayed policy update, `if timer % policy_delay == 0:
        pi_optimizer.step()`, after the critic's step in the same `update()`) keeps the branch rare."""
        tree = self.ctx.tree
        trainer = self.ctx.loops._calls_a_trainer
        if not any(self._optimizer_step(n) for n in tree.descendants(branch.body)) \
                and not (self._periodic(branch) and any(type(n) is cst.Call and trainer(n) for n in tree.descendants(branch.body))):
            return False
        return not self._steps_outside(branch)

    def _periodic(self, branch: cst.If) -> bool:
        """Does ``branch`` recur through the run: a modulo of a counter, or a wall-clock timer?"""
        return bool(self._period_words(branch)) or self.timed(branch)

    def _steps_outside(self, branch: cst.If) -> bool:
        """Does the loop (or function) around ``branch`` make an optimizer step outside it, or
        call a function of this file that makes a training step?"""
        tree = self.ctx.tree
        scope = next((a for a in tree.ancestors(branch) if type(a) in (cst.For, cst.While) or type(a) in FUNCTION_OR_CLASS), None)
        if scope is None or type(scope) is cst.ClassDef:
            return False
        trainer = self.ctx.loops._calls_a_trainer
        return any((self._optimizer_step(n) or type(n) is cst.Call and trainer(n)) and not tree.is_inside(n, branch) for n in tree.descendants(scope.body))

    def periodic_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """How often a recurring guard (a modulo of a counter, a wall-clock timer) lets ``node``
        run, where that guard is what makes it rare (``if step % 100 == 0: evaluate()``: "every
        100 steps (`step % 100`)"); "" for other rare branches and for code that is not rare."""
        guard = self._rare_guard(node, stop)
        if type(guard) is not cst.If or not self._periodic(guard):
            return ""  # a first pass, an error path, a last iteration: not run again and again
        return self.rare_words(node, stop) or "every N steps"

    def may_guard_a_step(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` rare only by an every-N guard (a modulo or a timer) whose loop or
        function makes no optimizer step outside it? A call there may be the training step
        itself, made in another file (Rainbow's ``if T % replay_frequency == 0:
        dqn.learn(mem)``): the join follows it to a callee that trains, and no further."""
        guard = self._rare_guard(node, stop)
        if type(guard) is not cst.If or not self._periodic(guard):
            return False  # a first pass, an error path, a last iteration: no step run again and again
        return not self._steps_outside(guard)

    def _optimizer_step(self, node: cst.CSTNode) -> bool:
        """``opt.step()``, or a call handed the optimizer (``apply_update(optimizer, loss)``,
        ``scaler.step(opt)``): the step may be made in a helper of another module."""
        if type(node) is not cst.Call:
            return False
        if type(node.func) is cst.Attribute and node.func.attr.value == "step" and self.ctx.loops.is_step_call(node):
            return True
        name = (dotted(node.func) or "").rsplit(".", 1)[-1].lower()
        if any(word in name for word in KEEPS_OPTIMIZER):
            return False  # `save_checkpoint(model, optimizer)` stores it, never steps it
        return any(looks_like_optimizer(dotted(arg.value) or "") for arg in node.args)

    def _named_test(self, test: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        """``g_regularize`` in ``g_regularize = i % every == 0; if g_regularize:``: the test a
        name was assigned (one plain assignment in scope), else ``test`` itself."""
        if not isinstance(test, cst.Name):
            return test
        bound = self.ctx.bindings.lookup(test.value, at)
        if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None and bound[0].value is not None:
            return bound[0].value
        return test

    def _calls_rare_predicate(self, test: cst.BaseExpression) -> bool:
        """``if divisible_by(step, 1000):``: a function of this file that only returns a
        rare test of its parameters (``return numer % denom == 0``)."""
        ctx = self.ctx
        for node in (test, *ctx.tree.descendants(test)):
            if not isinstance(node, cst.Call):
                continue
            function = ctx.functions.called(node, ctx.qname(node.func))
            if function is None:
                continue
            returned = only_return(function)
            if returned is not None and is_rare_test(returned, ctx.tree.descendants):
                return True
            if self._true_only_when_rare(function):
                return True
        return False

    def _true_only_when_rare(self, function: cst.FunctionDef) -> bool:
        """``def check_frequency(self, i): if i % self.every == 0: ...; return True``
        then ``return False``: every ``return True`` sits under a rare test."""
        tree = self.ctx.tree
        returns = [n for n in tree.descendants(function) if isinstance(n, cst.Return) and tree.enclosing_function(n) is function]
        trues = [r for r in returns if isinstance(r.value, cst.Name) and r.value.value == "True"]
        if not trues or any(not (isinstance(r.value, cst.Name) and r.value.value in ("True", "False")) for r in returns):
            return False
        return all(
            any(is_rare_test(branch.test, tree.descendants) for branch in self.conditions(r) if tree.is_inside(r, branch.body))
            for r in trues
        )

    def _derived_counter(self, name: cst.Name, at: cst.CSTNode) -> bool:
        """A Python int, or a name computed from a step counter: ``ni = i + nb * epoch``."""
        if self.ctx.values.kind(name, at) is Kind.HOST:
            return True
        binding = self.ctx.bindings.reaching(name.value, at)
        value = getattr(binding, "value", None)
        if not isinstance(value, cst.BinaryOperation):
            return False
        return any(isinstance(n, cst.Name) and is_counter(n) for n in self.ctx.tree.descendants(value))

    def first_pass(self, branch: cst.If, stop: cst.CSTNode | None = None) -> bool:
        """``if preds is None: preds = x.cpu()``: the body binds the tested name, so it runs
        once (its ``else`` runs on every later step), unless ``stop`` (the loop) binds the
        name again each step to something that may be None (``preds = None``, ``cache.get(k)``)."""
        name = none_tested(branch.test)
        if name is None:
            return self.first_times(branch, stop) or self._fills_its_key(branch, stop)
        tree = self.ctx.tree
        bindings = self.ctx.bindings.lookup(name, branch)
        if not any(b.kind == "assign" and tree.is_inside(b.node, branch.body) for b in bindings):
            return False  # the body does not fill the name in: it may run again
        for binding in bindings:
            if stop is None or not tree.is_inside(binding.node, stop) or tree.is_inside(binding.node, branch):
                continue
            if binding.kind != "augassign" and not mentions(binding.value, name, tree.descendants):
                return False  # not `preds = torch.cat([preds, p])`: may be None again next step
        return True

    def _fills_its_key(self, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """``if key not in mel_basis: mel_basis[key] = torch.from_numpy(m).to(y.device)``: a
        cache filled once per key (vits), unless ``stop`` (the loop) empties it each step."""
        test = branch.test
        if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.NotIn:
            return False
        key, cache = test.left, dotted(test.comparisons[0].comparator)
        if cache is None:
            return False
        module = self.ctx.module
        filled = any(type(target) is cst.Subscript and dotted(target.value) == cache and len(target.slice) == 1
                     and plain_code(module, target.slice[0]).strip() == plain_code(module, key).strip()
                     for node in self.ctx.tree.descendants(branch.body) if type(node) is cst.Assign for target in assigned_targets(node))
        if not filled:
            return False
        tree = self.ctx.tree
        return stop is None or not any(b.kind == "assign" and tree.is_inside(b.node, stop) and not tree.is_inside(b.node, branch)
                                       for b in self.ctx.bindings.lookup(cache, branch))

    def first_times(self, branch: cst.If, stop: cst.CSTNode | None = None) -> bool:
        """``if shown < 3: ...; shown += 1`` and ``if not printed: ...; printed = True`` (also
        one side of an ``and``): the body moves the tested counter or flag toward the end of
        its test, so the branch runs a fixed few times per run, unless ``stop`` (the loop)
        sets the name back each step."""
        for part in conjuncts(branch.test):
            found = counted_or_flagged(part)
            if found is None:
                continue
            if self._moved_in(found, branch) and not self._set_back(found[0], branch, stop):
                return True
        return False

    def _counted_each_step(self, test: cst.BaseExpression, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """``shown < 3`` where the step sets ``shown`` back (``shown = 0``) before counting."""
        found = counted_or_flagged(test)
        return found is not None and type(test) is cst.Comparison and self._moved_in(found, branch) and self._set_back(found[0], branch, stop)

    def _moved_in(self, found: tuple[str, Callable[[cst.CSTNode], bool]], branch: cst.If) -> bool:
        name, moves = found
        return any(moves(n) and dotted(target_of(n)) == name for n in self.ctx.tree.descendants(branch.body))

    def _set_back(self, name: str, branch: cst.If, stop: cst.CSTNode | None) -> bool:
        """Is ``name`` set back to a constant (``shown = 0``, ``printed = False``) in the step
        (its hot loop, else ``stop``, else the function) outside ``branch``: a count kept per step?"""
        tree = self.ctx.tree
        scope = self.ctx.loops.local_hot_loop(branch) or stop or tree.enclosing_function(branch)
        if scope is None:
            return False
        return any(type(n) is cst.Assign and not tree.is_inside(n, branch) and constant(n.value)
                   and any(dotted(t) == name for t in assigned_targets(n)) for n in tree.descendants(scope))

    def default_branch(self, node: cst.CSTNode) -> tuple[cst.If, str] | None:
        """``if max_len is None: max_len = lengths.max().item()`` on a parameter that defaults
        to None, with no loop between: the branch (and the parameter) whose code runs only
        when a caller leaves that parameter out."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(node)
        if function is None:
            return None
        memo: dict[int, frozenset[str]] = self.__dict__.setdefault("_none_defaults", {})
        defaults = memo.get(id(function))
        if defaults is None:
            params = (*function.params.params, *function.params.kwonly_params)
            defaults = memo[id(function)] = frozenset(p.name.value for p in params if p.default is not None and is_none(p.default))
        if not defaults:
            return None
        child = node
        for ancestor in ctx.tree.ancestors(node):
            if ancestor is function or type(ancestor) in (cst.For, cst.While):
                return None
            if type(ancestor) is cst.If and child is ancestor.body:
                name = none_tested(ancestor.test)
                if name in defaults:
                    return ancestor, name  # type: ignore[return-value]
            if type(ancestor) is cst.Else:  # `if p is not None: ... else: <here>`
                branch = ctx.tree.parent(ancestor)
                name = none_tested(branch.test, negated=True) if type(branch) is cst.If else None
                if name in defaults:
                    return branch, name  # type: ignore[return-value]
            if type(ancestor) is cst.IndentedBlock and ctx.tree.parent(ancestor) is function:
                returned = after_returning_branch(ancestor, child, defaults)
                if returned is not None:
                    return returned
            child = ancestor
        return None

    def tensor_if_passed(self, node: cst.CSTNode) -> bool:
        """``if isinstance(v, torch.Tensor): v = v.item()`` on a parameter (or an item of
        ``**kwargs``): the branch runs only when a caller passes a tensor."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(node)
        if function is None:
            return False
        params = {p.name.value for p in (*function.params.params, *function.params.posonly_params, *function.params.kwonly_params)}
        for star in (function.params.star_arg, function.params.star_kwarg):
            if isinstance(star, cst.Param):
                params.add(star.name.value)
        for branch in self.conditions(node):
            if not ctx.tree.is_inside(node, branch.body):
                continue
            name = self.tensor_tested(branch.test)
            if name is not None and mentions(node, name, ctx.tree.descendants) and self._from_parameters(name, branch, params):
                return True
        return False

    def tensor_tested(self, test: cst.BaseExpression) -> str | None:
        """``v`` for ``isinstance(v, torch.Tensor)`` (also in a tuple of types) and ``torch.is_tensor(v)``."""
        if not isinstance(test, cst.Call) or not test.args:
            return None
        func = self.ctx.qname(test.func) or dotted(test.func)
        subject = test.args[0].value
        if func == "torch.is_tensor":
            return dotted(subject)
        if func != "isinstance" or len(test.args) != 2:
            return None
        kinds = test.args[1].value
        types = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if any((self.ctx.qname(t) or "") in ("torch.Tensor", "torch.FloatTensor") for t in types):
            return dotted(subject)
        return None

    def _from_parameters(self, name: str, at: cst.CSTNode, params: set[str]) -> bool:
        """Is every binding of ``name`` a parameter, or a loop over one (``for k, v in kwargs.items()``)?"""
        # `v = v.item()` inside the branch is the conversion itself, not where v comes from
        bound = [b for b in self.ctx.bindings.lookup(name, at) if not self.ctx.tree.is_inside(b.node, at)]
        if name in params and all(b.kind == "param" for b in bound):
            return True
        return bool(bound) and all(
            b.kind in ("for", "comp") and b.value is not None
            and any(isinstance(n, cst.Name) and n.value in params for n in (b.value, *self.ctx.tree.descendants(b.value)))
            for b in bound
        )

    def device_branch(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch (``if``/``else``, ``a if t else b``) chosen by the device:
        ``if train_on_gpu:``, ``... if not use_cuda else ...``, ``if torch.cuda.is_available():``?"""
        return self._in_branch(node, lambda test: mentions_device(test, self.ctx.tree.descendants), stop=stop)

    def device_only(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under ``if`` statements (up to ``stop``) that only test for the device,
        in their bodies: ``if use_gpu:``, ``if args.cuda:``, ``if torch.cuda.is_available():``,
        ``if x.is_cuda:``, ``if device.type == "cuda":``? Such a test holds on every step of a
        run on the GPU: it says nothing of running the code rarely."""
        conditions = self.conditions(node, stop)
        return bool(conditions) and all(self.ctx.tree.is_inside(node, c.body) and self._device_test(c.test) for c in conditions)

    def _device_test(self, test: cst.BaseExpression) -> bool:
        if type(test) is cst.Call:
            return self.ctx.qname(test.func) in AVAILABILITY
        if type(test) in (cst.Name, cst.Attribute):
            return DEVICE_FLAG.fullmatch((dotted(test) or "").rsplit(".", 1)[-1].lower()) is not None
        if type(test) is cst.Comparison and len(test.comparisons) == 1:  # `device.type == "cuda"`, `device != "cpu"`
            operator, compared = type(test.comparisons[0].operator), (test.left, test.comparisons[0].comparator)
            wanted = {cst.Equal: "cuda", cst.NotEqual: "cpu"}.get(operator)
            return any(string_value(side) == wanted for side in compared) and any("device" in (dotted(side) or "") or (dotted(side) or "").endswith(".type") for side in compared)
        return False

    def platform_branch(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in a branch chosen by the operating system (``if sys.platform ==
        "win32":``, ``os.name == "nt"``, ``platform.system()``)? Code there serves a platform
        that lacks what the other branch uses (Windows has no NCCL) on purpose."""
        def by_platform(test: cst.BaseExpression) -> bool:
            return any(self.ctx.qname(n) in PLATFORM_TESTS for n in (test, *self.ctx.tree.descendants(test))
                       if isinstance(n, (cst.Attribute, cst.Name)))

        return self._in_branch(node, by_platform)

    def version_gated(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in a branch chosen by the torch version (``if is_torch_version(">=",
        "2.3"): new() else: old()``, ``torch.__version__``, ``TORCH_GREATER_EQUAL_2_3``)?
        Code there serves both old and new torch on purpose."""
        return self._in_branch(node, lambda test: mentions_version(test, self.ctx.tree.descendants)) or self._compat_fallback(node)

    def _compat_fallback(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in an ``except`` for an API a torch version lacks (``AttributeError``,
        ``TypeError``, ``ImportError``...), the fallback of a ``try`` that uses the new one?"""
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, cst.ExceptHandler) and ancestor.type is not None:
                caught = ancestor.type.elements if isinstance(ancestor.type, cst.Tuple) else [ancestor.type]
                names = {dotted(getattr(e, "value", e)) for e in caught}
                if names & COMPAT_ERRORS:
                    return True
        return False

    def export_only(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in the body of ``if torch.onnx.is_in_onnx_export():`` (or
        ``torch.jit.is_tracing()``/``is_scripting()``)? That code runs while a model is
        exported or traced, once, and is often written for the exporter on purpose."""
        ctx = self.ctx

        def exporting(test: cst.BaseExpression) -> bool:
            calls = (n for n in (test, *ctx.tree.descendants(test)) if isinstance(n, cst.Call))
            return any(ctx.qname(c.func) in EXPORT_TESTS for c in calls)

        return self._in_branch(node, exporting, body_only=True)

    def _in_branch(self, node: cst.CSTNode, chosen_by: Callable[[cst.BaseExpression], bool], *,
                   body_only: bool = False, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch of an ``if`` (or ``a if t else b``) of its function whose
        test ``chosen_by`` accepts: either branch, or only the body with ``body_only``?"""
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
                if (not body_only or child is ancestor.body) and chosen_by(ancestor.test):
                    return True
            child = ancestor
        return False

    def setting_off(self, test: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """Is ``test`` a setting that is off unless a caller turns it on: a parameter that
        defaults to False or None (``if ret_usages:``, also negated or in and/or), a flag
        whose default is off (``args.detect_anomaly``, a module constant), or a string
        compared (``if device.type == "xpu":``, a mode one setup picks)?"""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test = test.expression
        if type(test) is cst.BooleanOperation:
            return self.setting_off(test.left, function) or self.setting_off(test.right, function)
        if type(test) is cst.Comparison:
            operands = [test.left, *(c.comparator for c in test.comparisons)]
            return any(type(o) in (cst.SimpleString, cst.ConcatenatedString) for o in operands)
        if type(test) is cst.Name and function is not None:
            param = next((p for p in (*function.params.params, *function.params.kwonly_params) if p.name.value == test.value), None)
            if param is not None:
                default = param.default
                return type(default) is cst.Name and default.value in ("False", "None")
        if type(test) in (cst.Name, cst.Attribute):
            return self.ctx.constants.bool_value(test, test) is False
        return False

    def runs_when_reached(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Does ``node`` run whenever its function (or module, or ``stop``) runs? Under an
        ``if`` or a conditional expression it does not, nor in an ``except`` handler, unless
        the test holds wherever the code is meant to run (``__name__ == "__main__"``, ``if
        torch.cuda.is_available():``, a version test, a setting on by default such as ``if
        args.amp:`` with ``default=True``): a switch behind any other test (``if
        args.debug:``, a parameter) was put there to be chosen."""
        child: cst.CSTNode = node
        for ancestor in self.ctx.tree.ancestors(node):
            kind = type(ancestor)
            if ancestor is stop or kind in FUNCTION_OR_CLASS:
                return True
            if kind in (cst.ExceptHandler, cst.ExceptStarHandler):
                return False
            if kind in (cst.If, cst.IfExp) and child is not ancestor.test:  # type: ignore[attr-defined]
                if child is not ancestor.body or not self._on_by_default(ancestor.test):  # type: ignore[attr-defined]
                    return False
            child = ancestor
        return True

    def _on_by_default(self, test: cst.BaseExpression) -> bool:
        """A test that holds wherever the code is meant to run: the script's entry point, a
        setting known to be on, a check that the GPU or an API is there (``if
        torch.cuda.is_available():``, ``hasattr(torch.backends, "cudnn")``), a version test."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self._on_by_default(test.left), self._on_by_default(test.right)
            return left and right if isinstance(test.operator, cst.And) else left or right
        if is_main_guard(test) or mentions_version(test, self.ctx.tree.descendants):
            return True
        if isinstance(test, cst.Call) and (self.ctx.qname(test.func) in AVAILABILITY or dotted(test.func) == "hasattr"):
            return True
        if isinstance(test, cst.Attribute) and self.ctx.qname(test) in ON_BY_DEFAULT:
            return True  # `if torch.backends.cudnn.enabled:`: torch's own default
        return self.ctx.constants.bool_value(test, test) is True

    def conditional(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under any ``if`` (body or else) between it and ``stop``?"""
        return bool(self.conditions(node, stop))
