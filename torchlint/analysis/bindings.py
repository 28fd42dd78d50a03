"""What each name is bound to, per scope: the base of the value inferences."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.tree import Tree


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
        return out
    return []


class Bindings:
    """Bindings of plain names per scope (function or module) and ``self.x`` per class."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.by_scope: dict[int, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
        self.self_attrs: dict[int, dict[str, list[Binding]]] = defaultdict(lambda: defaultdict(list))
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
            self._add(self._scope_key(node), name, binding)

    def lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Bindings of ``name`` visible at ``at``: its function's, else the module's."""
        if name.startswith("self.") and name.count(".") == 1:
            cls = self.tree.enclosing_class(at)
            return self.self_attrs.get(id(cls), {}).get(name, []) if cls is not None else []
        function = self.tree.enclosing_function(at)
        while function is not None:  # closures see their enclosing functions' names
            found = self.by_scope.get(id(function), {}).get(name)
            if found:
                return found
            function = self.tree.enclosing_function(function)
        return self.module_bindings(name)

    def module_bindings(self, name: str) -> list[Binding]:
        return self.by_scope.get(id(self.tree.module), {}).get(name, [])
