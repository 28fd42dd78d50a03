"""Per-file summary of where steps happen: functions, the calls between them, class bases
and framework hooks. Plain data, so files are analysed independently (in any process,
from a cache) and joined cheaply by :mod:`torchlint.analysis.project`.

A reference to a callee is a tuple, resolved later against the whole project:

- ``("local", key)``: a function of this file (``key`` is ``"f"``, ``"Cls.m"``, ``"f.inner"``);
- ``("method", class_key, name)``: ``self.name(...)`` inside a method of ``class_key``;
- ``("import", level, dotted)``: a name imported from another module (level > 0: relative);
- ``("star", name)``: a bare name that only a ``from m import *`` can define;
- ``("object", class_ref, name)``: method ``name`` of an instance of the class ``class_ref``
  refers to (``meter.update()``; ``criterion(x)`` is ``"__call__"``: ``forward`` first);
- a class reference may also be ``("returned", factory_ref, element)``, what a factory
  returns (``model, criterion = build(args)``), or ``("passed", function_key, parameter)``,
  what the callers pass for a parameter (``CallSite.args`` records it; ``criterion(x)``
  on a parameter, ``self.matcher = matcher`` in ``__init__``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis import frameworks
from torchlint.analysis.names import dotted
from torchlint.findings import Location

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchlint.analysis.context import FileContext

Ref = tuple
# Libraries whose functions are never the project's own: their calls are not recorded.
_NOT_PROJECT = frozenset({"torch", "numpy", "np", "math", "os", "sys", "typing", "time", "random", "logging", "json", "re", "collections", "functools", "itertools", "pathlib", "copy", "warnings", "tqdm", "transformers", "lightning", "pytorch_lightning", "torchvision", "torchaudio", "torchtext", "pandas", "sklearn", "scipy", "matplotlib", "wandb", "datasets", "accelerate"})
_BUILTINS = frozenset(dir(builtins))
_FACTORY_PREFIXES = ("build", "create", "make", "get_model", "load_model", "setup")
_COMPILERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial", "torch.func.functional_call"})


@dataclass(frozen=True, slots=True)
class CallSite:
    caller: str  # function key; "" at module level
    target: Ref
    loop: str | None  # "a training loop" when the call is in a hot loop; None: runs when its caller runs
    location: Location | None = None  # hot call sites and calls made by possible hooks (`related`)
    args: tuple[tuple[int | str, Ref], ...] = ()  # arguments that are objects of classes: position or keyword -> class


@dataclass(frozen=True, slots=True)
class Hook:
    function: str  # key
    text: str  # "Lightning `training_step`"


@dataclass(frozen=True, slots=True)
class ClassSummary:
    key: str
    bases: tuple[Ref, ...]
    methods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FileSummary:
    path: str  # absolute
    functions: tuple[str, ...]
    classes: tuple[ClassSummary, ...]
    calls: tuple[CallSite, ...]
    hooks: tuple[Hook, ...]
    stars: tuple[tuple[int, str], ...] = ()  # `from m import *`: (level, dotted module)
    exports: tuple[tuple[str, Ref], ...] = ()  # module-level imports others may import from here
    trains: tuple[str, ...] = ()  # functions that call `.backward()` or an optimizer step
    host_only: bool = False  # the file never touches a device (analysis/devices.py)
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # function key -> positional parameter names
    returns: tuple[tuple[str, tuple[Ref | None, ...]], ...] = ()  # factory key -> classes it returns, by element


def function_key(ctx: FileContext, function: cst.FunctionDef) -> str:
    """``Cls.m`` / ``f.inner``: the function's dotted name within its file."""
    parts = [function.name.value]
    for ancestor in ctx.tree.ancestors(function):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            parts.append(ancestor.name.value)
    return ".".join(reversed(parts))


