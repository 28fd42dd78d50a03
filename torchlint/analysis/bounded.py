"""Memoised recursion whose depth never follows the input's.

An analysis that asks the same question of what a name, a call or a helper leads to
recurses once per link: 1,400 helpers each returning the next one's result, or a value
rebound 1,500 times, pass any recursion limit. ``Bounded.call`` runs such a question one
level deeper, up to ``LIMIT`` levels; past that, the innermost question is abandoned
(``_TooDeep`` unwinds to the outermost call) and an explicit stack asks it first, from
the top, and then asks again the ones that were waiting for it, which now find its
answer memoised. Each question is asked from the top at most once, so a chain of N links
costs O(N) and at most ``LIMIT`` levels of the Python stack.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

# Levels of one analysis's recursion before a question is asked again from the top. A
# level is a few Python frames; analyses call one another, so several may stack up under
# the engine's recursion limit (engine/pool.RECURSION_LIMIT).
LIMIT = 120


class _TooDeep(BaseException):
    """Unwinds to the outermost ``Bounded.call`` (a BaseException: no ``except Exception``
    on the way may take it for an analysis's own failure)."""

    def __init__(self, owner: Bounded, key: Hashable, work: Callable[[], object]) -> None:
        super().__init__()
        self.owner, self.key, self.work = owner, key, work


class Bounded:
    """The depth of one memoised analysis. ``work`` must memoise its answer (that is how
    the question waiting for it finds it); while a question waits on the explicit stack,
    ``waiting(key)`` is true, and the analysis answers it as it answers a cycle."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.level = 0
        self._waiting: set[Hashable] = set()

    def waiting(self, key: Hashable) -> bool:
        return key in self._waiting

    def call(self, key: Hashable, work: Callable[[], T]) -> T:
        """``work()``, one level deeper than the caller."""
        if self.level == 0:
            return self._from_top(key, work)
        if self.level >= self.limit:
            raise _TooDeep(self, key, work)
        self.level += 1
        try:
            return work()
        finally:
            self.level -= 1

    def _from_top(self, key: Hashable, work: Callable[[], T]) -> T:
        stack: list[tuple[Hashable, Callable[[], object]]] = [(key, work)]
        self._waiting.add(key)
        try:
            while True:
                self.level = 1
                try:
                    result = stack[-1][1]()
                except _TooDeep as deep:
                    if deep.owner is not self:
                        raise  # another analysis's question: its own outermost call asks it
                    stack.append((deep.key, deep.work))
                    self._waiting.add(deep.key)  # asked once: a cycle through it ends there
                    continue
                finally:
                    self.level = 0
                stack.pop()
                if not stack:
                    return result  # type: ignore[return-value]
        finally:
            self._waiting.clear()
