"""Rare-branch guards: ``if step % 100 == 0:`` and ``if i == 0:`` do not run every step (the
shapes of the tests themselves: ``guard_shapes.py``).

``Guards`` is made of parts: what a parameter left at its default keeps from running
(``guard_defaults``), a branch no call of its function in the file takes (``guard_never_taken``),
branches that run a first time or a few times (``guard_passes``), an
optimizer step under a guard (``guard_steps``), and branches chosen once per run, by the
device, the platform, the torch version or a setting (``guard_choices``). This module holds
the rare guard itself: every-N tests, timers, early exits, error paths, and their words."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_choices import ChosenBranches
from torchlint.analysis.guard_defaults import ParameterDefaults
from torchlint.analysis.guard_distributed import DistributedOnly
from torchlint.analysis.guard_never_taken import NeverTaken
from torchlint.analysis.guard_passes import FirstPasses
from torchlint.analysis.guard_run_flags import RunFlags
from torchlint.analysis.cache_hits import CACHE_MISS_WORDS, grows_a_kept_cache, returned_hit
from torchlint.analysis.guard_sequence_ends import sequence_end_test
from torchlint.analysis.sequence_end_words import sequence_end_words
from torchlint.analysis.guard_shapes import (
    CLOCKS, TIMER_READS, TIMER_RESTARTS, TIMER_WORDS, WITHIN_A_STEP, assigned_targets, conjuncts, counts_steps, first_rare_exit,
    frequent_modulo, is_counter, is_rare_test, only_return, raises,
)
from torchlint.analysis.guard_sanity import only_after_a_nan, reports_bad_values
from torchlint.analysis.guard_steps import GuardedSteps
from torchlint.analysis.guard_switches import AssertedOff, SwitchedOff
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import FUNCTION_OR_CLASS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class Guards(ParameterDefaults, NeverTaken, SwitchedOff, AssertedOff, RunFlags, FirstPasses, GuardedSteps, ChosenBranches, DistributedOnly):
    """What the branches around a node say of how often it runs (see the module docstring)."""

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
            exit_ = first_rare_exit(self.ctx.tree, guard)
            return CACHE_MISS_WORDS if exit_ is not None and returned_hit(exit_) else ""
        if type(guard) not in (cst.If, cst.IfExp):
            return ""
        off_device = self.off_the_device(guard, self._branch_child(guard, node))  # type: ignore[arg-type]
        if off_device is not None:
            return off_device
        option = self.option_off(guard.test)  # type: ignore[attr-defined]
        if option is not None:
            return option
        if type(guard) is cst.IfExp:
            return ""
        if self.timed(guard):
            return TIMER_WORDS
        if (ended := sequence_end_test(guard.test, self.ctx.tree.descendants)) is not None:
            return sequence_end_words(ended)
        if self.while_exporting(guard.test):
            return "only while the model is exported or traced, in no step"
        if only_after_a_nan(self._named_test(guard.test, guard)):
            return "only after a NaN or an infinity appears (a check for bad values)"
        if reports_bad_values(guard):
            return "only when the check finds a bad value (a report under a sanity check)"
        if self._fills_its_key(guard, stop):
            return "once per key (a cache filled on its first use)"
        if grows_a_kept_cache(self.ctx.tree, guard):  # type: ignore[arg-type]
            return CACHE_MISS_WORDS
        return self._period_words(guard)

    def _branch_child(self, guard: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
        """The branch of ``guard`` (its body or its ``else``) that holds ``node``."""
        for branch in (getattr(guard, "body", None), getattr(guard, "orelse", None)):
            if branch is not None and (branch is node or self.ctx.tree.is_inside(node, branch)):
                return branch
        return None

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

    def step_guard(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> tuple[str, bool]:
        """The words of the guards that run ``node`` on some steps only, but not rarely (an every-2nd-step
        guard's, a multi-process-only guard's, a main-process guard's: ``Place.guard``), and whether one
        runs it only in a multi-process run (``Place.distributed_only``); both carried through the join."""
        distributed = self.distributed_words(node, stop)
        words = (self.frequent_words(node, stop), distributed, self.main_process_words(node, stop))
        return ", ".join(filter(None, words)), bool(distributed)

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
            if ancestor_type in (cst.If, cst.IfExp) and child is not ancestor.test \
                    and self.off_the_device(ancestor, child) is not None:  # type: ignore[arg-type]
                return ancestor  # `if x.device.type == "mps": x = x.cpu()`: never on the GPU the rules price
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
                or only_after_a_nan(self._named_test(branch.test, branch))  # `if out.isnan().any() | out.isinf().any(): n = out.isnan().sum().item()`
                or self.while_exporting(branch.test)  # `if torch.onnx.is_in_onnx_export(): count = count.cpu()`: while exporting
                or reports_bad_values(branch)  # `if torch.min(y) < -1.: print("min value is", torch.min(y))`
                or self._leaves_the_loop(branch, stop)  # `if step >= max_steps: save(model); break`: once, on the way out
                or ((self._rare_test(branch, stop) or self.option_off(branch.test) is not None) and not self._steps_optimizer(branch))
                or self.first_pass(branch, stop)
                or sequence_end_test(branch.test, self.ctx.tree.descendants) is not None  # `if (tok == eos_id).any():`: per finished sequence
                or grows_a_kept_cache(self.ctx.tree, branch))  # `if max_pos > self.weights.size(0): self.weights = ...`: once per larger size
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
            exits[id(block)] = first_rare_exit(self.ctx.tree, block)
        found = exits[id(block)]
        tree = self.ctx.tree
        return found is not None and found is not child and tree.index(found) < tree.index(child) and not self.exit_gates_the_step(block, found)

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
        # `is_saving_step = should_save_checkpoint(step, ...)`, then `if cfg.save_checkpoint and is_saving_step:`
        # (lerobot): each conjunct a name for the test it was assigned, as a whole test is
        parts = [self._named_test(p, branch) if p is not test else p for p in parts]
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

    def periodic_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """How often a recurring guard (a modulo of a counter, a wall-clock timer) lets ``node``
        run, where that guard is what makes it rare (``if step % 100 == 0: evaluate()``: "every
        100 steps (`step % 100`)"); "" for other rare branches and for code that is not rare."""
        guard = self._rare_guard(node, stop)
        if type(guard) is not cst.If or not self._periodic(guard):
            return ""  # a first pass, an error path, a last iteration: not run again and again
        return self.rare_words(node, stop) or "every N steps"

    def _named_test(self, test: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        """``g_regularize`` in ``g_regularize = i % every == 0; if g_regularize:``: the test a
        name was assigned (one plain assignment in scope), else ``test`` itself."""
        if type(test) is not cst.Name:
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
            if type(node) is not cst.Call:
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
        binding = self.ctx.bindings.reaching(name.value, at)
        if binding is not None and binding.kind == "param" and _fractional(binding.node):
            return False  # `top_p: float = 1.0`, then `if top_p < 1:`: a threshold the caller sets, the same on every call
        if self.ctx.values.kind(name, at) is Kind.HOST:
            return True
        value = getattr(binding, "value", None)
        if not isinstance(value, cst.BinaryOperation):
            return False
        return any(isinstance(n, cst.Name) and is_counter(n) for n in self.ctx.tree.descendants(value))

    def conditional(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under any ``if`` (body or else) between it and ``stop``?"""
        return bool(self.conditions(node, stop))


def _fractional(param: cst.CSTNode) -> bool:
    """A parameter given a float default or a ``float`` annotation (``top_p: float = 1.0``,
    ``threshold=0.5``): a setting, not a count of steps."""
    if type(param) is not cst.Param:
        return False
    annotation = param.annotation.annotation if param.annotation is not None else None
    return type(param.default) is cst.Float or type(annotation) is cst.Name and annotation.value == "float"
