"""Positions for the few nodes a run reports, at the cost of one plain codegen."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import libcst as cst
from libcst._nodes.internal import CodegenState

from torchlint.analysis.tree import Tree

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
        if self._scanned < len(tokens):
            # The tokens since the last target, joined: counted in C, not token by token
            # (no token ends in a lone \r that the next one's \n would make one \r\n).
            text = "".join(tokens[self._scanned:])
            breaks = _line_breaks(text)  # Python's line breaks: \r\n, \n and a lone \r (old Mac files) alike
            if breaks:
                self._line += breaks
                self._column = len(text) - max(text.rfind("\n"), text.rfind("\r")) - 1
            else:
                self._column += len(text)
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


class PlainCodegen(CodegenState):
    """libcst's codegen state without its position hook: ``CodegenState`` enters a
    generator-based context manager for most nodes it generates, which records nothing, and
    costs more than the node's own code."""

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> AbstractContextManager[None]:
        return _NOTHING


def plain_code(module: cst.Module, node: cst.CSTNode) -> str:
    """``module.code_for_node(node)``: the same text, from a :class:`PlainCodegen`."""
    simple = _plain_chain(node)
    if simple is not None:
        return simple  # (most questions: a name or a dotted name, whose codegen enters a context manager per node)
    state = PlainCodegen(default_indent=module.default_indent, default_newline=module.default_newline)
    node._codegen(state)
    return "".join(state.tokens)


_LITERAL_TOKENS = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString})


def _plain_chain(node: cst.CSTNode) -> str | None:
    """The code of a name, a literal number or plain string, or names joined by dots, as libcst
    generates it, where it is written plainly: no parentheses, no space around a dot (else None)."""
    if type(node) in _LITERAL_TOKENS:
        return None if node.lpar or node.rpar else node.value  # type: ignore[attr-defined]
    parts = []
    while type(node) is cst.Attribute:
        dot, attr = node.dot, node.attr
        if node.lpar or node.rpar or attr.lpar or attr.rpar or not _no_space(dot.whitespace_before) or not _no_space(dot.whitespace_after):
            return None
        parts.append(attr.value)
        node = node.value
    if type(node) is not cst.Name or node.lpar or node.rpar:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _no_space(whitespace: cst.BaseParenthesizableWhitespace) -> bool:
    return type(whitespace) is cst.SimpleWhitespace and not whitespace.value


class _AllPlaced(Exception):
    """Every target has its span: ends the codegen early."""


def compute_spans(module: cst.Module, nodes: Iterable[cst.CSTNode], tree: Tree | None = None, text: str | None = None) -> dict[int, Span]:
    """Map ``id(node)`` to its span for each of ``nodes`` (statements span their header).
    Given the module's ``tree`` and the ``text`` it was parsed from, only the top-level
    statements that hold the nodes are generated (:func:`_statement_spans`)."""
    nodes = list(nodes)
    targets = {id(n) for n in nodes}
    if not targets:
        return {}
    # libcst records no position for a comprehension's `for ... in ...` clause: locate it
    # from its target and iterable, the `for` keyword being just before the target.
    comp_fors = [n for n in nodes if isinstance(n, cst.CompFor)]
    for comp_for in comp_fors:
        targets.update((id(comp_for.target), id(comp_for.iter)))
    spans = _statement_spans(module, targets, comp_fors, tree, text) if tree is not None and text is not None else None
    if spans is None:
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


def _statement_spans(module: cst.Module, targets: set[int], comp_fors: list[cst.CompFor], tree: Tree, text: str) -> dict[int, Span] | None:
    """The spans of ``targets`` from the codegen of the statements that hold them only (the
    innermost statement of a body block, a function's, a class's, a loop's, a branch's,
    through nested ones, or else a top-level statement), each up to its last target; None where that cannot be told for
    sure (the caller generates the module).

    libcst gives the text back as parsed, so a statement's generated code (with the
    indentation of the blocks around it) stands in the text where the statement does: the
    code generated up to its last target, found once and only once in the text after the
    statement before, says on which line it starts.
    """
    if "\x0c" in text:
        return None  # libcst drops form feeds from the code: it is not the text (engine/runner.py)
    unplaced = {id(comp_for) for comp_for in comp_fors}  # codegen never places a clause itself
    whole: set[int] = set()  # ids of the statements generated whole
    while True:
        held = _held(module, targets, tree, whole)
        if held is None:
            return None
        spans = _spans_of(module, held, unplaced, text)
        if type(spans) is dict:
            return spans
        if -1 in spans or spans <= whole:
            return None  # not even the outermost statement: the module's codegen says
        # statements like others (`return self.net(x)` in each of 1,500 helpers): the ones whose
        # bodies hold them, whole, all in the next pass (one pass each was quadratic)
        whole |= spans


