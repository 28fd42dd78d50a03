"""Objects of the project's classes, for the step summary: which class an expression is
an instance of (built here, kept on ``self``, returned by a factory, or passed in as a
parameter), and what factories return. A mixin of StepSummarizer, which supplies
``ctx``, ``keys``, ``class_keys``, ``relative`` and ``target``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, Ref
from torchlint.analysis.values import MODULE_CHAIN

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_FACTORY_PREFIXES = ("build", "create", "make", "get_model", "load_model", "setup")
_COMPILERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial", "torch.func.functional_call"})


class ObjectRefs:
    """Class references for objects (see the reference kinds in steps.py)."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    relative: dict[str, tuple[int, str]]

    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:  # pragma: no cover - StepSummarizer's
        raise NotImplementedError

    def _returns(self) -> tuple[tuple[str, tuple[Ref | None, ...]], ...]:
        """What factories return, element by element, when it is an object of a class:
        ``return model, criterion, post`` (or ``return build(args)``: whatever that returns)."""
        found: dict[str, tuple[Ref | None, ...]] = {}
        for node in self.ctx.tree.nodes(cst.Return):  # one pass over the file's returns
            function = self.ctx.tree.enclosing_function(node)
            if node.value is None or function is None or self.keys[id(function)] in found:
                continue
            values = [e.value for e in node.value.elements] if isinstance(node.value, cst.Tuple) else [node.value]
            refs = tuple(self._returned_object(v, node) for v in values)
            if any(r is not None for r in refs):
                found[self.keys[id(function)]] = refs
        return tuple(found.items())

    def _returned_object(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        value = unwrap_moves(value)
        if isinstance(value, cst.Call):
            owner = self._class_ref(value.func, at)
            if owner is not None and (dotted(value.func) or "").rsplit(".", 1)[-1][:1].isupper():
                return owner
            factory = self.target(value.func, value)
            return ("returned", factory, None) if factory is not None and factory[0] in ("import", "local") else None
        return self._instance_class(value, at) if isinstance(value, cst.Name) else None

    def _argument_classes(self, call: cst.Call) -> tuple[tuple[int | str, Ref], ...]:
        """``train_one_epoch(model, criterion, ...)``: which arguments are objects of a
        class, so the callee's ``criterion(out, y)`` resolves to that class's forward."""
        found: list[tuple[int | str, Ref]] = []
        position = 0
        for arg in call.args:
            if arg.star:
                break  # positions after *args are unknown
            owner = self._instance_class(arg.value, call) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            if owner is not None:
                found.append((arg.keyword.value if arg.keyword is not None else position, owner))
            if arg.keyword is None:
                position += 1
        return tuple(found)

    @cached_property
    def _assigned_from_calls(self) -> tuple[set[str], set[str]]:
        """Names assigned from a call of a Capitalised name (an object of a class), and
        from a call of a compiler (``torch.compile(f)``): the only names worth a lookup."""
        objects: set[str] = set()
        compiled: set[str] = set()
        for assign in self.ctx.tree.nodes(cst.Assign):
            value = unwrap_moves(assign.value)
            if not isinstance(value, cst.Call):
                continue
            callee = dotted(value.func) or ""
            names = {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
            unpacked = {e.value.value for t in assign.targets if isinstance(t.target, (cst.Tuple, cst.List)) for e in t.target.elements if isinstance(e.value, cst.Name)}
            objects |= unpacked  # `model, criterion = build(args)`: a factory's objects, maybe
            if callee.rsplit(".", 1)[-1][:1].isupper() or callee.rsplit(".", 1)[-1].startswith(_FACTORY_PREFIXES):
                objects |= names
            if self.ctx.qname(value.func) in _COMPILERS:
                compiled |= names
        return objects, compiled

    # --- objects of the project's classes ----------------------------------------------
    def _instance_class(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The class ``expr`` is an instance of, when it was built here from a class that
        may be the project's: ``meter = MetricLogger()``, ``self.criterion = SetCriterion()``."""
        # `node = node.parent()` in a loop reaches itself: such a cycle names no class
        resolving: set[tuple[int, int]] = self.__dict__.setdefault("_resolving", set())
        key = (id(expr), id(at))
        if key in resolving:
            return None
        resolving.add(key)
        try:
            return self._instance_class_of(expr, at)
        finally:
            resolving.discard(key)

    def _instance_class_of(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        if isinstance(expr, cst.Name):
            if expr.value not in self._assigned_from_calls[0]:
                return None  # never assigned from a call: skip the binding lookup
            binding = self.ctx.bindings.reaching(expr.value, at)
            value = unwrap_moves(getattr(binding, "value", None))
            if not isinstance(value, cst.Call):
                return None
            element = binding.element  # type: ignore[union-attr]
            if element is None:
                owner = self._class_ref(value.func, at)
                if owner is not None and (dotted(value.func) or "").rsplit(".", 1)[-1][:1].isupper():
                    return owner
            # `model, criterion, post = build_model(args)`: what the factory returns there
            factory = self.target(value.func, value)
            return ("returned", factory, element) if factory is not None and factory[0] == "import" or factory is not None and factory[0] == "local" else None
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            cls = self.ctx.tree.enclosing_class(at)
            return self._self_attributes.get(id(cls), {}).get(expr.attr.value) if cls is not None else None
        return None

    def _parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, str] | None:
        """(function key, name) when ``expr`` is a parameter of the enclosing function."""
        if not isinstance(expr, cst.Name) or expr.value in ("self", "cls"):
            return None
        function = self.ctx.tree.enclosing_function(at)
        if function is None:
            return None
        bound = self.ctx.bindings.lookup(expr.value, at)
        if bound and all(b.kind == "param" for b in bound) and expr.value in positional(function):
            return (self.keys[id(function)], expr.value)
        return None

    def _class_ref(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        name = dotted(func)
        if name is None or name in _BUILTINS:
            return None
        if "." not in name and name in self._module_classes:
            return ("local", self._module_classes[name])
        head, _, rest = name.partition(".")
        if head in self.relative:
            level, module = self.relative[head]
            return ("import", level, f"{module}.{rest}" if rest else module)
        qualified = self.ctx.imports.qualify(func)
        if qualified is not None and qualified.split(".")[0] not in _NOT_PROJECT:
            return ("import", 0, qualified)
        return None

    @cached_property
    def _module_classes(self) -> dict[str, str]:
        body = self.ctx.tree.module.body
        return {s.name.value: self.class_keys[id(s)] for s in body if isinstance(s, cst.ClassDef)}

    @cached_property
    def _self_attributes(self) -> dict[int, dict[str, Ref]]:
        """For each class: ``self.x = Cls(...)`` assignments in its methods, as x -> class."""
        found: dict[int, dict[str, Ref]] = {}
        for assign in self.ctx.tree.nodes(cst.Assign):
            value = unwrap_moves(assign.value)
            if not isinstance(value, cst.Call):
                continue
            for target in assign.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                    cls = self.ctx.tree.enclosing_class(assign)
                    ref = self._class_ref(value.func, assign) if cls is not None else None
                    if ref is not None:
                        found.setdefault(id(cls), {})[t.attr.value] = ref
        for assign in self.ctx.tree.nodes(cst.Assign):  # `self.matcher = matcher`: a constructor argument
            if not isinstance(assign.value, cst.Name):
                continue
            param = self._parameter(assign.value, assign)
            cls = self.ctx.tree.enclosing_class(assign)
            for target in assign.targets:
                t = target.target
                if param is not None and cls is not None and isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                    found.setdefault(id(cls), {}).setdefault(t.attr.value, ("passed", *param))
        return found




def unwrap_moves(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``Net(...).cuda().eval()`` → ``Net(...)``: moves and modes keep the object."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    return value


def positional(function: cst.FunctionDef) -> tuple[str, ...]:
    params = function.params
    return tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))
