"""The functions a file uses as values and not only calls (``FILTERS = {"top_k": top_k}``,
``filter_fn=top_k_logits``, ``map(self.step, xs)``, ``utils.top_k`` handed on), by name: where
such a value is called the join cannot see (``FileSummary.valued``, ``SettingDefaults``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def valued_functions(ctx: FileContext) -> tuple[str, ...]:
    """The names of this file's functions and of the names it imports from modules, and the
    attributes of the modules it imports, that it uses otherwise than calling them."""
    tree = ctx.tree
    defined = {f.name.value for f in tree.nodes(cst.FunctionDef)}
    aliases = ctx.imports.aliases
    imported = {name for name, full in aliases.items() if name != full}  # `from m import f`, `import m as f`
    modules = {name for name, full in aliases.items() if name == full}  # `import utils`: `utils.f` handed on
    found = {name for name in defined | imported
             if any(not _called_or_named(tree, node) and not _bound_for_calls(tree, node, defined) for node in tree.names_valued(name))}
    # (`super().forward` handed to `checkpoint`: the base's method run on this object, as its own call would)
    found.update(name for name in defined if any(not _called_or_named(tree, node) and not _of_super(node) for node in tree.attributes_named(name)))
    for module in modules:
        for node in tree.names_valued(module):
            parent = tree.parent(node)
            if type(parent) is cst.Attribute and parent.value is node and not _called_or_named(tree, parent):
                found.add(parent.attr.value)
    return tuple(sorted(found))


def _called_or_named(tree, node: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` a call's function, or a name that refers to no function (a definition's or a
    parameter's name, an import, a keyword, an attribute's name, an assignment's target)?"""
    parent = tree.parent(node)
    kind = type(parent)
    if kind is cst.Call:
        return parent.func is node  # type: ignore[union-attr]
    if kind is cst.Arg:
        return parent.keyword is node  # type: ignore[union-attr]
    # (an attribute's name, `x.top_k`, or one read of the function, `f.__name__`, hands nothing on)
    return kind in (cst.Attribute, cst.FunctionDef, cst.ClassDef, cst.Param, cst.ImportAlias, cst.AssignTarget, cst.AnnAssign, cst.AugAssign,
                    cst.Global, cst.Nonlocal)


def _of_super(node: cst.Attribute) -> bool:
    """Is ``node`` ``super().name``: a method of a base class, run on ``self`` where this class's own method hands it on?"""
    value = node.value
    return type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "super"


def _bound_for_calls(tree, node: cst.BaseExpression, defined: set[str]) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` (an arm of it) the value a function assigns to a name it only calls: ``spline_fn =
    rational_quadratic_spline`` in a branch, then ``spline_fn(...)``? The step summary resolves that call
    to each function so bound (``BranchFunctions``), where each arm names a function of this file: the join sees it."""
    parent = tree.parent(node)
    while type(parent) is cst.IfExp and node is not parent.test:  # type: ignore[union-attr]
        node, parent = parent, tree.parent(parent)
    if type(node) is cst.IfExp and not all(type(arm) is cst.Name and arm.value in defined for arm in (node.body, node.orelse)):
        return False  # (`act = F.relu if fast else own_act`: a library's arm, the call not resolved)
    if type(parent) is not cst.Assign or len(parent.targets) != 1 or type(parent.targets[0].target) is not cst.Name:  # type: ignore[union-attr]
        return False
    scope = tree.enclosing_function(parent)
    if scope is None:
        return False  # (a module's name: any module importing it may hand it on)
    uses = [use for use in tree.names_valued(parent.targets[0].target.value) if tree.enclosing_function(use) is scope]  # type: ignore[union-attr]
    return all(_call_or_target(tree, use) for use in uses)


def _call_or_target(tree, use: cst.Name) -> bool:  # type: ignore[no-untyped-def]
    parent = tree.parent(use)
    return type(parent) is cst.Call and parent.func is use or type(parent) is cst.AssignTarget  # type: ignore[union-attr]
