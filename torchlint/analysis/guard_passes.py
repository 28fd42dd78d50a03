"""Branches that run the first time or a fixed few times per run: ``if preds is None: preds =
x.cpu()`` (the body fills the tested name), ``if key not in cache: cache[key] = ...`` (once per
key), ``if shown < 3: ...; shown += 1`` and ``if not printed: ...; printed = True`` (a counter or
flag the body moves toward the end of its test), unless the step sets the name back each time.
A mixin of :class:`~torchlint.analysis.guards.Guards`, whose ``ctx`` it uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.cache_hits import never_hit
from torchlint.analysis.guard_shapes import assigned_targets, conjuncts, constant, counted_or_flagged, mentions, none_tested, target_of
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class FirstPasses:
    """Branches that run a first time or a few times per run (see the module docstring)."""

    ctx: FileContext

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
                                       and not self._keeps_the_cache(b) for b in self.ctx.bindings.lookup(cache, branch))

    def never_hit(self, node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
        """Where ``node`` sits in the body of a cache's ``if key not in cache:`` that never stores
        under the key it tests (``cache_hits.never_hit``, hifi-gan's ``mel_basis``): what the branch
        builds, it builds on every call. (the key tested, the key stored), else None."""
        for branch in self.conditions(node):  # type: ignore[attr-defined]
            keys = never_hit(branch) if self.ctx.tree.is_inside(node, branch.body) else None
            if keys is not None:
                tested, store = keys
                one = len(store.slice) == 1 and isinstance(store.slice[0].slice, cst.Index)
                return tested, store.slice[0].slice.value if one else store  # type: ignore[union-attr]
        return None

    def _keeps_the_cache(self, binding) -> bool:  # type: ignore[no-untyped-def]
        """Does a binding of a cache's name in the step leave what the cache holds between steps: the
        name made an alias of a kept attribute (fcpe's ``hann_window = self.hann_window``), or a fresh
        one only on a path a parameter off by default opens (``else: hann_window = {}`` of ``if not
        train:``, ``train=False``)?"""
        value = binding.value
        if value is not None and type(value) is cst.Attribute and "." in (dotted(value) or ""):
            return True  # (the same dict as the object keeps: filled once per key across calls)
        return self.opt_in(binding.node) is not None  # type: ignore[attr-defined]

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
