"""Constructions of a class whose object this file never runs as a module: kept on ``self`` and
only asked for another method (tortoise's ``self.stft_fn = STFT(...)``, then
``self.stft_fn.transform(y)``), or bound to a name only handed to ``torch.onnx.export`` (and run
once on dummy inputs first, outside any loop). The join leaves such a class's ``forward`` out of
the models it seeds where every construction in the project is one (``FileSummary.idle_builds``,
:mod:`torchlint.analysis.idle_models`)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from torchlint.analysis.summary import Ref

# What hands a module to an exporter that traces its forward once, no step running it
# (torch.jit.trace and torch.export.export give back a callable that may run it: not these).
_EXPORTERS = frozenset({"torch.onnx.export", "torch.onnx.dynamo_export"})
# Methods that run the module's forward, or give back the module itself (then it may be called).
_RUNS = frozenset({"forward", "__call__"})
_SELF_RETURNING = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16", "requires_grad_",
                             "type", "share_memory", "to_empty", "apply", "zero_grad"})
# A use inside one of these may repeat, or run later (a comprehension, a lambda, a loop).
_REPEATING = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)


def idle_builds(ctx, target: Callable[[cst.BaseExpression, cst.CSTNode], Ref | None],
                class_keys: dict[int, str]) -> tuple[tuple[Ref, str], ...]:
    """(the class reference, the key of the class whose attribute holds the object or "") for each
    class named in this file only by constructions whose object is idle (see the module docstring)."""
    tree = ctx.tree
    names_by_value: dict[str, list[cst.Name]] = {}
    for name in tree.nodes(cst.Name):
        names_by_value.setdefault(name.value, []).append(name)
    attributes: dict[str, list[cst.Attribute]] = {}
    for node in tree.nodes(cst.Attribute):
        if type(node.value) is cst.Name and node.value.value == "self":
            attributes.setdefault(node.attr.value, []).append(node)
    index = (names_by_value, attributes)
    found: list[tuple[Ref, str]] = []
    for value, names in names_by_value.items():
        if not value[:1].isupper():
            continue
        builds: list[tuple[Ref, str]] = []
        for name in names:
            parent = tree.parent(name)
            if type(parent) is cst.ClassDef and parent.name is name or _imported(tree, name):
                continue  # its definition, its import: no use
            holder = _idle_build(ctx, name, parent, class_keys, index) if type(parent) is cst.Call and parent.func is name else None
            ref = target(name, parent) if holder is not None else None
            if holder is None or ref is None or ref[0] not in ("local", "import"):
                break  # any other mention may build, pass or call it: not idle
            builds.append((ref, holder))
        else:
            found.extend(dict.fromkeys(builds))
    return tuple(found)


def _imported(tree, name: cst.Name) -> bool:
    return any(type(ancestor) in (cst.Import, cst.ImportFrom) for ancestor in tree.ancestors(name))


def _idle_build(ctx, name: cst.Name, call: cst.Call, class_keys: dict[int, str], index: tuple[dict, dict]) -> str | None:
    """The holder (a class key, or "" for a local name) where ``call`` builds an object that is
    then never run as a module; None otherwise."""
    tree = ctx.tree
    assign = tree.parent(call)
    if not isinstance(assign, cst.Assign) or assign.value is not call or len(assign.targets) != 1:
        return None  # handed on, returned, kept in a container, chained: it may be run
    held = assign.targets[0].target
    if isinstance(held, cst.Name):
        return "" if _name_idle(ctx, held, tree.scope_of(assign), index[0]) else None
    if isinstance(held, cst.Attribute) and isinstance(held.value, cst.Name) and held.value.value == "self":
        cls = tree.enclosing_class(assign)
        return class_keys[id(cls)] if cls is not None and _attribute_idle(ctx, held, cls, index[1]) else None
    return None


def _name_idle(ctx, held: cst.Name, scope: cst.CSTNode, names_by_value: dict[str, list[cst.Name]]) -> bool:
    """Every other use of the local name ``held`` (in its scope, nested ones too) asks it for another
    method, or exports it; a direct call only outside any loop of a scope that exports it."""
    tree = ctx.tree
    uses = [name for name in names_by_value.get(held.value, ()) if name is not held
            and (scope is tree.module or any(ancestor is scope for ancestor in tree.ancestors(name)))]
    exported, called = False, []
    for name in uses:
        parent = tree.parent(name)
        if type(parent) is cst.Attribute and parent.attr is name:
            continue  # `other.x`: another object's attribute
        if _other_method(tree, name, parent):
            continue
        if type(parent) is cst.Arg and parent.keyword is None and _is_export(ctx, tree.parent(parent), parent):
            exported = True
            continue
        if type(parent) is cst.Call and parent.func is name and not _repeats(tree, parent, scope):
            called.append(parent)  # `_ = onnx_model(**dummy_inputs)`: once, before the export
            continue
        return False  # rebound, passed, returned, stored, called in a loop: it may run as a module
    return exported or not called


def _attribute_idle(ctx, held: cst.Attribute, cls: cst.ClassDef, attributes: dict[str, list[cst.Attribute]]) -> bool:
    """Every other ``self.<name>`` of the class asks the object for another method."""
    tree = ctx.tree
    for node in attributes.get(held.attr.value, ()):
        if node is held:
            continue
        if not any(ancestor is cls for ancestor in tree.ancestors(node)):
            continue  # another class's attribute of that name
        if not _other_method(tree, node, tree.parent(node)):
            return False  # `self.stft_fn(y)`, passed on, bound again: it may run as a module
    return True


def _other_method(tree, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """``node.method(...)`` of a method that neither runs the forward nor gives the module back
    to a use (``m.to(device)`` as a statement of its own does not)."""
    if not isinstance(parent, cst.Attribute) or parent.value is not node:
        return False
    method = parent.attr.value
    call = tree.parent(parent)
    if not isinstance(call, cst.Call) or call.func is not parent or method in _RUNS:
        return False
    return method not in _SELF_RETURNING or isinstance(tree.parent(call), cst.Expr)


def _is_export(ctx, call: cst.CSTNode | None, arg: cst.Arg) -> bool:
    return isinstance(call, cst.Call) and bool(call.args) and call.args[0] is arg and ctx.qname(call.func) in _EXPORTERS


def _repeats(tree, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    for ancestor in tree.ancestors(node):
        if ancestor is scope:
            return False
        if isinstance(ancestor, (*_REPEATING, cst.FunctionDef)):
            return True  # a loop, or a nested function that may be called anywhere
    return False
