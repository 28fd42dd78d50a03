"""The switch a line waits for: a parameter of its function, or an attribute its class's
constructor sets from one, that defaults off and must be passed for the line to run (``if
synced_gpus:`` with ``synced_gpus=False``; ``if self.debug:`` with ``self.debug = debug`` and
``debug=False`` in ``__init__``). As plain data, ``(function key, parameter, optional)``: the
join asks every call of that function in the project (``SettingDefaults.turned_on_nowhere``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.guard_shapes import conjuncts, none_tested

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# (function key, parameter, optional): ``optional`` where the test is ``p is not None`` (or a
# comparison with a literal default): only leaving it out (or None) keeps it off, not a False
Switch = tuple[str, str, bool]


class SwitchedOff:
    """A part of :class:`~torchlint.analysis.guards.Guards`, over its ``opt_in`` and defaults."""

    ctx: FileContext

    def switch_of(self, node: cst.CSTNode) -> Switch | None:
        """The parameter (or constructor parameter) off by default that ``node`` runs only with."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None:
            return None
        key = dotted_function_name(self.ctx.tree, function)
        name = self.opt_in(node)  # type: ignore[attr-defined]
        if name is not None:  # (a literal default compared, `if kind == "flash"`: any value passed may take it)
            return key, name, name in self._literal_defaults(function)  # type: ignore[attr-defined]
        name = self.opt_in(node, optional=True)  # type: ignore[attr-defined]
        if name is not None:
            return key, name, True
        return self._attribute_switch(node, function)

    def _attribute_switch(self, node: cst.CSTNode, function: cst.FunctionDef) -> Switch | None:
        """``if self.flag:`` (``self.flag and``, the ``else`` of ``if not self.flag:``) where
        ``self.flag`` is only ever ``__init__``'s parameter ``flag``, which defaults off and no
        code of the file sets on an object (``model.flag = True``)."""
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is function:
                return None
            kind = type(ancestor)
            test: cst.BaseExpression | None = None
            negated = False
            if kind in (cst.If, cst.IfExp) and child is ancestor.body:  # type: ignore[attr-defined]
                test = ancestor.test  # type: ignore[attr-defined]
            elif kind is cst.IfExp and child is ancestor.orelse or kind is cst.If and child is ancestor.orelse and type(child) is cst.Else:  # type: ignore[attr-defined]
                test, negated = ancestor.test, True  # type: ignore[attr-defined]
            elif kind is cst.BooleanOperation and type(ancestor.operator) is cst.And and child is ancestor.right:  # type: ignore[attr-defined]
                test = ancestor.left  # type: ignore[attr-defined]
            for part in (conjuncts(test) if test is not None and not negated else [_negated(test)] if test is not None else []):
                found = self._from_constructor(part)
                if found is not None:
                    return found
            child = ancestor
        return None

    def _from_constructor(self, part: cst.BaseExpression | None) -> Switch | None:
        optional = False
        if type(part) is cst.Comparison and none_tested(part, negated=True) is not None:
            part, optional = part.left, True  # `self.mask is not None`
        if type(part) is not cst.Attribute or type(part.value) is not cst.Name or part.value.value != "self":
            return None
        found = self.ctx.devices.constructor_parameter(part)  # `Cls.__init__:flag`: every binding is `self.flag = flag` there
        if found is None or part.attr.value in self._set_on_objects():
            return None
        init, _, param = found.rpartition(":")
        definition = next((f for f in self.ctx.tree.nodes(cst.FunctionDef) if dotted_function_name(self.ctx.tree, f) == init), None)
        if definition is None or param not in self._falsy_defaults(definition):  # type: ignore[attr-defined]
            return None  # (a required parameter, or one on by default: its callers decide, as today)
        return init, param, optional

    def _set_on_objects(self) -> frozenset[str]:
        """Attributes this file assigns on an object other than ``self`` (``model.kv_cache = True``)."""
        found = self.__dict__.get("_set_on_objects_memo")
        if found is None:
            found = self.__dict__["_set_on_objects_memo"] = frozenset(
                t.target.attr.value for node in self.ctx.tree.nodes(cst.Assign) for t in node.targets
                if type(t.target) is cst.Attribute and not (type(t.target.value) is cst.Name and t.target.value.value == "self"))
        return found


def _negated(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What must hold in the ``else`` of ``test``: ``flag`` for ``not flag``, ``p is not None`` for ``p is None``."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return test.expression
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Is \
            and type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None":
        return cst.Comparison(test.left, [cst.ComparisonTarget(cst.IsNot(), test.comparisons[0].comparator)])
    return None
