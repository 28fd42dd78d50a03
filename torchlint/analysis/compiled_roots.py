"""What a file hands to ``torch.compile``, for the step summary: the roots of the code
dynamo traces (TL504 looks for graph breaks there; :mod:`torchlint.analysis.compiled_reach`
follows the calls from them across the project). A mixin of StepSummarizer, which supplies
``ctx``, ``keys``, ``target`` and the object lookups of :class:`ObjectRefs`.

A root is a function decorated ``@torch.compile`` (with or without arguments), what
``torch.compile(x)`` is given (a function, a method, a model object or a model built in
place: its ``forward``), and a model compiled in place by ``model.compile()``. Functions
decorated ``@torch.compiler.disable`` run eagerly: the reach stops there.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_shapes import is_none
from torchlint.analysis.positions import plain_code
from torchlint.analysis.summary import CompiledCalls, Ref
from torchlint.analysis.switch_words import SettingTest

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

COMPILE = frozenset({"torch.compile"})
DISABLE = frozenset({"torch.compiler.disable", "torch._dynamo.disable"})
# `nn.Module.compile(**kwargs)` forwards these to torch.compile; Keras's `model.compile`
# takes an optimizer and a loss, so any other argument says it is not PyTorch's.
_COMPILE_KEYWORDS = frozenset({"fullgraph", "dynamic", "backend", "mode", "options", "disable"})


class CompiledRoots:
    """Roots of compiled code and functions excluded from it (see the module docstring)."""

    ctx: FileContext
    keys: dict[int, str]

    @cached_property
    def compiled_roots(self) -> tuple[tuple[Ref, str, Ref | None], ...]:
        """(callee reference, how it is compiled: "`@torch.compile`", "`torch.compile(model)`",
        and a method that, if the project defines it, says this is no root: a class with a
        ``compile()`` of its own is not ``nn.Module.compile``)."""
        return tuple(root for root, _, _ in self._roots)

    @cached_property
    def compiled_calls(self) -> tuple[CompiledCalls | None, ...]:
        """For each root, how the file calls the compiled object: ``model = torch.compile(model)``
        then ``model(x, y)`` passes ``(2, ())``, ``evaluate(model, loader)`` hands it to
        ``evaluate``'s first parameter; None where it may be called anyhow (a decorated function,
        a model compiled in place, an object kept, returned or wrapped): any argument."""
        return tuple(self._calls_of(made) if made is not None else None for _, made, _ in self._roots)

    @cached_property
    def compiled_guards(self) -> tuple[tuple[tuple[SettingTest, ...], str], ...]:
        """For each root, the settings of the run its compile call is made only with (``if
        args.torchcompile: model = torch.compile(model)``), and the function making the call
        ("" at module level, or for a decorator): the join asks that function's calls where the
        call itself has none (open_clip's ``task.compile()`` under ``if args.torchcompile:``)."""
        return tuple(self._guard_of(applied) if applied is not None else ((), "") for _, _, applied in self._roots)

    @cached_property
    def compile_calls(self) -> tuple[tuple[str, Ref | None, str, tuple[SettingTest, ...]], ...]:
        """``FileSummary.compile_calls``: each call of a function named to compile, a test's aside, with
        the settings of the run it is made only with (``task.compile()`` under ``if args.torchcompile:``)."""
        found = []
        for call in self.ctx.tree.nodes(cst.Call):
            func = call.func
            name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
            if "compile" not in name.lower() or self.ctx.in_tests(call):
                continue  # (only such calls are asked: the walk up a call's tests is not paid for every call)
            target = self.target(func, call)  # type: ignore[attr-defined]
            if target is None and self.ctx.qname(func) is not None:
                continue  # `torch.compile(...)`, `re.compile(...)`: a library's, no function of the project
            function = self.ctx.tree.enclosing_function(call)
            caller = self.keys[id(function)] if function is not None else ""
            found.append((name, target, caller, self.ctx.guards.settings_required(call)))
        return tuple(found)

    def _guard_of(self, applied: cst.Call) -> tuple[tuple[SettingTest, ...], str]:
        """``compiled_guards``' entry for the call ``applied`` that compiles a root."""
        function = self.ctx.tree.enclosing_function(applied)
        return self.ctx.guards.settings_required(applied), self.keys[id(function)] if function is not None else ""

    @cached_property
    def _roots(self) -> list[tuple[tuple[Ref, str, Ref | None], cst.Call | None, cst.Call | None]]:
        """Each root with the ``torch.compile(x)`` call that made it (None: a decorator, ``model.compile()``),
        and the call that compiles it (``torch.compile(x)``, ``model.compile()``; None: a decorator)."""
        ctx = self.ctx
        if not self._mentions_compile:
            return []
        found: list[tuple[tuple[Ref, str, Ref | None], cst.Call | None, cst.Call | None]] = []
        for function in ctx.tree.nodes(cst.FunctionDef):
            if any(self._decorator_in(d, COMPILE) for d in function.decorators) and not ctx.in_tests(function):
                found.append(((("local", self.keys[id(function)]), "`@torch.compile`", None), None, None))
        for cls in ctx.tree.nodes(cst.ClassDef):  # `@torch.compile` on an nn.Module class: its forward
            if any(self._decorator_in(d, COMPILE) for d in cls.decorators) and not ctx.in_tests(cls):
                found.append(((("method", self.class_keys[id(cls)], "forward"), "`@torch.compile`", None), None, None))  # type: ignore[attr-defined]
        for call in ctx.calls_named(*COMPILE):
            if ctx.in_tests(call):
                continue  # a test compiles a library's function on toy inputs to see that it compiles
            first = call.args[0] if call.args and call.args[0].keyword in (None,) and not call.args[0].star else ctx.keyword(call, "model")
            ref = self._compiled_ref(first.value, call) if first is not None else None
            if ref is not None:
                found.append(((ref, f"`torch.compile({_short(first.value)})`", None), call, call))
        for call in ctx.method_calls("compile"):
            if ctx.qname(call.func) is not None or not self._torch_module_compile(call) or ctx.in_tests(call):
                continue  # `re.compile(...)`, Keras's `model.compile(optimizer, loss)`, a test's
            receiver = call.func.value  # type: ignore[attr-defined]
            owner = self._instance_class(receiver, call)  # type: ignore[attr-defined]
            if owner is not None:
                found.append(((("object", owner, "__call__"), f"`{_short(receiver)}.compile()`", ("object", owner, "compile")), None, call))
        return found

    @cached_property
    def not_compiled(self) -> tuple[str, ...]:
        """Function keys decorated ``@torch.compiler.disable``: dynamo runs them eagerly."""
        if not self.ctx.tree.names_valued("disable"):
            return ()
        return tuple(self.keys[id(f)] for f in self.ctx.tree.nodes(cst.FunctionDef)
                     if any(self._decorator_in(d, DISABLE) for d in f.decorators))

    def _calls_of(self, made: cst.Call) -> CompiledCalls | None:
        """How the name ``made`` is assigned to (``model = torch.compile(model)``) is used where
        that binding reaches: its calls (``model(x)``, ``model.forward(x)``) and the functions of
        the project it is handed to; its other methods (``model.train()``) run no forward. None
        where it is bound to no plain name, or used any other way."""
        ctx = self.ctx
        statement = ctx.tree.parent(made)
        if type(statement) is not cst.Assign or len(statement.targets) != 1 or type(statement.targets[0].target) is not cst.Name:
            return None
        name = statement.targets[0].target.value  # type: ignore[attr-defined]
        given: list[tuple[int, tuple[str, ...]]] = []
        handed: list[tuple[Ref, int | str]] = []
        for use in ctx.tree.names_valued(name):
            reaching = ctx.bindings.reaching(name, use)
            if ctx.tree.is_inside(use, statement) or reaching is None and ctx.tree.enclosing_function(use) is None \
                    or reaching is not None and reaching.node is not statement:
                continue  # the assignment itself, or another binding of the name (a function's global read counts)
            parent = ctx.tree.parent(use)
            if type(parent) is cst.AssignTarget:
                continue  # bound again: what follows uses the new value
            if type(parent) is cst.Attribute and parent.value is use:
                called = ctx.tree.parent(parent)
                if type(called) is not cst.Call or called.func is not parent:
                    continue  # `model.config`: an attribute read, no call of the model
                if parent.attr.value not in ("forward", "__call__"):
                    continue  # `model.train()`, `model.parameters()`: not its forward
                parent = called
            elif type(parent) is cst.Call and parent.func is use:
                pass
            elif type(parent) is cst.Arg and parent.value is use and not parent.star and type(call := ctx.tree.parent(parent)) is cst.Call:
                ref = self.target(call.func, call)  # type: ignore[attr-defined]
                if ref is None or ref[0] not in ("local", "import"):
                    return None  # a library's wrapper (`DDP(model)`), a method of an object: called anyhow
                where = parent.keyword.value if parent.keyword is not None else call.args.index(parent)
                handed.append((ref, where))
                continue
            else:
                return None  # kept, returned, put in a list: called anyhow
            passes = given_arguments(parent)
            if passes is None:
                return None  # `model(*args)`: any argument
            given.append(passes)
        return tuple(given), tuple(handed)

    @property
    def _mentions_compile(self) -> bool:
        return bool(self.ctx.tree.names_valued("compile"))  # most files never name it: no lookups at all

    def _decorator_in(self, decorator: cst.Decorator, names: frozenset[str]) -> bool:
        expr = decorator.decorator
        if type(expr) is cst.Call:  # `@torch.compile(mode="max-autotune")`
            expr = expr.func
        return self.ctx.qname(expr) in names

    def _compiled_ref(self, value: cst.BaseExpression, call: cst.Call) -> Ref | None:
        """What running the compiled object runs: a function, a method, a model's forward."""
        if type(value) is cst.Call:  # `torch.compile(Net(cfg))`
            owner = self._object_of(value, call, None)  # type: ignore[attr-defined]
            return ("object", owner, "__call__") if owner is not None else None
        if type(value) in (cst.Name, cst.Attribute, cst.Subscript):
            return self.target(value, call)  # type: ignore[attr-defined]
        return None

    def _torch_module_compile(self, call: cst.Call) -> bool:
        """``model.compile()`` / ``model.compile(mode="reduce-overhead")``: nn.Module's."""
        return all(arg.star == "**" or arg.keyword is not None and arg.keyword.value in _COMPILE_KEYWORDS for arg in call.args)


def given_arguments(call: cst.Call) -> tuple[int, tuple[str, ...]] | None:
    """How many positional arguments and which keywords a call passes (a literal ``None``
    counts as left out); None when ``*args``/``**kwargs`` may pass anything."""
    if any(arg.star for arg in call.args):
        return None
    positional = [a for a in call.args if a.keyword is None]
    while positional and is_none(positional[-1].value):
        positional.pop()
    keywords = tuple(a.keyword.value for a in call.args if a.keyword is not None and not is_none(a.value))  # type: ignore[union-attr]
    return (len(positional), keywords)


def _short(expr: cst.BaseExpression) -> str:
    text = plain_code(cst.Module([]), expr)
    return text if len(text) <= 30 else text[:27] + "..."
