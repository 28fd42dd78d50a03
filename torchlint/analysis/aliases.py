"""Names bound to classes, for the step summary: ``block = partial(ResnetBlock, groups=8)``,
``klass = FullAttention if full else LinearAttention`` (a call of such a name builds an
object of each), and ``step = partial(run, model)`` (a call of it passes ``model`` first).
A mixin of ObjectRefs, which supplies ``ctx``, ``_class_ref`` and ``_assigned_from_calls``."""

from __future__ import annotations

from functools import cached_property
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
        partial(ResnetBlock, groups=8)``, ``klass = FullAttention if full else LinearAttention``,
        or one class in each branch of an ``if``/``elif`` (DALLE's ``attn_class``): each may be built."""
        if depth >= 4 or name.value not in self._alias_names:
            return None  # never bound to a class, a choice of classes or a partial: skip the lookup
        reaching = self.ctx.bindings.reaching_each(name.value, at)
        return either(self._class_named(b.value, b.node, depth) for b in reaching if b.kind == "assign" and b.element is None)

    @cached_property
    def _alias_names(self) -> set[str]:
        """Names assigned a value that may name classes: a conditional expression, a name or
        attribute, or a call of ``partial``."""
        found: set[str] = set()
        for assign in self.ctx.tree.nodes(cst.Assign):
            if type(assign.value) in (cst.IfExp, cst.Name, cst.Attribute) or type(assign.value) is cst.Call and self.ctx.qname(assign.value.func) == "functools.partial":
                found.update(t.target.value for t in assign.targets if type(t.target) is cst.Name)
        return found

    def constructed(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """The classes a call of ``name`` constructs, when ``name`` is bound to a class or to
        one of several (``execute_type = ReversibleSequence if reversible else SequentialSequence``,
        then ``execute_type(layers)``): each class's ``__init__`` receives the call's arguments. None
        where a branch binds a ``partial`` with positional arguments: they would take the call's places."""
        if name.value not in self._alias_names:
            return None
        reaching = self.ctx.bindings.reaching_each(name.value, at)
        chosen = len(reaching) > 1 or bool(reaching) and type(reaching[0].value) is cst.IfExp
        if chosen and any(_fills_positions(b.value) for b in reaching):
            return None  # (one partial alone is fine: `partial_arguments` puts its arguments first)
        return self._aliased_class(name, at, 0)

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


def _fills_positions(value: cst.BaseExpression | None) -> bool:
    """Does a choice of classes hold a ``partial`` that fills positional parameters?"""
    if type(value) is cst.IfExp:
        return _fills_positions(value.body) or _fills_positions(value.orelse)
    return type(value) is cst.Call and any(a.keyword is None for a in value.args[1:])
