"""A class as the light summary sees it from CPython's ``ast``: the objects it keeps on ``self`` in its ``__init__``
(``ClassSummary.attributes``) and its abstract methods.

A base class in a file that never mentions torch (audiocraft's shape: ``self.lm = lm`` with the
parameter annotated ``lm: LMModel``) still tells the join what its subclasses' ``self.lm`` holds.
Only the plain shapes: a parameter kept as is (what the callers pass, else the class annotated) and
a class of the project built there; anything else is left out, as the join then finds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from torchlint.analysis.summary import Ref, callers_first

_PLAIN = frozenset({"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "object", "Any", "None", "Tensor", "Module"})


def init_attributes(cls: ast.ClassDef, key: str, resolve: Callable[[str], Ref | None]) -> tuple[tuple[str, Ref], ...]:
    """``(name, reference)`` for each ``self.<name> = ...`` of ``cls``'s ``__init__`` the join can follow;
    ``resolve`` names a dotted class name's reference in the file (None: not the project's, or unknown)."""
    init = next((s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__init__"), None)
    if init is None:
        return ()
    params = {a.arg: a for a in (*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs)}
    found: dict[str, Ref] = {}
    for statement in init.body:  # (its own statements: one under an `if` may not run, as the light summary's calls)
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
            continue
        ref = _kept(value, params, f"{key}.__init__", resolve)
        if ref is not None and target.attr not in found:
            found[target.attr] = ref
    return tuple(sorted(found.items()))


def _kept(value: ast.AST, params: dict[str, ast.arg], init: str, resolve: Callable[[str], Ref | None]) -> Ref | None:
    """What ``self.x = value`` keeps: a parameter (its callers' objects, else its annotated class) or a class built."""
    if isinstance(value, ast.Name) and value.id in params:
        param = params[value.id]
        annotated = _annotated(param.annotation, resolve) if param.annotation is not None else None
        passed = ("passed", init, value.id)
        return callers_first(passed, annotated) if annotated is not None else passed
    if isinstance(value, ast.Call):
        name = _dotted(value.func)
        return resolve(name) if name is not None and name.rsplit(".", 1)[-1][:1].isupper() else None
    return None


def _annotated(annotation: ast.AST, resolve: Callable[[str], Ref | None]) -> Ref | None:
    """The class an annotation names (``LMModel``, ``"LMModel"``, ``Optional[LMModel]``, ``tp.Optional["X"]``,
    ``X | None``), as ``object_shapes.annotation_name`` reads libcst's, resolved in the file."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        text = annotation.value.strip()
        try:
            annotation = ast.parse(text, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Subscript) and (_dotted(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
        return _annotated(annotation.slice, resolve)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [s for s in (annotation.left, annotation.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        return _annotated(sides[0], resolve) if len(sides) == 1 else None
    name = _dotted(annotation)
    last = name.rsplit(".", 1)[-1] if name is not None else ""
    if name is None or last in _PLAIN or not last[:1].isupper():
        return None
    return resolve(name)


def abstract_methods(cls: ast.ClassDef) -> tuple[str, ...]:
    """``members.abstract_methods`` on CPython's tree: methods that only raise NotImplementedError."""
    found = []
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
        raised = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
        raised = raised.func if isinstance(raised, ast.Call) else raised
        if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
            found.append(method.name)
    return tuple(found)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def object_sets(nodes: list[ast.AST]) -> tuple[str, ...]:
    """Attributes assigned on an object other than ``self`` (``translator.replace_unk = True``): ``FileSummary.object_sets``."""
    found = set()
    for node in nodes:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(element, ast.Attribute) and not (isinstance(element.value, ast.Name) and element.value.id == "self"):
                    found.add(element.attr)
    return tuple(sorted(found))
