"""What each name is bound to, per scope: the base of the value inferences."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from torchlint.analysis.mode_tests import contradict, mode_facts
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import Tree

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Module})


@dataclass(frozen=True, slots=True)
class Binding:
    """``name`` bound at ``node`` (an Assign, For, With item, parameter...) to ``value``.

    ``value`` is the bound expression when there is one; for a tuple target it is
    the whole right-hand side and ``element`` says which position was taken.
    """

    name: str
    node: cst.CSTNode
    value: cst.BaseExpression | None
    kind: str  # "assign", "augassign", "for", "with", "param", "import", "def", "comp"
    element: int | None = None


def _targets(target: cst.BaseExpression) -> list[tuple[str, int | None]]:
    """Names a target binds: ``x``, ``self.x``, ``a, b`` (with positions)."""
    name = dotted(target)
    if name is not None:
        return [(name, None)]
    if isinstance(target, (cst.Tuple, cst.List)):
        out: list[tuple[str, int | None]] = []
        for i, element in enumerate(target.elements):
            inner = dotted(element.value)
            if inner is not None:
                out.append((inner, i))
            elif isinstance(element.value, (cst.Tuple, cst.List)):
                # `for step, (x, y) in enumerate(loader)`: nested names, at their outer position
                out.extend((name, i) for name, _ in _targets(element.value))
        return out
    return []


class Bindings:
    """Bindings of plain names per scope (function or module) and ``self.x`` per class."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._in_order: dict[int, tuple[list[Binding], list[int]]] = {}  # see latest_before
        # (name, id(at)) -> (at, answer) for lookup and reaching: the analyses ask both of the
        # same use again and again (a name's kind, its device, whether it is a tensor); the
        # node is kept with its answer, so a node that reuses a freed one's id is never mistaken for it.
        self._looked_up: dict[tuple[str, int], tuple[cst.CSTNode, list[Binding]]] = {}
        self._reached: dict[tuple[str, int], tuple[cst.CSTNode, Binding | None]] = {}
        self._reached_each: dict[tuple[str, int], tuple[cst.CSTNode, list[Binding]]] = {}  # reaching_each's, alike
        self._mode_memo: dict[tuple[int, int], tuple[cst.CSTNode, dict[str, bool]]] = {}  # (node, scope) -> other_mode's modes
        self._in_scope: dict[tuple[str, int], list[Binding]] = {}  # (name, id of its function, or of None) -> what is visible there
        self.by_scope: dict[int, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
        self.self_attrs: dict[int, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
        # (function, name) declared `global name` there: its bindings of the name are the module's
        self._declared_global = {(id(tree.enclosing_function(node)), item.name.value)
                                 for node in tree.nodes(cst.Global) for item in node.names if type(item.name) is cst.Name}
        for node in tree.nodes(cst.Assign):
            for target in node.targets:
                self._bind(target.target, node, node.value, "assign")
        for node in tree.nodes(cst.AnnAssign):
            self._bind(node.target, node, node.value, "assign")
        for node in tree.nodes(cst.AugAssign):
            self._bind(node.target, node, node.value, "augassign")
        for node in tree.nodes(cst.For):
            self._bind(node.target, node, node.iter, "for")
        for node in tree.nodes(cst.CompFor):
            self._bind(node.target, node, node.iter, "comp")
        for node in tree.nodes(cst.WithItem):
            if node.asname is not None:
                self._bind(node.asname.name, node, node.item, "with")
        for node in tree.nodes(cst.NamedExpr):
            self._bind(node.target, node, node.value, "assign")
        for node in tree.nodes(cst.Param):
            self._add(self._scope_key(node), node.name.value, Binding(node.name.value, node, node.default, "param"))

    def _scope_key(self, node: cst.CSTNode) -> int:
        return id(self.tree.scope_of(node))

    def _add(self, scope: int, name: str, binding: Binding) -> None:
        self.by_scope[scope][name].append(binding)

    def _bind(self, target: cst.BaseExpression, node: cst.CSTNode, value: cst.BaseExpression | None, kind: str) -> None:
        for name, element in _targets(target):
            binding = Binding(name, node, value, kind, element)
            if name.startswith("self.") and name.count(".") == 1:
                cls = self.tree.enclosing_class(node)
                if cls is not None:
                    self.self_attrs[id(cls)][name].append(binding)
                continue
            scope = self._scope_key(node)
            if (scope, name) in self._declared_global:  # `global dlrm` then `dlrm = Net()` in `run()`: the module's name
                scope = id(self.tree.module)
            self._add(scope, name, binding)

    def lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Bindings of ``name`` visible at ``at``: its function's, else the module's."""
        key = (name, id(at))
        known = self._looked_up.get(key)
        if known is not None and known[0] is at:
            return known[1]
        found = self._lookup(name, at)
        self._looked_up[key] = (at, found)
        return found

    def _lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        # What a use sees depends only on its class (`self.x`) or its function: found once per
        # name and scope (half the uses' lookups share a scope with an earlier one's).
        if name.startswith("self.") and name.count(".") == 1:
            cls = self.tree.enclosing_class(at)
            return self.self_attrs.get(id(cls), {}).get(name, []) if cls is not None else []
        function = self.tree.enclosing_function(at)
        key = (name, id(function))
        found = self._in_scope.get(key)
        if found is None:
            found = self._in_scope[key] = self._scope_lookup(name, function)
        return found

    def _scope_lookup(self, name: str, function: cst.FunctionDef | None) -> list[Binding]:
        while function is not None:  # closures see their enclosing functions' names
            found = self.by_scope.get(id(function), {}).get(name)
            if found:
                return found
            function = self.tree.enclosing_function(function)
        return self.module_bindings(name)

    def module_bindings(self, name: str) -> list[Binding]:
        return self.by_scope.get(id(self.tree.module), {}).get(name, [])

    def global_bindings(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Every binding of the module-level ``name`` when ``at`` reads it inside a function
        that binds no such name (nor do the functions around it): a global (``model = Net()``
        after the ``def``, or bound in ``main()`` under ``global model``). The function runs
        when it is called, after any of them: source order says nothing of which one it sees."""
        function = self.tree.enclosing_function(at)
        if function is None:
            return []
        while function is not None:
            if (id(function), name) in self._declared_global:
                break  # `global name` here: the module's
            if name in self.by_scope.get(id(function), {}):
                return []  # its own name (a local, a parameter), or a closure's
            function = self.tree.enclosing_function(function)
        return self.module_bindings(name)

    def reaching(self, name: str, at: cst.CSTNode) -> Binding | None:
        """The last binding of ``name`` before ``at`` in source order (control flow ignored),
        or, inside a comprehension that binds it, that comprehension's own."""
        key = (name, id(at))
        known = self._reached.get(key)
        if known is not None and known[0] is at:
            return known[1]
        found = self._reaching(name, at)
        self._reached[key] = (at, found)
        return found

    def _reaching(self, name: str, at: cst.CSTNode) -> Binding | None:
        bound = self.lookup(name, at)
        own = self._comprehension_binding(bound, at)
        if own is not None:
            return own
        # `x = f(x)`: the right-hand side still sees the earlier binding; `else:` never sees its `if`'s
        return self.latest_before(bound, at, lambda b: not (b.kind in ("assign", "augassign") and self.tree.is_inside(at, b.node))
                                  and not self._exclusive(b.node, at) and not self.other_mode(b, at))

    def reaching_each(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Every binding of ``name`` that may reach ``at`` through the branches of the ``if``
        statements before it (control flow of loops ignored): ``if sparse: model = SpGAT()``
        ``else: model = GAT()``, then ``model(x)`` sees both; without an ``else``, the binding
        before the ``if`` too. The nearest first (``reaching``'s), at most 16."""
        key = (name, id(at))
        known = self._reached_each.get(key)
        if known is not None and known[0] is at:
            return known[1]
        found = self._reaching_each(name, at)
        self._reached_each[key] = (at, found)
        return found

    def _reaching_each(self, name: str, at: cst.CSTNode) -> list[Binding]:
        first = self.reaching(name, at)
        if first is None or type(first.node) is cst.CompFor:
            return [first] if first is not None else []
        bound = self.lookup(name, at)
        found: list[Binding] = []
        seen: list[Binding] = []
        pending = [first]
        while pending and len(found) < 16:
            binding = pending.pop(0)
            if any(f is binding for f in seen):
                continue
            seen.append(binding)
            if not self.other_mode(binding, at):  # (its `if`'s other branches may still reach `at`)
                found.append(binding)
            for statement in self._ifs_around(binding.node, at):
                for branch in (statement.body, statement.orelse):
                    if branch is not None and self.tree.is_inside(binding.node, branch):
                        continue
                    inside = [b for b in bound if branch is not None and self.tree.is_inside(b.node, branch)]
                    if inside:  # the branch's own last binding
                        pending.append(max(inside, key=lambda b: self.tree.index(b.node)))
                    else:  # no `else:`, or a branch that binds nothing: what came before the `if`
                        before = self.reaching(name, statement)
                        if before is not None:
                            pending.append(before)
        return found

    def _ifs_around(self, node: cst.CSTNode, at: cst.CSTNode) -> list[cst.If]:
        """The ``if`` statements ``node`` sits in that ``at`` is outside of, innermost first."""
        found, tree = [], self.tree
        where = tree.order.get(id(at))
        for ancestor in tree.ancestors(node):
            if type(ancestor) in _SCOPE_TYPES or (tree.is_inside(at, ancestor) if where is None
                                                   else tree.order[id(ancestor)] < where <= tree._last_index(ancestor)):
                break
            if type(ancestor) is cst.If:
                found.append(ancestor)
        return found

    def _exclusive(self, node: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Is ``node`` in one branch of an ``if`` and ``at`` in another (its ``else:``, an
        ``elif``)? Then what ``node`` binds never reaches ``at`` (but through a loop)."""
        tree = self.tree
        where = tree.order.get(id(at))
        for ancestor in tree.ancestors(node):
            if type(ancestor) in _SCOPE_TYPES:
                return False
            # (is_inside inlined: asked of every ancestor of every binding a use looks back at)
            if tree.is_inside(at, ancestor) if where is None else tree.order[id(ancestor)] < where <= tree._last_index(ancestor):
                if type(ancestor) is not cst.If:
                    return False
                body, orelse = ancestor.body, ancestor.orelse
                if orelse is None:
                    return False
                inside = self.tree.is_inside
                return (inside(node, body) and inside(at, orelse)) or (inside(node, orelse) and inside(at, body))
        return False

    def other_mode(self, binding: Binding, at: cst.CSTNode) -> bool:
        """Is ``binding`` made only in a mode ``at`` never runs in: under ``if self.training:`` for a
        use under ``self.training is False and``, or the ``else`` of a parameter's truth test for a
        use inside it? Then it never reaches ``at``."""
        if binding.kind not in ("assign", "augassign"):
            return False
        scope = self.tree.scope_of(binding.node)
        bound = self._modes(binding.node, scope)
        # (a binding no mode test encloses is the common case: nothing more to ask of the use)
        return bool(bound) and self.tree.is_inside(at, scope) and contradict(bound, self._modes(at, scope))

    def _modes(self, node: cst.CSTNode, scope: cst.CSTNode) -> dict[str, bool]:
        key = (id(node), id(scope))
        known = self._mode_memo.get(key)
        if known is not None and known[0] is node:
            return known[1]
        # a parameter never bound again in its function keeps the caller's value throughout
        facts = mode_facts(self.tree, node, scope, lambda name: "." not in name and all(
            b.kind == "param" for b in self.lookup(name, node)) and bool(self.lookup(name, node)))
        self._mode_memo[key] = (node, facts)
        return facts

    def _comprehension_binding(self, bound: list[Binding], at: cst.CSTNode) -> Binding | None:
        """``{k: f"{v}" for k, v in d.items()}``: the element comes before its ``for`` in the
        source, yet reads that ``for``'s variable, not an earlier comprehension's."""
        comps = [b for b in bound if b.kind == "comp"]
        if not comps:
            return None
        for ancestor in self.tree.ancestors(at):
            if isinstance(ancestor, cst.BaseStatement):
                return None
            if type(ancestor) in _COMPREHENSIONS:
                own = [b for b in comps if self.tree.is_inside(b.node, ancestor)
                       and not self.tree.is_inside(at, b.node.iter)]  # type: ignore[attr-defined]
                if own:
                    return max(own, key=lambda b: self.tree.index(b.node))  # the innermost `for`
        return None

    def latest_before(self, bound: list[Binding], at: cst.CSTNode, accept) -> Binding | None:  # type: ignore[no-untyped-def]
        """The last of ``bound`` that starts before ``at`` in source order and is ``accept``-ed.
        A binary search over the bindings in source order, then a step back per rejected
        one: a name bound thousands of times costs a use no walk over all of them."""
        key = id(bound)
        if key not in self._in_order:
            ordered = sorted(bound, key=lambda b: self.tree.index(b.node))
            self._in_order[key] = (ordered, [self.tree.index(b.node) for b in ordered])
        ordered, starts = self._in_order[key]
        for position in range(bisect.bisect_left(starts, self.tree.index(at)) - 1, -1, -1):
            if accept(ordered[position]):
                return ordered[position]
        return None

    def bound_to(self, value: cst.CSTNode, element: int | None = None) -> list[Binding]:
        """Bindings whose value is ``value`` itself (``loader = DataLoader(...)``); with
        ``element``, the names a tuple target takes from that position (``a, b = f()``)."""
        if not hasattr(self, "_by_value"):
            self._by_value: dict[int, list[Binding]] = defaultdict(list)
            for table in (*self.by_scope.values(), *self.self_attrs.values()):
                for found in table.values():
                    for binding in found:
                        if binding.value is not None and binding.kind in ("assign", "with"):
                            self._by_value[id(binding.value)].append(binding)
        return [b for b in self._by_value.get(id(value), ()) if b.element == element]

    def uses(self, binding: Binding, ordered: bool = False) -> list[cst.BaseExpression]:
        """Where ``binding``'s name is read and may see this binding: ``Name`` nodes in its
        scope (nested functions included), or ``self.x`` attributes in its class. With
        ``ordered``, leave out reads that a later binding of the name shadows in source order
        (``loader = A`` ... ``loader = B`` ... ``for x in loader``: that loop reads ``B``)."""
        found = []
        for node in self.reads(binding.name):
            if node is binding.node:
                continue
            if any(b is binding for b in self.lookup(binding.name, node)):
                if ordered and not binding.name.startswith("self."):
                    last = self.reaching(binding.name, node)
                    if last is not None and last is not binding and last.kind != "augassign" and \
                            not any(b is binding for b in self.reaching_each(binding.name, node)):
                        continue  # shadowed, unless in another branch of an `if` before the read
                found.append(node)
        return found

    def reads(self, name: str) -> list[cst.BaseExpression]:
        """Every read of ``name`` in the file that is no target (``Name`` nodes, or ``self.x``
        attributes), whatever binding it sees: what :meth:`uses` picks from, found once per name,
        not again for each of its bindings (do not change the list)."""
        known: dict[str, list[cst.BaseExpression]] = self.__dict__.setdefault("_reads_of", {})
        found = known.get(name)
        if found is None:
            found = known[name] = [node for node in self._all_reads.get(name, ()) if not self._is_target(node)]
        return found

    def reads_in_reach(self, binding: Binding) -> list[cst.BaseExpression]:
        """The reads of ``binding``'s name that may see it, those :meth:`uses` looks up (a
        superset of its answer): where it is a local of a function, the reads inside that
        function (closures included); else every read of the name in the file."""
        reads = self.reads(binding.name)
        if "." in binding.name:
            return reads  # `self.x`: read in any method of its class
        function = self.tree.enclosing_function(binding.node)
        if function is None or not any(b is binding for b in self.by_scope.get(id(function), {}).get(binding.name, ())):
            return reads  # a module's name, or one a `global` statement makes the module's
        return [read for read in reads if self.tree.is_inside(read, function)]

    @cached_property
    def _all_reads(self) -> dict[str, list[cst.BaseExpression]]:
        reads: dict[str, list[cst.BaseExpression]] = defaultdict(list)
        for name in self.tree.nodes(cst.Name):
            parent = self.tree.parent(name)
            if type(parent) is cst.Attribute and parent.attr is name:
                continue
            reads[name.value].append(name)
        for attribute in self.tree.nodes(cst.Attribute):
            if type(attribute.value) is cst.Name and attribute.value.value == "self":
                reads["self." + attribute.attr.value].append(attribute)
        return reads

    def _is_target(self, node: cst.CSTNode) -> bool:
        parent = self.tree.parent(node)
        if type(parent) in (cst.Element, cst.StarredElement):
            parent = self.tree.parent(self.tree.parent(parent) or parent)
        return type(parent) in (cst.AssignTarget, cst.Param, cst.AsName, cst.ImportAlias) or (
            type(parent) in (cst.For, cst.CompFor, cst.AnnAssign, cst.AugAssign, cst.NamedExpr) and parent.target is node  # type: ignore[union-attr]
        )
