"""Functions a name of a function is bound to, for the step summary: ``spline_fn = rational_quadratic_spline``
under ``if tails is None:``, ``spline_fn = unconstrained_rational_quadratic_spline`` in its ``else``, then
``spline_fn(inputs=x, ...)`` (VITS' ``piecewise_rational_quadratic_transform``), or ``fn = a if fast else b``:
the call runs one of them, and the tests of a parameter each was picked under (``Guards.flag_of``) go on the
call site (``CallSite.flags``), so the settling follows only the branches the project's values take.
A mixin of CallTargets, which supplies ``ctx``, ``_alias_names`` and ``_function_ref``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.summary import Ref
from torchlint.analysis.switch_words import Flag

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class BranchFunctions:
    ctx: FileContext
    _alias_names: set[str]

    def _function_ref(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:  # pragma: no cover - CallTargets'
        raise NotImplementedError

    def _branch_functions(self, name: cst.Name, at: cst.CSTNode) -> list[tuple[Ref, cst.CSTNode]] | None:
        """Each function a call of ``name`` at ``at`` may run, with the expression that named it; None where
        a binding reaching ``at`` may hold anything else (an object, a parameter, a value of a call)."""
        if name.value not in self._alias_names:
            return None  # (never assigned a name, an attribute or a conditional expression: no lookup)
        reaching = self.ctx.bindings.reaching_each(name.value, at)
        if not reaching or any(b.kind != "assign" or b.element is not None for b in reaching):
            return None
        found: list[tuple[Ref, cst.CSTNode]] = []
        for binding in reaching:
            for arm in _arms(binding.value):
                if type(arm) is cst.Name and arm.value == "None":
                    continue  # (`fn = None` before the branches: a call of it is guarded, or fails)
                ref = self._function_ref(arm, binding.node) if type(arm) in (cst.Name, cst.Attribute) else None
                if ref is None:
                    return None  # (one arm holds what is no function of the project: not followed)
                found.append((ref, arm))
        return found or None

    def branch_function(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """What a call of ``name`` runs where ``name`` is bound to functions of the project: the one, or each."""
        found = self._branch_functions(name, at)
        if found is None:
            return None
        refs = list(dict.fromkeys(ref for ref, _ in found))
        return refs[0] if len(refs) == 1 else ("each", tuple(refs))

    def branch_flags(self, call: cst.Call, target: Ref) -> tuple[Flag, ...]:
        """The tests of a parameter the function ``target`` was picked under for ``call``; () where
        another binding picks it too, or it is picked unconditionally."""
        if type(call.func) is not cst.Name:
            return ()
        arms = [arm for ref, arm in self._branch_functions(call.func, call) or () if ref == target]
        # (picked in two branches: either may run)
        return self.ctx.guards.flag_of(arms[0], identity=True) if len(arms) == 1 else ()


def _arms(value: cst.BaseExpression | None) -> list[cst.BaseExpression | None]:
    """``a if c else b`` -> ``[a, b]`` (nested ones flattened); any other value as itself."""
    arms: list[cst.BaseExpression | None] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) is cst.IfExp:
            pending += [item.orelse, item.body]
        else:
            arms.append(item)
    return arms
