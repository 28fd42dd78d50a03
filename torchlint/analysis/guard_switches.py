"""The switch a line waits for: a parameter of its function, or an attribute its class's
constructor sets from one, that defaults off and must be passed for the line to run (``if
synced_gpus:`` with ``synced_gpus=False``; ``if self.debug:`` with ``self.debug = debug`` and
``debug=False`` in ``__init__``). As plain data, ``(function key, parameter, optional)``: the
join asks every call of that function in the project (``SettingDefaults.turned_on_nowhere``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.literal_tests import compared, literal
from torchlint.analysis.guard_shapes import conjuncts, enclosing_tests, is_none, none_tested
from torchlint.analysis.names import dotted
from torchlint.analysis.switch_words import Flag, holds, switch_off_words

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
        for ancestor, child, test, holds_there in enclosing_tests(self.ctx.tree, node, function):
            for part in (conjuncts(test) if holds_there else [_negated(test)]) if test is not None else ():
                found = self._from_constructor(part)
                if found is not None:
                    return found
            if type(ancestor) is cst.IndentedBlock:
                # after `if not exists(self.checkpoint_path): return` in its block: it runs only with the switch on
                for statement in self.ctx.tree.statements_before(ancestor, child, exits_early):  # type: ignore[arg-type]
                    found = self._from_constructor(_negated(statement.test))  # type: ignore[attr-defined]
                    if found is not None:
                        return found
        return None

    def flag_of(self, node: cst.CSTNode, identity: bool = False) -> tuple[Flag, ...]:
        """Each test of a parameter of ``node``'s function, or of the constructor's parameter
        ``self.x`` holds, that must hold for ``node`` to run, innermost first, whatever its default:
        ``if check:``, ``if self.add_zero_attn:``, ``flag and``, ``if method == "singlestep":``,
        ``self.schedule == "linear"`` (the ``elif`` of another value: the ``else`` of none). The
        join asks whether every call in the project passes one of them a literal that fails it, or
        leaves it at a default that does (``SettingDefaults.passed_off_everywhere``: encodec's
        ``build_stable_quantized_cdf(..., check=False)``); ``switch_of`` gives one switch alone,
        and may stop at a test the callers do pass (wavlm's ``if key_padding_mask is not None:``
        inside ``if self.add_zero_attn:``)."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None:
            return ()
        params = {p.name.value: p for p in (*function.params.params, *function.params.kwonly_params)}
        found: list[Flag] = []
        for ancestor, child, test, holds_there in enclosing_tests(self.ctx.tree, node, function):
            if test is None and type(ancestor) is cst.IndentedBlock:
                # after `if self.block_ngram_repeat <= 0: return` in its block: it runs only where that test fails
                for statement in self.ctx.tree.statements_before(ancestor, child, exits_early):  # type: ignore[arg-type]
                    flag = _failed(self._parameter_flag(statement.test, function, params, identity))  # type: ignore[attr-defined]
                    if flag is not None and flag not in found:
                        found.append(flag)
                continue
            if test is None:
                continue
            if not holds_there:
                # minRF's `if self.ln: ... else: <here>` with `ln=True`; asked for, `tails is not None` in `if tails is None:`'s `else`
                test = _truth_negated(test) or (_identity_negated(test) if identity else None)
            elif type(ancestor) is cst.If:
                test = self._named_test(test, ancestor)  # type: ignore[attr-defined]
            for part in conjuncts(test):
                flag = self._parameter_flag(part, function, params, identity)
                if flag is not None and flag not in found:
                    found.append(flag)
        return tuple(found)

    def _parameter_flag(self, part: cst.BaseExpression, function: cst.FunctionDef, params: dict[str, cst.Param], identity: bool = False) -> Flag | None:
        tested = compared(part, identity)
        if tested is None:
            return None
        operand, test, constant = tested
        if type(operand) is cst.Name and operand.value in params:
            if any(b.kind != "param" for b in self.ctx.bindings.lookup(operand.value, operand)):
                return None  # bound again in the function: no longer what the caller passed
            default = literal(params[operand.value].default)
            return dotted_function_name(self.ctx.tree, function), operand.value, test, constant, (default[1],) if default is not None else ()
        found = self.ctx.devices.constructor_parameter(operand) if type(operand) is cst.Attribute else None
        if found is None and type(operand) is cst.Attribute and operand.attr.value not in self.set_on_objects():  # type: ignore[attr-defined]
            return self._kept_parameter_flag(operand, function, params, test, constant)
        if found is None or operand.attr.value in self.set_on_objects():  # type: ignore[attr-defined]
            return None  # (`model.flag = True` elsewhere in the file: set on an object, not only built)
        init, _, param = found.rpartition(":")
        definition = self.ctx.functions.method("__init__", operand)
        if definition is None or dotted_function_name(self.ctx.tree, definition) != init:
            return None
        declared = next((p for p in (*definition.params.params, *definition.params.kwonly_params) if p.name.value == param), None)
        default = literal(declared.default) if declared is not None else None
        return init, param, test, constant, (default[1],) if default is not None else ()

    def _kept_parameter_flag(self, operand: cst.Attribute, function: cst.FunctionDef, params: dict[str, cst.Param],
                             test: str, constant: object) -> Flag | None:
        """``self.model == "L2"`` in a method that set ``self.model = model`` from its own parameter, the
        attribute's only binding in its class (LPIPS' ``DistModel.initialize(model="net-lin", ...)``):
        a test of that parameter, as ``_parameter_flag``'s."""
        if type(operand.value) is not cst.Name or operand.value.value != "self":
            return None
        bound = self.ctx.bindings.lookup(f"self.{operand.attr.value}", operand)
        names = {b.value.value if b.kind == "assign" and type(b.value) is cst.Name and b.element is None
                 and self.ctx.tree.enclosing_function(b.node) is function else None for b in bound}
        if len(names) != 1 or None in names:
            return None  # (set elsewhere too, or from more than one value: not only what the caller passed)
        name = names.pop()
        if name not in params or any(b.kind != "param" for b in self.ctx.bindings.lookup(name, operand)):
            return None  # (not a parameter, or bound again in the function: no longer what the caller passed)
        default = literal(params[name].default)
        return dotted_function_name(self.ctx.tree, function), name, test, constant, (default[1],) if default is not None else ()

    def switch_words(self, node: cst.CSTNode) -> str:
        """Words for the constructor switch ``node`` runs only with (``switch_of``), for a line whose
        callers may turn it on (the join says "only on an opt-in path" where none does); "" where none.
        A switch of a constructor is a mode the run is built in (imagen's `checkpoint_path`); one of a
        plain function or `forward()` is passed per call (lit-llama's `kv_cache`, given by every decode
        step that reaches the line): its reach, not these words, says how often it runs."""
        found = self.switch_of(node)
        if found is None:
            return ""
        function, param, optional = found
        owner, _, name = function.rpartition(".")
        if name != "__init__":
            return ""
        return switch_off_words(owner, param, optional)

    def _from_constructor(self, part: cst.BaseExpression | None) -> Switch | None:
        optional = False
        if type(part) is cst.Comparison and none_tested(part, negated=True) is not None:
            part, optional = part.left, True  # `self.mask is not None`
        elif type(part) is cst.Call and type(part.func) is cst.Name and part.func.value == "exists" and len(part.args) == 1:
            part, optional = part.args[0].value, True  # lucidrains' `exists(self.mask)`: `self.mask is not None`
        if type(part) is not cst.Attribute or type(part.value) is not cst.Name or part.value.value != "self":
            return None
        found = self.ctx.devices.constructor_parameter(part)  # `Cls.__init__:flag`: every binding is `self.flag = flag` there
        if found is None or part.attr.value in self.set_on_objects():
            return None
        init, _, param = found.rpartition(":")
        definition = self.ctx.functions.method("__init__", part)  # (its class's own: no scan of every function of the file)
        if definition is None or dotted_function_name(self.ctx.tree, definition) != init or param not in self._falsy_defaults(definition):  # type: ignore[attr-defined]
            return None  # (a required parameter, or one on by default: its callers decide, as today)
        return init, param, optional

    def set_on_objects(self) -> frozenset[str]:
        """Attributes this file assigns on an object other than ``self`` (``model.kv_cache = True``)."""
        found = self.__dict__.get("_set_on_objects_memo")
        if found is None:
            found = self.__dict__["_set_on_objects_memo"] = frozenset(
                t.target.attr.value for node in self.ctx.tree.nodes(cst.Assign) for t in node.targets
                if type(t.target) is cst.Attribute and not (type(t.target.value) is cst.Name and t.target.value.value == "self"))
        return found


