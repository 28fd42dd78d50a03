"""The classes (``ClassSummary``) and a framework's per-step handlers (``Hook``) of a file, for the step summary (StepSummarizer's part)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis import frameworks
from torchlint.analysis.buffer_modules import buffers_only
from torchlint.analysis.dataset_work import dataset_work
from torchlint.analysis.frozen import class_weights
from torchlint.analysis.loader_classes import loader_sets, passed_up_off
from torchlint.analysis.members import abstract_methods, class_body
from torchlint.analysis.names import dotted
from torchlint.analysis.decoder_caches import cache_methods, keeps_a_cache
from torchlint.analysis.self_attributes import self_attributes
from torchlint.analysis.summary import ClassSummary, Hook, Ref
from torchlint.analysis.weight_kinds import BUFFERS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ClassSummaries:
    """The file's classes and its framework hooks (see the module docstring)."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    functions: list[cst.FunctionDef]
    relative: dict[str, tuple[int, str]]
    star: bool

    def _classes(self) -> tuple[ClassSummary, ...]:
        found = []
        for cls in self.ctx.tree.nodes(cst.ClassDef):
            sets, kept = self_attributes(self.ctx, cls)
            bases = tuple(ref for base in cls.bases if base.keyword is None and (ref := self._base_ref(base.value, cls)) is not None)
            methods = tuple(s.name.value for s in class_body(cls) if isinstance(s, cst.FunctionDef))
            test = self.ctx.in_tests(cls) or any(part.startswith("Test") for part in self.class_keys[id(cls)].split("."))
            weights = (BUFFERS if buffers_only(self.ctx, cls) else class_weights(self.ctx, cls)) if self.ctx.is_module_class(cls.name.value) else ""
            found.append(ClassSummary(self.class_keys[id(cls)], bases, methods, self.class_attributes(cls), test, dataset_work(self.ctx, cls),
                                      loader_sets(self.ctx, cls), weights=weights, cache_methods=cache_methods(cls),
                                      keeps_cache=keeps_a_cache(self.ctx, cls), abstract=abstract_methods(cls),
                                      aliases=self.class_aliases(cls), copies=self.copied_attributes(cls),
                                      sets=sets, kept=kept, passes_off=passed_up_off(self.ctx, cls)))
        return tuple(found)

    def _base_ref(self, base: cst.BaseExpression, cls: cst.ClassDef) -> Ref | None:
        name = dotted(base)
        if name is None:
            return None
        for other in self.ctx.tree.classes_named(name):
            if other is not cls:
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
    def _hooks(self) -> tuple[Hook, ...]:
        """Functions registered with ignite (the only registration API in the table)."""
        return self._find_hooks() if any(m.split(".")[0] == "ignite" for m in self.ctx.imports.modules) else ()

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


def _per_step_event(expr: cst.BaseExpression) -> bool:
    """``Events.ITERATION_COMPLETED``, but not ``Events.ITERATION_COMPLETED(every=100)``."""
    name = dotted(expr) or ""
    return name.rsplit(".", 1)[-1] in frameworks.PER_STEP_EVENTS
