"""Which function of this file a call runs: ``f()`` (a ``def`` visible where the call
is: nested ones first, then module level) or ``self.m()`` (a method of the enclosing
class). Shared by the loop, value and step analyses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.tree import FUNCTION_OR_CLASS

if TYPE_CHECKING:
    from torchlint.analysis.tree import Tree


class LocalFunctions:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        # scope (module or function) -> name -> its def, None when defined there twice
        self._defined: dict[int, dict[str, cst.FunctionDef | None]] = {}
        for function in tree.nodes(cst.FunctionDef):
            parent = tree.parent(function)
            owner = tree.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
            if isinstance(owner, (cst.FunctionDef, cst.Module)):
                table = self._defined.setdefault(id(owner), {})
                name = function.name.value
                table[name] = None if name in table else function
        self._names = {name for table in self._defined.values() for name in table}

    def defines(self, name: str) -> bool:
        """Does a function of this file (not a method) have that name?"""
        return name in self._names

    def named(self, name: str, at: cst.CSTNode) -> cst.FunctionDef | None:
        """The ``def name`` visible at ``at`` (None when there is none, or two)."""
        if name not in self._names:
            return None  # no function of this file has that name
        for ancestor in self.tree.ancestors(at):
            if type(ancestor) is cst.FunctionDef:  # not isinstance: libcst's ABCs make it slow
                table = self._defined.get(id(ancestor), {})
                if name in table:
                    return table[name]
        return self._defined.get(id(self.tree.module), {}).get(name)

    def method(self, name: str, at: cst.CSTNode) -> cst.FunctionDef | None:
        """``def name`` in the body of the class enclosing ``at``."""
        cls = self.tree.enclosing_class(at)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return None
        methods: dict[int, dict[str, cst.FunctionDef]] = self.__dict__.setdefault("_methods", {})
        if id(cls) not in methods:  # each class's body read once: a call per method cost N² in a class of N methods
            table: dict[str, cst.FunctionDef] = {}
            for statement in cls.body.body:
                if isinstance(statement, cst.FunctionDef):
                    table.setdefault(statement.name.value, statement)  # the first `def`, as the scan found it
            methods[id(cls)] = table
        return methods[id(cls)].get(name)

    def called(self, call: cst.Call, qualified: str | None) -> cst.FunctionDef | None:
        """The function ``call`` runs; ``qualified`` is the callee's imported name, if any
        (an imported name is never a local function)."""
        func = call.func
        if isinstance(func, cst.Name):
            return self.named(func.value, call) if qualified is None else None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return self.method(func.attr.value, call)
        return None


def dotted_function_name(tree: Tree, function: cst.FunctionDef) -> str:
    """``Cls.m`` / ``f.inner``: the function's dotted name within its file."""
    parts = [function.name.value]
    for ancestor in tree.ancestors(function):
        if type(ancestor) in FUNCTION_OR_CLASS:
            parts.append(ancestor.name.value)
    return ".".join(reversed(parts))