class AssertedOff:
    """A part of :class:`~torchlint.analysis.guards.Guards`: code an ``assert`` makes dead."""

    ctx: FileContext

    def asserted_off(self, node: cst.CSTNode) -> bool:
        """Does ``node`` run only where a name is given (``if exists(eos_token):``, ``if mask is not
        None:``, ``if flag and ...:``, or after ``if not exists(eos_token): continue``) that an
        unconditional ``assert`` earlier in its function denies (``assert not exists(eos_token)``,
        ``assert mask is None``), with nothing binding the name between them? Then it never runs."""
        tree = self.ctx.tree
        function = tree.enclosing_function(node)
        if function is None or type(function.body) is not cst.IndentedBlock:
            return False
        needed = _needed_names(tree, node, function)
        if not needed:
            return False
        top = next((a for a in (node, *tree.ancestors(node)) if tree.parent(a) is function.body), None)
        for statement in function.body.body:
            if statement is top:
                return False
            if type(statement) is not cst.SimpleStatementLine:
                continue  # (an assert inside a branch or loop holds only there)
            for small in statement.body:
                name = _denied(small.test) if type(small) is cst.Assert else None
                if name in needed and not self._bound_between(name, small, node, function):
                    return True
        return False

    def constant_off(self, node: cst.CSTNode) -> bool:
        """Does ``node`` run only where a test of ``self.x`` holds (``if self.stratified:``, the
        ``else`` of ``if not self.x:``, ``self.x == "a"``) that the one value ``self.x`` ever gets
        fails: the same literal assigned in its class's ``__init__`` and nowhere else in the file,
        on no object either (minRF's ``self.stratified = False``)? Then it never runs."""
        function = self.ctx.tree.enclosing_function(node)
        cls = self.ctx.tree.enclosing_class(function) if function is not None else None
        if cls is None:
            return False
        for ancestor, _, test, holds_there in enclosing_tests(self.ctx.tree, node, function):
            if type(ancestor) is cst.BooleanOperation or test is None:
                continue  # branches only: the left side of `flag and x` is not read here
            for part in conjuncts(test if holds_there else _truth_negated(test)):
                tested = compared(part)
                if tested is None or type(tested[0]) is not cst.Attribute or dotted(tested[0].value) != "self" \
                        or tested[0].attr.value == "training":  # type: ignore[attr-defined]
                    continue  # (`self.training`: `nn.Module.train()` sets it, whatever `__init__` says)
                value = self._fixed_value(tested[0].attr.value, cls)  # type: ignore[attr-defined]
                if value is not None and holds(tested[1], tested[2], value[0]) is False:
                    return True
        return False

    def _fixed_value(self, attr: str, cls: cst.CSTNode) -> tuple[object] | None:
        """``(value,)`` where every assignment of an attribute named ``attr`` in the file is
        ``self.attr = <literal>`` in ``cls``'s ``__init__``, all of one value; None otherwise."""
        memo: dict[tuple[str, int], tuple[object] | None] = self.__dict__.setdefault("_fixed_memo", {})
        key = (attr, id(cls))
        if key not in memo:
            tree = self.ctx.tree
            values: set[object] = set()
            fixed = True
            for statement in (*tree.nodes(cst.Assign), *tree.nodes(cst.AugAssign), *tree.nodes(cst.AnnAssign)):
                targets = [t.target for t in statement.targets] if type(statement) is cst.Assign else [statement.target]  # type: ignore[attr-defined]
                for target in targets:
                    elements = [e.value for e in target.elements] if type(target) in (cst.Tuple, cst.List) else [target]  # type: ignore[attr-defined]
                    for i, element in enumerate(elements):
                        if type(element) is not cst.Attribute or element.attr.value != attr:
                            continue
                        function = tree.enclosing_function(statement)
                        value = statement.value if len(elements) == 1 else _element(statement.value, i, len(elements))  # type: ignore[attr-defined]
                        found = literal(value) if type(statement) is not cst.AugAssign else None
                        if found is None or dotted(element.value) != "self" or function is None or function.name.value != "__init__" \
                                or tree.enclosing_class(function) is not cls:
                            fixed = False
                        else:
                            values.add(found[1])
            memo[key] = (values.pop(),) if fixed and len(values) == 1 else None
        return memo[key]

    def _bound_between(self, name: str, start: cst.CSTNode, end: cst.CSTNode, function: cst.FunctionDef) -> bool:
        """Is ``name`` bound again in ``function`` after ``start`` and before ``end`` (or in a loop
        around ``end``: a later iteration sees it)? A parameter's own binding is no rebinding."""
        tree = self.ctx.tree
        first, last = tree.index(start), tree.index(end)
        loops = [a for a in tree.ancestors(end) if type(a) in (cst.For, cst.While) and tree.is_inside(a, function)]
        for binding in self.ctx.bindings.lookup(name, end):
            if binding.kind == "param" or not tree.is_inside(binding.node, function):
                continue
            at = tree.index(binding.node)
            if first < at < last or any(tree.is_inside(binding.node, loop) for loop in loops):
                return True
        return False


