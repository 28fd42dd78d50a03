"""One fast walk over a libcst module: parents, source order, nodes by type."""

from __future__ import annotations

import bisect

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import cached_property
import typing
from typing import TypeVar

import libcst as cst
from libcst._nodes.base import CSTNode

N = TypeVar("N", bound=cst.CSTNode)

# Fields that only hold whitespace, comments and punctuation. Skipping them is
# what makes this walk cost a few percent of the parse instead of libcst's
# visitor, which rebuilds every node it visits.
_TRIVIA_PREFIXES = (
    "whitespace", "comma", "lpar", "rpar", "semicolon", "colon", "equal", "dot",
    "lbracket", "rbracket", "lbrace", "rbrace", "header", "footer", "leading_lines",
    "lines_after_decorators", "trailing_whitespace", "operator", "newline",
    "asynchronous", "indent", "lines_after", "star_tok",
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(node_type: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        fields = tuple(
            f.name for f in dataclasses.fields(node_type) if not f.name.startswith(_TRIVIA_PREFIXES) and not _plain(f.type)
        )
        _CHILD_FIELDS[node_type] = fields
    return fields


def _plain(field_type: object) -> bool:
    """A field declared to hold only text or a flag (``Name.value``, ``Arg.star``): never a
    node. The leaves (names, numbers, strings: most nodes) then have no field to read."""
    return field_type in (str, bool, int) or typing.get_origin(field_type) is typing.Literal


def node_types(*bases: type) -> frozenset[type]:
    """``bases`` and every class derived from them: ``type(node) in node_types(A, B)`` is
    ``isinstance(node, (A, B))``, several times faster. libcst's node classes are ABCs,
    and an ``isinstance`` that fails calls ``ABCMeta.__instancecheck__`` in Python; the
    hot helpers ask such questions of every ancestor of every node they look at. (Every
    node class is defined once libcst is imported, so the set is complete.)"""
    found: set[type] = set()
    stack = list(bases)
    while stack:
        cls = stack.pop()
        if cls not in found:
            found.add(cls)
            stack.extend(cls.__subclasses__())
    return frozenset(found)


class _IsNode(dict):  # type: ignore[type-arg]
    """type -> whether it is a CSTNode class, filled on first sight (a dict lookup, not an
    ABC ``isinstance``, for every field of every node the walk reads)."""

    def __missing__(self, value_type: type) -> bool:
        answer = self[value_type] = issubclass(value_type, CSTNode)
        return answer


_IS_NODE = _IsNode()
FUNCTION_OR_CLASS = node_types(cst.FunctionDef, cst.ClassDef)
_STATEMENTS = node_types(cst.SimpleStatementLine, cst.BaseCompoundStatement)
_FUNCTION = (cst.FunctionDef,)
_UNKNOWN = object()  # a memo's "not asked yet" (None is an answer)
_CLASS = (cst.ClassDef,)


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The syntactic children of ``node`` in source order (trivia left out)."""
    is_node = _IS_NODE
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        value_type = type(value)
        if value_type is tuple or value_type is list:
            for item in value:
                if is_node[type(item)]:
                    yield item
        elif is_node[value_type]:
            yield value


class Tree:
    """Parents, pre-order index and per-type node lists of one module."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parents: dict[int, cst.CSTNode] = {}
        self.order: dict[int, int] = {}
        self.by_type: dict[type, list[cst.CSTNode]] = defaultdict(list)
        # Every node in pre-order: a subtree is one run of it, so `descendants` is a slice.
        self.preorder: list[cst.CSTNode] = []
        self._function_of: dict[int, cst.FunctionDef | None] = {}
        self._class_of: dict[int, cst.ClassDef | None] = {}  # see enclosing_class
        self._last: dict[int, int] = {}  # id -> pre-order index of its subtree's last node
        self._next: dict[int, cst.BaseStatement | None] = {}  # id -> the statement after it
        # (id of a block, a predicate) -> the indexes and statements it keeps (statements_before)
        self._kept: dict[tuple[int, Callable[[cst.CSTNode], bool]], tuple[list[int], list[cst.CSTNode]]] = {}
        # id -> its children in source order (leaves left out): the analyses walk subtrees
        # again and again (a loop's own nodes, a helper's calls), and reading a node's
        # fields costs ten times this lookup.
        self._children: dict[int, list[cst.CSTNode]] = {}
        self._walk(module)
        self._defaults_outside: dict[int, cst.FunctionDef | None] = {}
        self._place_defaults()

    def _place_defaults(self) -> None:
        """A parameter's default is evaluated once, where its ``def`` runs (``eps=np.finfo(...).eps.item()``):
        it belongs to the function around the ``def``, not to the function (nor its calls)."""
        for function in self.by_type.get(cst.FunctionDef, ()):
            params = function.params  # type: ignore[attr-defined]
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                if param.default is not None:
                    outer = self.enclosing_function(function)
                    self._defaults_outside[id(param.default)] = self._function_of[id(param.default)] = outer

    def _walk(self, module: cst.Module) -> None:
        # `children` inlined: this walk touches every node of every file once, and the
        # generator's overhead was a third of it.
        parents, order, by_type, known, is_node = self.parents, self.order, self.by_type, _CHILD_FIELDS, _IS_NODE
        children_of, visit = self._children, self.preorder.append
        stack: list[cst.CSTNode] = [module]
        index = 0
        while stack:
            node = stack.pop()
            order[id(node)] = index
            index += 1
            visit(node)
            node_type = type(node)
            by_type[node_type].append(node)
            fields = known.get(node_type)
            if fields is None:
                fields = _child_fields(node_type)
            if not fields:
                continue  # a leaf by its type
            kids: list[cst.CSTNode] = []
            for name in fields:
                value = getattr(node, name)
                value_type = type(value)
                if value_type is tuple or value_type is list:
                    for item in value:  # a loop, not a generator: most sequences are short
                        if is_node[type(item)]:
                            parents[id(item)] = node
                            kids.append(item)
                elif is_node[value_type]:
                    parents[id(value)] = node
                    kids.append(value)
            if kids:
                children_of[id(node)] = kids
                stack.extend(reversed(kids))

    def nodes(self, node_type: type[N]) -> list[N]:
        """Every node of exactly ``node_type``, in source order."""
        return self.by_type.get(node_type, [])  # type: ignore[return-value]

    def names_valued(self, value: str) -> list[cst.Name]:
        """Every ``Name`` node spelled ``value``, in the order of :meth:`nodes`."""
        return self._names_by_value.get(value, [])

    def names_valued_between(self, value: str, start: int, end: int) -> list[cst.Name]:
        """The ``Name`` nodes spelled ``value`` whose index lies strictly between ``start``
        and ``end``: a bisection of :meth:`names_valued` (in index order), not a scan of
        every use of the name in the file per question."""
        names = self.names_valued(value)
        low = bisect.bisect_right(names, start, key=self.index)
        high = bisect.bisect_left(names, end, lo=low, key=self.index)
        return names[low:high]

    def holds(self, node: cst.CSTNode, node_type: type) -> bool:
        """Whether a node of exactly ``node_type`` lies under ``node`` (not ``node`` itself): a
        bisection of :meth:`nodes` (in source order), not a walk of the subtree per question."""
        found = self.by_type.get(node_type)
        if not found:
            return False
        start = self.order.get(id(node))
        if start is None:  # a node made after the walk (a fix's)
            return any(type(n) is node_type for n in self._walked_descendants(node))
        first = bisect.bisect_right(found, start, key=self.index)
        return first < len(found) and self.order[id(found[first])] <= self._last_index(node)

    def nodes_under(self, node: cst.CSTNode, node_type: type[N]) -> list[N]:
        """The nodes of :meth:`nodes` that lie under ``node`` (not ``node`` itself), in source
        order: a bisection of that list, as in :meth:`holds`, not a scan of the file per question."""
        found, start = self.by_type.get(node_type, []), self.order.get(id(node))
        if start is None:  # a node made after the walk (a fix's)
            return [n for n in found if self.is_inside(n, node)]  # type: ignore[misc]
        first = bisect.bisect_right(found, start, key=self.index)
        last = bisect.bisect_right(found, self._last_index(node), lo=first, key=self.index)
        return found[first:last]  # type: ignore[return-value]

    def classes_named(self, name: str) -> list[cst.ClassDef]:
        """Every ``class name`` of the file, in source order: one index of the classes, not a
        scan of them all per question (asked for every construction a check looks at)."""
        return self._classes_by_name.get(name, [])

    def attributes_named(self, attr: str) -> list[cst.Attribute]:
        """Every ``x.attr`` node for this ``attr``, in the order of :meth:`nodes`."""
        return self._attributes_by_name.get(attr, [])

    # Indexes for the analyses that look for one name among all (a function's call sites
    # for each function): one pass over the names instead of one per question.
    @cached_property
    def _names_by_value(self) -> dict[str, list[cst.Name]]:
        index: dict[str, list[cst.Name]] = defaultdict(list)
        for name in self.nodes(cst.Name):
            index[name.value].append(name)
        return index

    @cached_property
    def _classes_by_name(self) -> dict[str, list[cst.ClassDef]]:
        index: dict[str, list[cst.ClassDef]] = defaultdict(list)
        for cls in self.nodes(cst.ClassDef):
            index[cls.name.value].append(cls)
        return index

    @cached_property
    def _attributes_by_name(self) -> dict[str, list[cst.Attribute]]:
        index: dict[str, list[cst.Attribute]] = defaultdict(list)
        for attribute in self.nodes(cst.Attribute):
            index[attribute.attr.value].append(attribute)
        return index

    def own_loops(self, function: cst.FunctionDef) -> list[cst.For | cst.While]:
        """The ``for`` and ``while`` loops whose innermost ``def`` is ``function``, in source
        order (not a nested function's)."""
        return self._loops_by_function.get(id(function), [])

    @cached_property
    def _loops_by_function(self) -> dict[int, list[cst.For | cst.While]]:
        # One pass over the file's loops, not a walk of the function per question: asked for
        # every call a step summary places (the decode loop before it, decoding.generation_before).
        index: dict[int, list[cst.For | cst.While]] = defaultdict(list)
        for loop in sorted((*self.nodes(cst.For), *self.nodes(cst.While)), key=self.index):
            index[id(self.enclosing_function(loop))].append(loop)
        return index

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Parents of ``node``, innermost first."""
        parent = self.parents.get(id(node))
        while parent is not None:
            yield parent
            parent = self.parents.get(id(parent))

    def index(self, node: cst.CSTNode) -> int:
        """Pre-order position: an ancestor or an earlier sibling has a smaller one."""
        return self.order[id(node)]

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        """Whether ``container`` is an ancestor of ``node``: a subtree is one run of the
        pre-order, so two index comparisons answer it (no walk up per question)."""
        order = self.order
        at, start = order.get(id(node)), order.get(id(container))
        if at is None or start is None:  # a node made after the walk (a fix's): walk up
            return any(a is container for a in self.ancestors(node))
        if at <= start:
            return False
        last = self._last.get(id(container))
        return at <= (last if last is not None else self._last_index(container))

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """:func:`children` of ``node``, as the walk found them (do not change the list)."""
        kids = self._children.get(id(node))
        if kids is not None:
            return kids
        if id(node) in self.order:
            return []  # a leaf
        return list(children(node))  # a node made after the walk (a fix's)

    def _last_index(self, node: cst.CSTNode) -> int:
        """The pre-order index of the last node of ``node``'s subtree."""
        memo = self._last
        last = memo.get(id(node))
        if last is None:
            if id(node) not in self.order:  # a node made after the walk (a fix's): its own children
                current = node
                while kids := self.children(current):
                    current = kids[-1]
                return self.order[id(current)]
            # Down the last children: every node on the way ends where the last one does.
            children_of, spine = self._children, [id(node)]
            kids = children_of.get(id(node))
            while kids:
                current = id(kids[-1])
                last = memo.get(current)
                if last is not None:
                    break
                spine.append(current)
                kids = children_of.get(current)
            else:
                last = self.order[spine[-1]]
            for key in spine:
                memo[key] = last
        return last

    def descendants(self, node: cst.CSTNode) -> Iterator[cst.CSTNode] | list[cst.CSTNode]:
        """All nodes under ``node`` (not ``node`` itself), pre-order (do not change the list)."""
        start = self.order.get(id(node))
        if start is not None:  # a run of the walk's pre-order: a slice, not a walk per question
            return self.preorder[start + 1:self._last_index(node) + 1]
        return self._walked_descendants(node)  # a node made after the walk (a fix's)

    def _walked_descendants(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        kids_of = self.children
        stack = list(reversed(kids_of(node)))
        while stack:
            current = stack.pop()
            yield current
            stack.extend(reversed(kids_of(current)))

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The innermost statement (simple or compound) that holds ``node``."""
        statements, parents = _STATEMENTS, self.parents
        current: cst.CSTNode | None = node
        while current is not None:
            if type(current) in statements:
                return current  # type: ignore[return-value]
            current = parents.get(id(current))
        return None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost ``def`` around ``node`` (not ``node`` itself)."""
        # Asked for most calls, names and loops by several analyses: remembered up the tree
        # (the parent's answer, when known, without the call).
        if id(node) in self._defaults_outside:
            return self._defaults_outside[id(node)]
        found = self._function_of.get(id(self.parents.get(id(node))), _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        return self.innermost(node, _FUNCTION, self._function_of)  # type: ignore[return-value]

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        """The innermost ``class`` around ``node`` (not ``node`` itself), through any ``def``."""
        # Asked of every `self.x` the analyses meet: remembered like enclosing_function's.
        found = self._class_of.get(id(self.parents.get(id(node))), _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        return self.innermost(node, _CLASS, self._class_of)  # type: ignore[return-value]

    def innermost(self, node: cst.CSTNode, types: tuple[type, ...] | frozenset[type], memo: dict[int, cst.CSTNode | None],
                  skip: Callable[[cst.CSTNode], bool] | None = None) -> cst.CSTNode | None:
        """The innermost ancestor of ``node`` (not itself) whose type is one of ``types`` (and
        that ``skip`` does not pass over); ``memo`` holds each node's answer, itself included,
        for the nodes on the way up, so each path up is walked once per kind of question."""
        parents, passed = self.parents, []
        current = parents.get(id(node))
        found = None
        while current is not None:
            key = id(current)
            if key in memo:
                found = memo[key]
                break
            if type(current) in types and not (skip is not None and skip(current)):
                found = memo[key] = current
                break
            passed.append(key)
            current = parents.get(key)
        for key in passed:
            memo[key] = found
        return found

    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function, or else the module, whose body holds ``node``."""
        return self.enclosing_function(node) or self.module

    def statements_before(self, block: cst.BaseSuite, child: cst.CSTNode, keep: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
        """The statements of ``block`` before ``child`` (one of them) that ``keep`` accepts, in
        source order. ``keep`` is asked once per statement of the block, and each question is a
        bisection: the analyses ask it for every node of a function (an early ``return`` above
        it), and a scan of the statements before each node was quadratic in a long body."""
        at = self.order.get(id(child))
        if at is None or id(block) not in self.order:  # made after the walk (a fix's): no index, nor a lasting id
            body = list(block.body)  # type: ignore[attr-defined]
            return [s for s in body[:next((i for i, s in enumerate(body) if s is child), len(body))] if keep(s)]
        key = (id(block), keep)
        known = self._kept.get(key)
        if known is None:
            kept = [statement for statement in block.body if keep(statement)]  # type: ignore[attr-defined]
            known = self._kept[key] = ([self.order[id(statement)] for statement in kept], kept)
        return known[1][:bisect.bisect_left(known[0], at)]

    def next_statement(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """The statement right after ``statement`` in the same block, if any."""
        key = id(statement)
        if key not in self._next:
            parent = self.parent(statement)
            body = getattr(parent, "body", None)
            if not isinstance(body, (list, tuple)):
                return None
            # One pass over the block answers every statement in it (a module of 20,000
            # statements asked once per statement was quadratic).
            for item, following in zip(body, list(body[1:]) + [None]):
                self._next[id(item)] = following
        return self._next.get(key)
