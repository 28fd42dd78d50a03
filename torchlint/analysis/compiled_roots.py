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

from torchlint.analysis.positions import plain_code
from torchlint.analysis.summary import Ref

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
        ctx = self.ctx
        if not self._mentions_compile:
            return ()
        found: list[tuple[Ref, str, Ref | None]] = []
        for function in ctx.tree.nodes(cst.FunctionDef):
            if any(self._decorator_in(d, COMPILE) for d in function.decorators) and not ctx.in_tests(function):
                found.append((("local", self.keys[id(function)]), "`@torch.compile`", None))
        for cls in ctx.tree.nodes(cst.ClassDef):  # `@torch.compile` on an nn.Module class: its forward
            if any(self._decorator_in(d, COMPILE) for d in cls.decorators) and not ctx.in_tests(cls):
                found.append((("method", self.class_keys[id(cls)], "forward"), "`@torch.compile`", None))  # type: ignore[attr-defined]
        for call in ctx.calls_named(*COMPILE):
            if ctx.in_tests(call):
                continue  # a test compiles a library's function on toy inputs to see that it compiles
            first = call.args[0] if call.args and call.args[0].keyword in (None,) and not call.args[0].star else ctx.keyword(call, "model")
            ref = self._compiled_ref(first.value, call) if first is not None else None
            if ref is not None:
                found.append((ref, f"`torch.compile({_short(first.value)})`", None))
        for call in ctx.method_calls("compile"):
            if ctx.qname(call.func) is not None or not self._torch_module_compile(call) or ctx.in_tests(call):
                continue  # `re.compile(...)`, Keras's `model.compile(optimizer, loss)`, a test's
            receiver = call.func.value  # type: ignore[attr-defined]
            owner = self._instance_class(receiver, call)  # type: ignore[attr-defined]
            if owner is not None:
                found.append((("object", owner, "__call__"), f"`{_short(receiver)}.compile()`", ("object", owner, "compile")))
        return tuple(found)

    @cached_property
    def not_compiled(self) -> tuple[str, ...]:
        """Function keys decorated ``@torch.compiler.disable``: dynamo runs them eagerly."""
        if not self.ctx.tree.names_valued("disable"):
            return ()
        return tuple(self.keys[id(f)] for f in self.ctx.tree.nodes(cst.FunctionDef)
                     if any(self._decorator_in(d, DISABLE) for d in f.decorators))

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


def _short(expr: cst.BaseExpression) -> str:
    text = plain_code(cst.Module([]), expr)
    return text if len(text) <= 30 else text[:27] + "..."