def _element(value: cst.BaseExpression | None, index: int, count: int) -> cst.BaseExpression | None:
    """The ``index``-th of ``count`` values a tuple assignment unpacks (``a, b = 1, False``); None for any other value."""
    if type(value) not in (cst.Tuple, cst.List) or len(value.elements) != count or any(type(e) is cst.StarredElement for e in value.elements):  # type: ignore[union-attr]
        return None
    return value.elements[index].value  # type: ignore[union-attr]


def _needed_names(tree, node: cst.CSTNode, function: cst.FunctionDef) -> set[str]:  # type: ignore[no-untyped-def]
    """The plain names that must be given (true, or not None) for ``node`` to run, within ``function``:
    the conjuncts of the ``if`` tests around it, and the names an earlier ``if not x: continue``
    (``return``, ``break``, ``raise``) of its blocks leaves past."""
    needed: set[str] = set()
    if type(node) is cst.BooleanOperation and type(node.operator) is cst.And:  # `exists(eos) and t.all()` tested: the read needs `eos`
        needed.update(n for part in conjuncts(node.left) if (n := _given(part)) is not None)
    for ancestor, child, test, holds_there in enclosing_tests(tree, node, function):
        if test is not None and holds_there:  # an `if`'s body, a conditional expression's, an `and`'s right side
            needed.update(n for part in conjuncts(test) if (n := _given(part)) is not None)
        elif type(ancestor) is cst.IndentedBlock:
            for statement in tree.statements_before(ancestor, child, exits_early):  # type: ignore[arg-type]
                name = _denied(statement.test)  # type: ignore[attr-defined]
                if name is not None:
                    needed.add(name)
    return needed