def _spans_of(module: cst.Module, held: list[tuple[_Unit, set[int]]], unplaced: set[int], text: str) -> dict[int, Span] | set[int]:
    """The spans of the targets of ``held``; where statements are not found once in the
    text, the ids of the statements whose bodies hold them (-1 for a top-level statement).
    A statement not found leaves the cursor where it was: one found once after it is still
    the one meant (the real one lies after the cursor too), so every miss is seen in one pass."""
    spans: dict[int, Span] = {}
    missed: set[int] = set()
    cursor, line = 0, 1  # where the text after the last statement found starts, and its line
    for unit, inside in held:
        statement, indent = unit[1], unit[2]
        state = _TargetPositionState(module, inside, unplaced=len(inside & unplaced))
        state.indent_tokens = list(indent)
        try:
            statement._codegen(state)
        except _AllPlaced:
            pass
        code = "".join(state.tokens)
        found = _once(code, text, cursor)
        if found is None:  # the code up to the target stands in the text again (`x = f(`): all of it
            complete = PlainCodegen(default_indent=module.default_indent, default_newline=module.default_newline, indent_tokens=list(indent))
            statement._codegen(complete)
            code = "".join(complete.tokens)
            found = _once(code, text, cursor)
            if found is None:
                missed.add(unit[3])
                continue
        line += _line_breaks(text[cursor:found])
        cursor = found + len(code)
        for key, (start_line, start_column, end_line, end_column) in state.spans.items():
            spans[key] = (start_line + line - 1, start_column, end_line + line - 1, end_column)
        line += _line_breaks(code)
    return missed or spans


# (pre-order index of the statement, the statement, the indentation of the blocks around
# it, the id of the statement whose body holds it, or -1 for a top-level statement)
_Unit = tuple[int, cst.CSTNode, tuple[str, ...], int]
# statements whose body block the search goes into (a target in an `else:`, a handler,
# a decorator or a header stays with the statement itself)
_BODIES = frozenset({cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.With, cst.If, cst.Try})


def _held(module: cst.Module, targets: set[int], tree: Tree, whole: set[int]) -> list[tuple[_Unit, set[int]]] | None:
    """The statements to generate, in source order, each with the targets it holds: the
    innermost statement of a body block around a target, unless the statement that owns
    the block is in ``whole``; a statement that holds another's targets (a target in a
    function's own lines, its header, its ``else:``) takes them in. None for a
    target outside the statements (the module itself)."""
    body, order, last = module.body, tree.order, tree._last_index
    starts = [order.get(id(statement), -1) for statement in body]
    units: dict[int, tuple[_Unit, set[int]]] = {}
    for target in targets:
        at = order.get(target)
        position = bisect.bisect_right(starts, at) - 1 if at is not None else -1
        if position < 0 or at > last(body[position]):
            return None
        statement, indent, around = body[position], (), -1
        while type(statement) in _BODIES and type(statement.body) is cst.IndentedBlock and id(statement) not in whole:
            block = statement.body
            members = [order.get(id(member), -1) for member in block.body]
            inner = bisect.bisect_right(members, at) - 1
            if inner < 0 or at > last(block.body[inner]):
                break  # in the statement's own lines
            indent = (*indent, module.default_indent if block.indent is None else block.indent)
            statement, around = block.body[inner], id(statement)
        key = order[id(statement)]
        units.setdefault(key, ((key, statement, indent, around), set()))[1].add(target)
    held: list[tuple[_Unit, set[int]]] = []
    for key in sorted(units):  # a statement's units inside another's come right after it: taken in
        unit, inside = units[key]
        if held and key <= last(held[-1][0][1]):
            held[-1][1].update(inside)
        else:
            held.append((unit, inside))
    return held


def _once(code: str, text: str, start: int) -> int | None:
    """Where ``code`` stands in ``text`` after ``start``, at a line's start, if only there."""
    found = text.find(code, start)
    if not code or found < 0 or text.find(code, found + 1) >= 0 or found > 0 and text[found - 1] not in "\r\n":
        return None
    return found


def _line_breaks(text: str) -> int:
    """Python's line breaks in ``text``: \\r\\n, \\n and a lone \\r alike."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _simple(whitespace: cst.BaseParenthesizableWhitespace) -> str:
    return whitespace.value if isinstance(whitespace, cst.SimpleWhitespace) else " "