class StepSummarizer:
    """Builds a file's :class:`FileSummary`. Positions are asked only for the calls in hot
    loops (:meth:`hot_call_nodes`), so the engine locates them in the same codegen pass
    as the findings."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        tree = ctx.tree
        self.functions = tree.nodes(cst.FunctionDef)
        self.keys = {id(f): function_key(ctx, f) for f in self.functions}
        self.class_keys = {id(c): self._class_key(c) for c in tree.nodes(cst.ClassDef)}
        self.relative = _relative_imports(tree)
        self.star = any(isinstance(n.names, cst.ImportStar) for n in tree.nodes(cst.ImportFrom))

    def _class_key(self, cls: cst.ClassDef) -> str:
        parts = [cls.name.value]
        for ancestor in self.ctx.tree.ancestors(cls):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                parts.append(ancestor.name.value)
        return ".".join(reversed(parts))

    def hot_call_nodes(self) -> list[cst.Call]:
        """The calls whose positions the summary needs: those made from hot loops, and
        those made by functions a framework may call per step (the step's call sites)."""
        return [call for caller, _, loop, call in self._pending if self._located(caller, loop)]

    def _located(self, caller: str, loop: str | None) -> bool:
        return loop is not None or caller in self._hook_candidates

    @cached_property
    def _hook_candidates(self) -> set[str]:
        named = {key for key in self.keys.values() if "." in key and key.rsplit(".", 1)[-1] in frameworks.HOOK_METHOD_NAMES}
        return named | {hook.function for hook in self._hooks()}

    @cached_property
    def _pending(self) -> list[tuple[str, Ref, str | None, cst.Call]]:
        found = []
        for call in self.ctx.tree.nodes(cst.Call):
            target = self.target(call.func, call)
            if target is None:
                continue
            placed = self._placement(call)
            if placed is not None:
                found.append((placed[0], target, placed[1], call))
        return found

    def summary(self, path: str, locate: Callable[[cst.CSTNode], Location]) -> FileSummary:
        calls = tuple(
            CallSite(caller, target, loop, locate(call) if self._located(caller, loop) else None, self._argument_classes(call))
            for caller, target, loop, call in self._pending
        )
        stars = tuple(star_modules(self.ctx.tree))
        return FileSummary(
            path, tuple(self.keys.values()), self._classes(), calls, self._hooks(), stars, self._exports(), self._trains(),
            host_only=self.ctx.imports_torch() and self.ctx.devices.host_only(),
            params=tuple((self.keys[id(f)], _positional(f)) for f in self.functions),
            returns=self._returns(),
        )

    def _returns(self) -> tuple[tuple[str, tuple[Ref | None, ...]], ...]:
        """What factories return, element by element, when it is an object of a class:
        ``return model, criterion, post`` (or ``return build(args)``: whatever that returns)."""
        found = []
        for function in self.functions:
            for node in self.ctx.tree.descendants(function):
                if not isinstance(node, cst.Return) or node.value is None or self.ctx.tree.enclosing_function(node) is not function:
                    continue
                values = [e.value for e in node.value.elements] if isinstance(node.value, cst.Tuple) else [node.value]
                refs = tuple(self._returned_object(v, node) for v in values)
                if any(r is not None for r in refs):
                    found.append((self.keys[id(function)], refs))
                    break
        return tuple(found)

    def _returned_object(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        value = _unwrap_moves(value)
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

    def _trains(self) -> tuple[str, ...]:
        ctx, found = self.ctx, set()
        for call in ctx.method_calls(("backward", "step")):
            function = ctx.tree.enclosing_function(call)
            if function is not None and ctx.loops.is_step_call(call):
                found.add(self.keys[id(function)])
        return tuple(sorted(found))

    def _exports(self) -> tuple[tuple[str, Ref], ...]:
        """Names this module re-exports by importing them (``from .metrics import accuracy``
        in a package ``__init__``), so ``from pkg import accuracy`` resolves through it."""
        found: list[tuple[str, Ref]] = [(name, ("import", level, target)) for name, (level, target) in self.relative.items()]
        for name, target in self.ctx.imports.module_level.items():
            if target.split(".")[0] not in _NOT_PROJECT and name not in self.relative:
                found.append((name, ("import", 0, target)))
        return tuple(found)

    # --- where a call runs -----------------------------------------------------------
    def _placement(self, call: cst.Call) -> tuple[str, str | None] | None:
        """(caller key, hot loop text or None), or None when the call does not run per
        caller run (module-level code outside hot loops, rare branches)."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(call)
        caller = self.keys[id(function)] if function is not None else ""
        for loop in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(loop):
                if ctx.guards.rare(call, stop=loop):
                    return None  # every N steps, or a first-pass branch
                return caller, ctx.loops.describe(loop)
        if function is None or ctx.guards.rare(call, stop=function):
            return None
        return caller, None

    # --- what a call refers to ---------------------------------------------------------
    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        ctx = self.ctx
        if isinstance(func, cst.Name):
            local = self._local_function(func.value, at)
            if local is not None:
                return ("local", local)
            if func.value in self._module_classes:
                return ("local", self._module_classes[func.value])  # a constructor: its arguments matter
            if func.value in self.relative:
                level, name = self.relative[func.value]
                return ("import", level, name)
            qualified = ctx.imports.qualify(func)
            if qualified is not None:
                return None if qualified.split(".")[0] in _NOT_PROJECT else ("import", 0, qualified)
            if func.value in _BUILTINS:
                return None
            compiled = self._compiled_alias(func, at)
            if compiled is not None:
                return compiled
            owner = self._instance_class(func, at)
            if owner is not None:
                return ("object", owner, "__call__")  # a module's forward, an object's __call__
            param = self._parameter(func, at)
            if param is not None:
                return ("object", ("passed", *param), "__call__")  # `criterion(out, y)`: what the callers pass
            if self.star and func.value not in _BUILTINS:
                return ("star", func.value)
            return None
        if isinstance(func, cst.Attribute):
            if isinstance(func.value, cst.Name) and func.value.value == "self":
                owner = self._instance_class(func, at)
                if owner is not None:
                    return ("object", owner, "__call__")  # `self.criterion(out, y)`
                cls = ctx.tree.enclosing_class(at)
                return ("method", self.class_keys[id(cls)], func.attr.value) if cls is not None else None
            owner = self._instance_class(func.value, at)
            if owner is not None:
                return ("object", owner, func.attr.value)  # `meter.update(...)` on a project class
            name = dotted(func)
            if name is None:
                return None
            head, _, rest = name.partition(".")
            if head in self.relative:
                level, module = self.relative[head]
                return ("import", level, f"{module}.{rest}")
            qualified = ctx.imports.qualify(func)
            if qualified is not None and qualified.split(".")[0] not in _NOT_PROJECT:
                return ("import", 0, qualified)
        return None

    def _local_function(self, name: str, at: cst.CSTNode) -> str | None:
        """The key of the ``def name`` visible at ``at``: nested in an enclosing function
        first, then at module level (methods are reached through ``self``)."""
        if name not in self._def_names:
            return None  # no function of this file has that name
        for ancestor in self.ctx.tree.ancestors(at):
            if isinstance(ancestor, cst.FunctionDef):
                key = self._defined_in.get(id(ancestor), {}).get(name)
                if key is not None:
                    return key
        return self._defined_in.get(id(self.ctx.tree.module), {}).get(name)

    @cached_property
    def _def_names(self) -> set[str]:
        return {names for table in self._defined_in.values() for names in table}

    @cached_property
    def _defined_in(self) -> dict[int, dict[str, str]]:
        """For the module and each function: the functions defined directly in its body."""
        found: dict[int, dict[str, str]] = {}
        for function in self.functions:
            parent = self.ctx.tree.parent(function)
            owner = self.ctx.tree.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
            if isinstance(owner, (cst.FunctionDef, cst.Module)):
                found.setdefault(id(owner), {})[function.name.value] = self.keys[id(function)]
        return found

    @cached_property
    def _assigned_from_calls(self) -> tuple[set[str], set[str]]:
        """Names assigned from a call of a Capitalised name (an object of a class), and
        from a call of a compiler (``torch.compile(f)``): the only names worth a lookup."""
        objects: set[str] = set()
        compiled: set[str] = set()
        for assign in self.ctx.tree.nodes(cst.Assign):
            value = _unwrap_moves(assign.value)
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

    def _compiled_alias(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """``step = torch.compile(train_step)`` then ``step(x)``: the call runs ``train_step``."""
        if name.value not in self._assigned_from_calls[1]:
            return None
        ctx = self.ctx
        binding = ctx.bindings.reaching(name.value, at)
        value = getattr(binding, "value", None)
        if isinstance(value, cst.Call) and ctx.qname(value.func) in _COMPILERS and value.args:
            first = value.args[0].value
            if isinstance(first, cst.Name) and first.value != name.value:
                return self.target(first, value)
        return None

    # --- objects of the project's classes ----------------------------------------------
    def _instance_class(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The class ``expr`` is an instance of, when it was built here from a class that
        may be the project's: ``meter = MetricLogger()``, ``self.criterion = SetCriterion()``."""
        if isinstance(expr, cst.Name):
            if expr.value not in self._assigned_from_calls[0]:
                return None  # never assigned from a call: skip the binding lookup
            binding = self.ctx.bindings.reaching(expr.value, at)
            value = _unwrap_moves(getattr(binding, "value", None))
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
        if bound and all(b.kind == "param" for b in bound) and expr.value in _positional(function):
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
            value = _unwrap_moves(assign.value)
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

    # --- classes and framework hooks ---------------------------------------------------
    def _classes(self) -> tuple[ClassSummary, ...]:
        found = []
        for cls in self.ctx.tree.nodes(cst.ClassDef):
            bases = tuple(ref for base in cls.bases if base.keyword is None and (ref := self._base_ref(base.value, cls)) is not None)
            methods = tuple(s.name.value for s in _block(cls.body) if isinstance(s, cst.FunctionDef))
            found.append(ClassSummary(self.class_keys[id(cls)], bases, methods))
        return tuple(found)

    def _base_ref(self, base: cst.BaseExpression, cls: cst.ClassDef) -> Ref | None:
        name = dotted(base)
        if name is None:
            return None
        for other in self.ctx.tree.nodes(cst.ClassDef):
            if other is not cls and other.name.value == name:
                return ("local", self.class_keys[id(other)])
        head, _, rest = name.partition(".")
        if head in self.relative:
            level, module = self.relative[head]
            return ("import", level, f"{module}.{rest}" if rest else module)
        qualified = self.ctx.imports.qualify(base)
        if qualified is not None:
            return ("import", 0, qualified)
        return ("star", name) if self.star else None

    @cached_property
    def _hooks_found(self) -> tuple[Hook, ...]:
        return self._find_hooks() if any(m.split(".")[0] == "ignite" for m in self.ctx.imports.modules) else ()

    def _hooks(self) -> tuple[Hook, ...]:
        """Functions registered with ignite (the only registration API in the table)."""
        return self._hooks_found

    def _find_hooks(self) -> tuple[Hook, ...]:
        ctx = self.ctx
        hooks: list[Hook] = []
        for call in ctx.tree.nodes(cst.Call):
            text = frameworks.STEP_REGISTRATIONS.get(ctx.qname(call.func) or "")
            if text is not None and call.args:
                target = self.target(call.args[0].value, call)
                if target is not None and target[0] == "local":
                    hooks.append(Hook(target[1], text))
            if ctx.method_name(call) == "add_event_handler" and len(call.args) >= 2 and _per_step_event(call.args[0].value):
                target = self.target(call.args[1].value, call)
                if target is not None and target[0] == "local":
                    hooks.append(Hook(target[1], "an ignite iteration handler"))
        for function in self.functions:
            for decorator in function.decorators:
                d = decorator.decorator
                if isinstance(d, cst.Call) and isinstance(d.func, cst.Attribute) and d.func.attr.value == "on" and d.args and _per_step_event(d.args[0].value):
                    hooks.append(Hook(self.keys[id(function)], "an ignite iteration handler"))
        return tuple(hooks)


_MOVES = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16", "requires_grad_"})


def _unwrap_moves(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``Net(...).cuda().eval()`` → ``Net(...)``: moves and modes keep the object."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _MOVES:
        value = value.func.value
    return value


def _positional(function: cst.FunctionDef) -> tuple[str, ...]:
    params = function.params
    return tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def _per_step_event(expr: cst.BaseExpression) -> bool:
    """``Events.ITERATION_COMPLETED``, but not ``Events.ITERATION_COMPLETED(every=100)``."""
    name = dotted(expr) or ""
    return name.rsplit(".", 1)[-1] in frameworks.PER_STEP_EVENTS


def _block(body: cst.BaseSuite) -> tuple[cst.CSTNode, ...]:
    return tuple(body.body) if isinstance(body, cst.IndentedBlock) else ()


def _relative_imports(tree) -> dict[str, tuple[int, str]]:  # type: ignore[no-untyped-def]
    """Names bound by ``from .m import f`` / ``from . import m``: name -> (level, dotted)."""
    found: dict[str, tuple[int, str]] = {}
    for node in tree.nodes(cst.ImportFrom):
        if not node.relative or isinstance(node.names, cst.ImportStar):
            continue
        module = dotted(node.module) if node.module is not None else ""
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            bound = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            found[bound] = (len(node.relative), f"{module}.{name}" if module else name)
    return found


def star_modules(tree) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    """``from m import *`` modules as (level, dotted)."""
    found = []
    for node in tree.nodes(cst.ImportFrom):
        if isinstance(node.names, cst.ImportStar):
            found.append((len(node.relative), dotted(node.module) if node.module is not None else ""))
    return found
