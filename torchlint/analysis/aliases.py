"""Names bound to classes, for the step summary: ``block = partial(ResnetBlock, groups=8)``,
``klass = FullAttention if full else LinearAttention`` (a call of such a name builds an
object of each), and ``step = partial(run, model)`` (a call of it passes ``model`` first).
A mixin of ObjectRefs, which supplies ``ctx``, ``_class_ref`` and ``_assigned_from_calls``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.members import either
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import Ref

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class AliasRefs:
    ctx: FileContext

    def _class_ref(self, name: str | None) -> Ref | None:  # pragma: no cover - ObjectRefs'
        raise NotImplementedError

    @property
    def _assigned_from_calls(self) -> tuple[set[str], set[str]]:  # pragma: no cover - ObjectRefs'
        raise NotImplementedError

    def _aliased_class(self, name: cst.Name, at: cst.CSTNode, depth: int) -> Ref | None:
        """The classes a call of ``name`` builds when ``name`` is bound to classes: ``block =
        partial(ResnetBlock, groups=8)``, ``klass = FullAttention if full else LinearAttention``."""
        binding = self.ctx.bindings.reaching(name.value, at) if depth < 4 else None
        if binding is None or binding.kind != "assign" or binding.element is not None:
            return None
        return self._class_named(binding.value, binding.node, depth)

    def _class_named(self, value: cst.BaseExpression | None, at: cst.CSTNode, depth: int) -> Ref | None:
        value_type = type(value)
        if value_type is cst.IfExp:
            return either((self._class_named(value.body, at, depth), self._class_named(value.orelse, at, depth)))
        if value_type is cst.Call and value.args and self.ctx.qname(value.func) == "functools.partial":
            return self._class_named(value.args[0].value, at, depth)
        name = dotted(value) if value_type in (cst.Name, cst.Attribute) else None
        if name is None or not name.rsplit(".", 1)[-1][:1].isupper():
            return None  # classes only: a partial of a function builds no object
        return self._class_ref(name) or (self._aliased_class(value, at, depth + 1) if value_type is cst.Name else None)

    def partial_arguments(self, call: cst.Call) -> tuple[cst.Arg, ...]:
        """The arguments ``step = functools.partial(run, model)`` binds before those of ``step(x)``."""
        func = call.func
        if type(func) is not cst.Name or func.value not in self._assigned_from_calls[1]:
            return ()
        value = getattr(self.ctx.bindings.reaching(func.value, call), "value", None)
        if type(value) is cst.Call and value.args and self.ctx.qname(value.func) == "functools.partial":
            return tuple(value.args[1:])
        return ()