def _given(test: cst.BaseExpression) -> str | None:
    """``x`` for ``x``, ``exists(x)`` (lucidrains' ``v is not None``) and ``x is not None``."""
    if type(test) is cst.Name:
        return test.value
    if type(test) is cst.Call and type(test.func) is cst.Name and test.func.value == "exists" and len(test.args) == 1 \
            and not test.args[0].star and type(test.args[0].value) is cst.Name:
        return test.args[0].value.value
    name = none_tested(test, negated=True)
    return name if name is not None and "." not in name else None


def _denied(test: cst.BaseExpression) -> str | None:
    """``x`` for ``not x``, ``not exists(x)`` and ``x is None``: what the test says is not given."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = test.expression
        return _given(inner) if type(inner) is not cst.Comparison else None
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Is \
            and is_none(test.comparisons[0].comparator) and type(test.left) is cst.Name:
        return test.left.value
    return None


def exits_early(statement: cst.CSTNode) -> bool:
    """``if test: ... continue`` (``break``, ``return``, ``raise``) with no ``else``: what follows
    in its block runs only where ``test`` fails."""
    return type(statement) is cst.If and statement.orelse is None and _exits(statement.body)


def _exits(body: cst.BaseSuite) -> bool:
    """Does the block end by leaving its block: ``continue``, ``break``, ``return`` or ``raise``?"""
    last = body.body[-1] if body.body else None
    if type(last) is cst.SimpleStatementLine:  # (an indented block's last line; a one-line suite holds the statements)
        last = last.body[-1]
    return type(last) in (cst.Continue, cst.Break, cst.Return, cst.Raise)


_FAILED = {"truth": "not", "not": "truth", "in": "not_in", "not_in": "in", "is_": "is_not", "is_not": "is_",
           "lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def _failed(flag: Flag | None) -> Flag | None:
    """The flag that holds where ``flag``'s test fails (what runs after an early exit under it): ``x > 0`` for ``x <= 0``."""
    if flag is None or flag[2] not in _FAILED:
        return None
    function, param, test, constant, default = flag
    return function, param, _FAILED[test], constant, default


def _truth_negated(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What must hold in the ``else`` of a truth test of one name: ``not flag`` for ``flag``,
    ``flag`` for ``not flag``; None for any other test (the ``else`` of ``a and b`` is no one flag)."""
    if type(test) in (cst.Name, cst.Attribute):
        return cst.UnaryOperation(cst.Not(), test)
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and type(test.expression) in (cst.Name, cst.Attribute):
        return test.expression
    return None


def _identity_negated(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What must hold in the ``else`` of ``p is None`` (``p is not None``) or of ``p is not None`` (``p is None``)."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) not in (cst.Is, cst.IsNot):
        return None
    operator = cst.IsNot() if type(test.comparisons[0].operator) is cst.Is else cst.Is()
    return cst.Comparison(test.left, [cst.ComparisonTarget(operator, test.comparisons[0].comparator)])


def _negated(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What must hold in the ``else`` of ``test``: ``flag`` for ``not flag``, ``p is not None`` for ``p is None``."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return test.expression
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Is \
            and type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None":
        return cst.Comparison(test.left, [cst.ComparisonTarget(cst.IsNot(), test.comparisons[0].comparator)])
    return None


