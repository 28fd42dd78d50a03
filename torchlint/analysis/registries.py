"""Registries of classes a decorator fills: score_sde's ``_CORRECTORS = {}``, ``register_corrector(cls=None, *, name=None)``
whose inner ``_register(cls)`` stores ``_CORRECTORS[local_name] = cls``, and ``@register_corrector(name='langevin')`` on
each class. ``get_corrector(name)``'s ``return _CORRECTORS[name]`` is then one of those classes (``ObjectRefs``' table entry)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.tree import Tree


def registered_classes(tree: Tree) -> dict[str, tuple[cst.ClassDef, ...]]:
    """Module-level dict name -> the classes of the file a decorator registers into it. Only a registry
    whose every store is a decorator's and whose every decorated definition is a class: a table that also
    holds functions or other values names no class."""
    empty = _empty_dicts(tree.module)
    if not empty:
        return {}
    registrars: dict[str, str] = {}  # decorator function -> the dict its inner function stores its parameter in
    spoiled: set[str] = set()  # dicts written some other way
    for target in tree.nodes(cst.AssignTarget):
        stored = target.target
        if type(stored) is not cst.Subscript or type(stored.value) is not cst.Name or stored.value.value not in empty:
            continue
        registrar = _registrar(tree, target)
        if registrar is None:
            spoiled.add(stored.value.value)
        else:
            registrars[registrar] = stored.value.value
    found: dict[str, list[cst.ClassDef]] = {}
    for node in (*tree.nodes(cst.ClassDef), *tree.nodes(cst.FunctionDef)):
        for decorator in node.decorators:
            used = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
            table = registrars.get(dotted(used) or "")
            if table is None:
                continue
            if type(node) is cst.ClassDef:
                found.setdefault(table, []).append(node)
            else:
                spoiled.add(table)  # (a registered function: the table's entries are not all classes)
    return {table: tuple(classes) for table, classes in found.items() if table not in spoiled}


def _empty_dicts(module: cst.Module) -> frozenset[str]:
    """Names the module's own statements bind to ``{}`` or ``dict()``."""
    names = set()
    for statement in module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name and _is_empty_dict(small.value):
                names.add(small.targets[0].target.value)
    return frozenset(names)


def _is_empty_dict(value: cst.BaseExpression) -> bool:
    return type(value) is cst.Dict and not value.elements or type(value) is cst.Call and dotted(value.func) == "dict" and not value.args


def _registrar(tree: Tree, target: cst.AssignTarget) -> str | None:
    """The module-level function a ``table[key] = cls`` store registers for: the store's value is a parameter
    of the function around it, and that function is (or is nested in) a module-level ``def``."""
    assign = tree.parent(target)
    function = tree.enclosing_function(target)
    if type(assign) is not cst.Assign or type(assign.value) is not cst.Name or function is None:
        return None
    params = function.params
    if assign.value.value not in {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}:
        return None
    outer = function
    while (parent := tree.enclosing_function(outer)) is not None:
        outer = parent
    return outer.name.value if tree.parent(outer) is tree.module else None
