"""A branch no call of its function in its file takes: ``if top_p > 0:`` (a parameter, never bound
again, against a constant) where every call here passes a value that fails the test, by its literal,
a module constant bound once to one, or the default it leaves (``Guards.never_taken``). Only the join
knows whether another file calls the function (``Conditional.off_here``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.guard_shapes import conjuncts
from torchlint.analysis.literal_tests import compared, literal
from torchlint.analysis.switch_words import holds

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class NeverTaken:
    """The part of :class:`~torchlint.analysis.guards.Guards` that reads the calls of a function in its file (its ``ctx``)."""

    ctx: FileContext

    def never_taken(self, node: cst.CSTNode) -> str | None:
        """Words for a ``node`` that no call of its function in this file runs: it sits in the
        body of ``if top_p > 0:`` (also ``if top_k:``, ``if beta != 0``: a parameter, never
        bound again, against a constant) and every call of the function here passes a value
        known to make one such test false (a literal, a module constant bound once to one, or
        the default where the call leaves it out). None otherwise: a call passing anything else,
        a function handed on or called by ``*args``, or no call here. Only the join knows
        whether another file calls it (``Conditional.off_here``)."""
        tree = self.ctx.tree
        function = tree.enclosing_function(node)
        if function is None or tree.enclosing_class(function) is not None:
            return None  # (a method: which calls run it is the object's, not the name's)
        tests, child = [], node
        for ancestor in tree.ancestors(node):
            if ancestor is function:
                break
            if type(ancestor) is cst.If and child is ancestor.body:
                tests.append(ancestor.test)
            child = ancestor
        params = {p.name.value: p for p in (*function.params.params, *function.params.kwonly_params)}
        compared = [(test, found) for test in tests for part in conjuncts(test) if (found := _compared(part, params)) is not None]
        calls = self._only_calls(function) if compared else None
        if not calls:
            return None
        skipped: list[str] = []
        for call in calls:
            off = next((f"{passed[0]} fails `{_code(test)}`" for test, (name, holds) in compared
                        if (passed := self._passed_value(call, function, params[name])) is not None and holds(passed[1]) is False), None)
            if off is None:
                return None  # a call that may take the branch
            skipped.append(off)
        return f"only when a call passes a value no call in the project passes (in every call of `{function.name.value}()`, {'; '.join(dict.fromkeys(skipped))})"

    def _only_calls(self, function: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls of module-level or nested ``function`` in this file, where its name is
        used only to call it, with no ``*args``/``**kwargs`` (else None)."""
        name = function.name.value
        memo: dict[int, list[cst.Call] | None] = self.__dict__.setdefault("_only_calls_memo", {})
        if id(function) not in memo:
            tree = self.ctx.tree
            uses = [n for n in tree.nodes(cst.Name) if n.value == name]
            defined = sum(1 for f in tree.nodes(cst.FunctionDef) if f.name.value == name)
            calls = [tree.parent(n) for n in uses if n is not function.name]
            memo[id(function)] = calls if defined == 1 and calls and all(
                type(c) is cst.Call and c.func is n and not any(a.star for a in c.args)
                for c, n in zip(calls, (n for n in uses if n is not function.name))) else None
        return memo[id(function)]

    def _passed_value(self, call: cst.Call, function: cst.FunctionDef, param: cst.Param) -> tuple[str, object] | None:
        """What ``call`` passes ``param`` (its words, its value), where it is a known constant:
        a literal, a module constant bound once to one, or the default it leaves in place."""
        if any(b.kind != "param" for b in self.ctx.bindings.lookup(param.name.value, param)):
            return None  # bound again in the function: no longer what the caller passed
        given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == param.name.value), None)
        positional = [*function.params.posonly_params, *function.params.params]
        if given is None and param in positional:
            plain = [a.value for a in call.args if a.keyword is None]
            index = positional.index(param)
            given = plain[index] if index < len(plain) else None
        if given is not None:
            return self._constant(given, call)
        default = literal(param.default)
        return (f"the default {default[0]}", default[1]) if default is not None else None

    def _constant(self, value: cst.BaseExpression | None, at: cst.CSTNode) -> tuple[str, object] | None:
        found = literal(value)
        if found is not None or type(value) is not cst.Name:
            return found
        bound = self.ctx.bindings.lookup(value.value, at)  # `TOP_P = 0.0` at module level, bound nowhere else
        if len(bound) != 1 or bound[0].kind != "assign" or bound[0].element is not None or self.ctx.tree.enclosing_function(bound[0].node) is not None:
            return None
        found = literal(bound[0].value)
        return (f"`{value.value}` = {found[0]}", found[1]) if found is not None else None


def _compared(part: cst.BaseExpression, params: dict[str, cst.Param]):  # type: ignore[no-untyped-def]
    """``(parameter, holds)`` for a conjunct that tests a parameter alone against a constant
    (``compared``): ``holds(value)`` says whether it holds for the value passed."""
    found = compared(part)
    if found is None or type(found[0]) is not cst.Name or found[0].value not in params:
        return None
    _, test, constant = found
    return found[0].value, lambda v: holds(test, constant, v)


def _code(test: cst.BaseExpression) -> str:
    return cst.Module([]).code_for_node(test)
