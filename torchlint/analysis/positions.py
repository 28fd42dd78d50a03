"""Positions for the few nodes a run reports, at the cost of one plain codegen."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import libcst as cst
from libcst._nodes.internal import CodegenState

Span = tuple[int, int, int, int]  # line, column (0-based), end_line, end_column


class _TargetPositionState(CodegenState):
    """Codegen that tracks line and column only where a target node starts and ends.

    libcst's PositionProvider records every node and costs about as much as the
    parse; here the generated tokens are scanned once, lazily, at targets only.
    """

    def __init__(self, module: cst.Module, targets: set[int], unplaced: int = 0) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.targets = targets
        self.spans: dict[int, Span] = {}
        self._line, self._column, self._scanned = 1, 0, 0
        # Targets still to place; codegen never places `unplaced` of them (comprehension
        # clauses). Once every other one is placed the rest of the module is not generated.
        self._left = len(targets) - unplaced

    def _here(self) -> tuple[int, int]:
        tokens = self.tokens
        for i in range(self._scanned, len(tokens)):
            token = tokens[i]
            if "\n" in token or "\r" in token:
                # Python's line breaks: \r\n, \n and a lone \r (old Mac files) alike
                self._line += token.count("\n") + token.count("\r") - token.count("\r\n")
                self._column = len(token) - max(token.rfind("\n"), token.rfind("\r")) - 1
            else:
                self._column += len(token)
        self._scanned = len(tokens)
        return self._line, self._column

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> AbstractContextManager[None]:
        # Asked of most nodes the codegen passes: the others share one context that does
        # nothing (a generator-based one per node cost a quarter of the codegen).
        if id(node) not in self.targets:
            return _NOTHING
        return self._record(node)

    @contextmanager
    def _record(self, node: cst.CSTNode) -> Iterator[None]:
        start = self._here()
        yield
        end = self._here()
        if id(node) not in self.spans:
            self._left -= 1
        self.spans[id(node)] = (start[0], start[1], end[0], end[1])
        if self._left <= 0:
            raise _AllPlaced  # the codegen of everything after the last target is wasted


_NOTHING = nullcontext()


class _AllPlaced(Exception):
    """Every target has its span: ends the codegen early."""


def compute_spans(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, Span]:
    """Map ``id(node)`` to its span for each of ``nodes`` (statements span their header)."""
    nodes = list(nodes)
    targets = {id(n) for n in nodes}
    if not targets:
        return {}
    # libcst records no position for a comprehension's `for ... in ...` clause: locate it
    # from its target and iterable, the `for` keyword being just before the target.
    comp_fors = [n for n in nodes if isinstance(n, cst.CompFor)]
    for comp_for in comp_fors:
        targets.update((id(comp_for.target), id(comp_for.iter)))
    state = _TargetPositionState(module, targets, unplaced=len({id(c) for c in comp_fors}))
    try:
        module._codegen(state)
    except _AllPlaced:
        pass
    spans = state.spans
    for comp_for in comp_fors:
        start, end = spans.get(id(comp_for.target)), spans.get(id(comp_for.iter))
        if start is None or end is None:
            continue
        before = len("for") + len(_simple(comp_for.whitespace_after_for))
        if comp_for.asynchronous is not None:
            before += len("async") + len(_simple(comp_for.asynchronous.whitespace_after))
        spans[id(comp_for)] = (start[0], max(0, start[1] - before), end[2], end[3])
    return spans


def _simple(whitespace: cst.BaseParenthesizableWhitespace) -> str:
    return whitespace.value if isinstance(whitespace, cst.SimpleWhitespace) else " "
