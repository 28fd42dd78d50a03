"""The calls of a subtree that run where it runs (not in a nested function, class, lambda
or comprehension, nor, when asked, in a nested loop), found from one index of the file's
calls instead of a walk of the subtree per question.

The analyses ask this of every statement around every finding and of every loop, nested
ones again inside their outer ones: a walk per question visited each node once per level
of nesting above it, and every node, where only the calls were wanted.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from functools import cached_property

import libcst as cst

from torchlint.analysis.tree import Tree, node_types

_SCOPES = node_types(cst.FunctionDef, cst.ClassDef, cst.Lambda)
COMPREHENSIONS = node_types(cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_LOOPS = frozenset({cst.For, cst.While})

# What a subtree's own calls stop at, by the question asked (see `Loops.own_nodes`/`_loop_nodes`).
OWN = _SCOPES | COMPREHENSIONS | _LOOPS  # the statement's own calls, not its nested loops'
INTO_LOOPS = _SCOPES | COMPREHENSIONS  # nested `for`/`while` loops' calls too
IN_SCOPE = _SCOPES  # comprehensions' too: every call that runs in this scope (a loop body's)
STEP = "step"  # OWN, but into the micro-batch loops a predicate names (`Loops._step_nodes`)


_UNKNOWN = object()  # a memo's "not asked yet" (None is an answer)


class SubtreeCalls:
    """``calls(root, stops)``: each answer found once per file."""

    def __init__(self, tree: Tree, micro_batch: Callable[[cst.CSTNode], bool]) -> None:
        self.tree = tree
        self.micro_batch = micro_batch  # the loops STEP enters
        self._all = tree.nodes(cst.Call)  # in pre-order
        self._at = [tree.order[id(call)] for call in self._all]
        self._above = [id(tree.parents.get(id(call))) for call in self._all]  # each call's parent, by id
        self._answers: dict[tuple[int, int], list[cst.Call]] = {}
        self._stoppers: dict[int, dict[int, cst.CSTNode | None]] = {}

    def calls(self, root: cst.CSTNode, stops: frozenset[type] | str) -> list[cst.Call]:
        """The calls under ``root`` (itself included) with no node that ``stops`` between it
        and ``root`` (``root`` itself never stops), in the order a depth-first walk that
        pushes children left to right pops them (``Loops.own_nodes``'s order). Do not
        change the list."""
        key = (id(root), id(stops))
        found = self._answers.get(key)
        if found is not None:
            return found
        tree = self.tree
        start = tree.order.get(id(root))
        if start is None:  # a node made after the walk (a fix's): walked
            return self._walked(root, stops)
        end = tree._last_index(root)
        memo = self._stoppers.setdefault(id(stops), {})
        order, at, above, calls = tree.order, self._at, self._above, self._all
        kept = []
        for i in range(bisect.bisect_left(at, start), bisect.bisect_right(at, end)):
            stopper = memo.get(above[i], _UNKNOWN)  # most paths up are known
            if stopper is _UNKNOWN:
                stopper = self._stopper(calls[i], stops, memo)
            if stopper is None or order[id(stopper)] <= start:
                kept.append(i)
        kept.sort(key=self._finish_rank.__getitem__)
        found = [calls[i] for i in kept]
        self._answers[key] = found
        return found

    @cached_property
    def _finish_rank(self) -> list[int]:
        """Each call's place (by its index in the file's calls) in the order the subtree walk
        pops them: right to left, the reverse of a post-order, where a node follows its
        subtree's last node and, on a tie, the nodes inside it. Found once per file, so each
        question sorts plain numbers."""
        tree, calls = self.tree, self._all
        last, at = tree._last_index, self._at
        by_finish = sorted(range(len(calls)), key=lambda i: (last(calls[i]), -at[i]), reverse=True)
        rank = [0] * len(calls)
        for place, i in enumerate(by_finish):
            rank[i] = place
        return rank

    def _walked(self, root: cst.CSTNode, stops: frozenset[type] | str) -> list[cst.Call]:
        step = stops == STEP
        types = OWN if step else stops
        stack, found = [root], []
        while stack:
            node = stack.pop()
            if type(node) is cst.Call:
                found.append(node)
            if node is root or type(node) not in types or step and self.micro_batch(node):
                stack.extend(self.tree.children(node))
        return found

    def _stopper(self, node: cst.CSTNode, stops: frozenset[type] | str, memo: dict[int, cst.CSTNode | None]) -> cst.CSTNode | None:
        """The innermost ancestor of ``node`` (not itself) that ``stops``, remembered in ``memo``."""
        if stops == STEP:  # a micro-batch loop is walked into
            return self.tree.innermost(node, OWN, memo, self.micro_batch)
        return self.tree.innermost(node, stops, memo)  # type: ignore[arg-type]

