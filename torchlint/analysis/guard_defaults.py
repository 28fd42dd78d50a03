"""What a function's parameters, left at their defaults, keep from running: a branch of
``if flag:`` with ``flag=False``, of ``if mask is not None:`` with ``mask=None``, the ``else`` of
``if not reverse:``, a branch a parameter's literal default does not take. The join decides
whether any per-step call passes them (``StepInfo.passed``). (A branch every call of the file
fails is ``guard_never_taken``'s; the literal tests themselves, ``literal_tests``'.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.constants import is_setting
from torchlint.analysis.guard_shapes import conjuncts, enclosing_tests, falsy, is_none, none_tested, off_at_default, only_return
from torchlint.analysis.guard_switches import exits_early
from torchlint.analysis.literal_tests import compared, literal
from torchlint.analysis.names import dotted
from torchlint.analysis.switch_words import SettingTest, holds

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ParameterDefaults:
    """The opt-in half of :class:`~torchlint.analysis.guards.Guards`, whose ``ctx`` and
    ``_named_test`` (a name assigned a test stands for the test) it uses."""

    ctx: FileContext

    def opt_in(self, node: cst.CSTNode, optional: bool = False, required: bool = False) -> str | None:
        """The parameter of ``node``'s function that must be passed, truthy, for ``node`` to
        run: ``node`` sits in the body of ``if flag:`` (also ``if flag and x:``, a name
        assigned such a test, ``a if flag else b``) or after ``flag and`` in a test, where
        ``flag`` defaults to a false value (``looped_inference=False``, ``mask=None``). The
        join decides whether any per-step call passes it (``StepInfo.passed``). ``optional``:
        ``if p is not None:`` counts too (an optional input, or a debug value:
        ``debug_percentile=None``; only where the callers are not seen). ``required``: with
        ``optional``, a parameter without a default tested against None counts too (``if
        kv_cache is None: ... else: <node>`` in a ``forward(self, x, kv_cache)``): the join
        sees what each call passes, and a literal None or a parameter its caller was not
        passed is nothing passed."""
        tree = self.ctx.tree
        function = tree.enclosing_function(node)
        if function is None:
            return None
        defaults = self._falsy_defaults(function) | (self._required(function) if optional and required else frozenset())
        literals = self._literal_defaults(function)
        if not defaults and not literals:
            return None
        found = self._tested_by_itself(node, defaults, literals, optional)
        for ancestor, child, test, holds_there in (() if found is not None else enclosing_tests(tree, node, function)):
            found = self._off_by_literal(ancestor, child, test, holds_there, literals)
            if found is None:
                found = self._off_by_flag(ancestor, child, test, holds_there, defaults, optional, function)
            if found is not None:
                break
        return found

    def _tested_by_itself(self, node: cst.CSTNode, defaults: frozenset[str], literals: dict[str, object], optional: bool) -> str | None:
        """What ``node`` itself tests before its own parts run (``enclosing_tests`` starts above it):
        ``flag and t.any()`` reported whole reads ``t`` only when ``flag`` holds; an ``if`` or
        conditional expression reported whole is asked, as its ``else`` would be, whether a
        literal default leaves its test true (the walk this replaced asked so: kept, no output changes)."""
        kind = type(node)
        if kind in (cst.If, cst.IfExp) and literals:
            return off_at_default(node.test, False, literals)  # type: ignore[attr-defined]
        if kind is cst.BooleanOperation and type(node.operator) is cst.And:  # type: ignore[attr-defined]
            return self._flag_of(self._named_test(node.left, node), defaults, optional)  # type: ignore[attr-defined]
        return None

    @staticmethod
    def _off_by_literal(ancestor: cst.CSTNode, child: cst.CSTNode, test: cst.BaseExpression | None, holds_there: bool, literals: dict[str, object]) -> str | None:
        """`if attention_type == "flash": ... else: <child>` with `attention_type="flash"`: off by default."""
        if not literals or type(ancestor) not in (cst.If, cst.IfExp):  # (an `and`'s left side is a flag's: `_off_by_flag`)
            return None
        if test is None and type(ancestor) is cst.If and child is ancestor.orelse:  # type: ignore[attr-defined]
            test, holds_there = ancestor.test, False  # type: ignore[attr-defined]  # an `elif`: run where the test above fails
        return off_at_default(test, holds_there, literals) if test is not None else None

    def _off_by_flag(self, ancestor: cst.CSTNode, child: cst.CSTNode, test: cst.BaseExpression | None, holds_there: bool,
                     defaults: frozenset[str], optional: bool, function: cst.FunctionDef) -> str | None:
        """The parameter of ``defaults`` that ``test`` must find passed for ``child`` to run: ``if flag:``,
        ``flag and``, ``a if flag else b``; the ``else`` of ``if not reverse:`` or ``0 if cache is None else``."""
        if test is None:
            if type(ancestor) is cst.IndentedBlock and self.ctx.tree.parent(ancestor) is function:
                return self._after_early_return(ancestor, child, defaults, optional)  # type: ignore[arg-type]  # `if kv_cache is None: return x` above it
            return None
        if not holds_there:
            return self._negated_flag(test, defaults, optional)
        # (`has_inpainting = exists(masks) and ...; if has_inpainting:`: a name assigned a test stands for it, as
        # the guards take it; a conditional expression's test is taken as written)
        return self._flag_of(test if type(ancestor) is cst.IfExp else self._named_test(test, ancestor), defaults, optional)  # type: ignore[attr-defined]

    def _after_early_return(self, block: cst.IndentedBlock, child: cst.CSTNode, defaults: frozenset[str], optional: bool) -> str | None:
        """The parameter of ``defaults`` whose leaving out returns early, before ``child``, in
        the function's body (``if kv_cache is None: return x``, ``if not flag: return``): what
        follows runs only when it is passed, as an ``else:`` would."""
        for statement in self.ctx.tree.statements_before(block, child, _returns_early):
            found = self._negated_flag(self._named_test(statement.test, statement), defaults, optional)  # type: ignore[attr-defined]
            if found is not None:
                return found
        return None

    def option_off(self, test: cst.BaseExpression) -> str | None:
        """How often ``test`` holds where one of its conjuncts is a setting of the run that is
        unset at its default and never set in the file: ``args.target_kl is not None`` with
        ``target_kl`` defaulting to None (an argparse option without a default, a dataclass or
        tyro field ``= None``). None where none is: words for the reason otherwise."""
        for part in conjuncts(test):
            # (a flag off by default, `if args.augment:`, is no rare guard here: the calls under it are still made
            # per step, for the join to lower what they reach, `Guards.run_flags`, with the flag's default in its parser's file)
            optional = type(part) is cst.Comparison and none_tested(part, negated=True) is not None
            off = self._defaults_to_none(part.left) if optional else self._default_fails(part)  # type: ignore[attr-defined]
            if off is not None:
                return off
        return None

    def _default_fails(self, part: cst.BaseExpression) -> str | None:
        """``args.global_kl_beta != 0`` with ``--global-kl-beta`` at ``default=0`` (PlaNet): a setting
        compared with a literal, which its default fails (a loss term or a mode weighted off). A bare
        flag (``if args.augment:``) is not one: see ``option_off``."""
        tested = compared(part) if type(part) is cst.Comparison else None
        name = self._unset_setting(tested[0]) if tested is not None and tested[1] not in ("truth", "not") else None
        default = literal(self.ctx.constants.setting_default(name)) if name is not None else None
        if default is None or holds(tested[1], tested[2], default[1]) is not False:  # type: ignore[index]
            return None
        shown = cst.Module([]).code_for_node(part)
        return f"only when `{shown}`, a setting of the run that defaults to {default[0]}"

    def _defaults_to_none(self, value: cst.BaseExpression) -> str | None:
        """``args.target_kl`` (``target_kl: float = None``) in ``args.target_kl is not None``."""
        name = self._unset_setting(value)
        if name is None or not is_none(self.ctx.constants.setting_default(name)):
            return None
        return f"only when `{name}` is set (it defaults to None)"

    def settings_required(self, node: cst.CSTNode) -> tuple[SettingTest, ...]:
        """The settings of the run ``node`` runs only with, innermost first: ``if args.torchcompile:``
        (each of ``args.compile and args.cuda``, ``a if args.compile else b``), the ``else`` of ``if
        args.eager:``, what follows ``if not args.compile: return model`` in its block; each with its
        default where this file gives one (the join looks it up in the project otherwise: an options
        module's parser). Only settings this file never assigns; in its function, or at module level."""
        tree = self.ctx.tree
        found: list[SettingTest] = []
        for ancestor, child, test, holds_there in enclosing_tests(tree, node, tree.enclosing_function(node)):
            if test is not None:
                found.extend(self._tested_settings(test, holds_there))
            if type(ancestor) is cst.IndentedBlock:
                # after `if not args.compile: return model` in its block: it runs only with the setting on
                for statement in tree.statements_before(ancestor, child, exits_early):  # type: ignore[arg-type]
                    found.extend(self._tested_settings(statement.test, False))  # type: ignore[attr-defined]
        return tuple(found)

    def _tested_settings(self, test: cst.BaseExpression, wanted: bool) -> list[SettingTest]:
        """``args.compile`` (or ``not args.eager``) where ``test`` must be ``wanted`` for the branch to
        run: the conjuncts of a test that must hold, or the whole test where it must fail."""
        found = []
        for part in conjuncts(test) if wanted else [test]:
            needed = wanted
            while type(part) is cst.UnaryOperation and type(part.operator) is cst.Not:
                part, needed = part.expression, not needed
            part, needed = _as_truth(part, needed)
            name = self._unset_setting(part) if type(part) is cst.Attribute else None
            if name is not None:  # (a module constant is its file's to edit, no setting a run is launched with)
                default = literal(self.ctx.constants.setting_default(name))
                found.append((name.rpartition(".")[2], name, needed, (default[1],) if default is not None else ()))
        return found

    def _unset_setting(self, value: cst.BaseExpression) -> str | None:
        """The name of ``value`` where it is a setting of the run (a config object's field, a
        module constant) that this file never assigns; None otherwise (a local or a parameter
        is its callers' to pass: ``opt_in`` and the join decide those)."""
        name = dotted(value) if type(value) in (cst.Name, cst.Attribute) else None
        return name if name is not None and is_setting(value) and name not in self._set_settings() else None

    def _set_settings(self) -> frozenset[str]:
        """The settings this file assigns (``args.target_kl = 0.02``): no longer at their default."""
        found = self.__dict__.get("_set_settings_memo")
        if found is None:
            targets = [t for node in self.ctx.tree.nodes(cst.Assign) for t in node.targets]
            found = self.__dict__["_set_settings_memo"] = frozenset(
                name for t in targets if type(t.target) is cst.Attribute and (name := dotted(t.target)) is not None)
        return found

    def off_by_default(self, node: cst.CSTNode) -> frozenset[str]:
        """The parameters of ``node``'s function that default to a false value and are never
        bound again in it (``use_kv_caching=False``): what runs at the defaults runs with them off."""
        function = self.ctx.tree.enclosing_function(node)
        return self._falsy_defaults(function) if function is not None else frozenset()

    def _falsy_defaults(self, function: cst.FunctionDef) -> frozenset[str]:
        """Its parameters that default to a false value and are never bound again in it
        (``debug = debug or env_flag()`` is no longer what the caller passed), except under
        their own test (``if p is not None: p = torch.as_tensor(p)``: still off unless passed)."""
        memo: dict[int, frozenset[str]] = self.__dict__.setdefault("_falsy_memo", {})
        found = memo.get(id(function))
        if found is None:
            params = (*function.params.params, *function.params.kwonly_params)
            bindings = self.ctx.bindings
            found = memo[id(function)] = frozenset(
                p.name.value for p in params if p.default is not None and falsy(p.default)
                and all(b.kind == "param" or self._under_own_test(b.node, p.name.value, function) for b in bindings.lookup(p.name.value, p)))
        return found

    def _required(self, function: cst.FunctionDef) -> frozenset[str]:
        """Its parameters without a default, never bound again in it but under a test of their own
        (VITS' ``if clip_value is not None: clip_value = float(clip_value)``: None stays None)."""
        bindings = self.ctx.bindings
        return frozenset(p.name.value for p in (*function.params.params, *function.params.kwonly_params)
                         if p.default is None and p.name.value != "self"
                         and all(b.kind == "param" or self._under_own_test(b.node, p.name.value, function) for b in bindings.lookup(p.name.value, p)))

    def _literal_defaults(self, function: cst.FunctionDef) -> dict[str, object]:
        """Its parameters that default to a string or number literal and are never bound again
        in it (``attention_type="flash"``): name -> the default's value."""
        memo: dict[int, dict[str, object]] = self.__dict__.setdefault("_literal_memo", {})
        found = memo.get(id(function))
        if found is None:
            bindings = self.ctx.bindings
            found = memo[id(function)] = {
                p.name.value: p.default.evaluated_value for p in (*function.params.params, *function.params.kwonly_params)  # type: ignore[union-attr]
                if type(p.default) in (cst.SimpleString, cst.Integer) and all(b.kind == "param" for b in bindings.lookup(p.name.value, p))}
        return found

    def _under_own_test(self, node: cst.CSTNode, name: str, function: cst.FunctionDef) -> bool:
        """Is ``node`` in the body of ``if name:`` / ``if name is not None:`` within ``function``?"""
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is function:
                return False
            # (`if has_inpainting: masks = resize(masks)` with `has_inpainting = exists(images) and exists(masks)`: under its own test)
            if type(ancestor) is cst.If and child is ancestor.body and self._flag_of(self._named_test(ancestor.test, ancestor), frozenset((name,)), True):  # type: ignore[attr-defined]
                return True
            child = ancestor
        return False

    def _flag_of(self, test: cst.BaseExpression, defaults: frozenset[str], optional: bool = False) -> str | None:
        """The parameter among ``defaults`` that ``test`` requires to be truthy, or with
        ``optional`` not None (``if debug_percentile is not None:``, ``exists(masks)``), in a conjunct."""
        for part in conjuncts(test):
            if optional and type(part) is cst.Comparison and len(part.comparisons) == 1 and type(part.comparisons[0].operator) is cst.IsNot \
                    and type(part.comparisons[0].comparator) is cst.Name and part.comparisons[0].comparator.value == "None":
                part = part.left
            elif optional and type(part) is cst.Call and self._tests_not_none(part):
                part = part.args[0].value  # `exists(masks)`: a helper of the file returning `val is not None`
            if type(part) is cst.Name and part.value in defaults:
                return part.value
        return None

    def _tests_not_none(self, call: cst.Call) -> bool:
        """``exists(x)`` with ``def exists(val): return val is not None`` in this file."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star or type(call.func) is not cst.Name:
            return False
        function = self.ctx.functions.called(call, self.ctx.qname(call.func))
        returned = only_return(function) if function is not None else None
        params = function.params.params if function is not None else ()
        return returned is not None and len(params) == 1 and none_tested(returned, negated=True) == params[0].name.value

    @staticmethod
    def _negated_flag(test: cst.BaseExpression, defaults: frozenset[str], optional: bool = False) -> str | None:
        """The parameter among ``defaults`` whose being falsy is the whole ``test`` (``not
        reverse``; with ``optional`` also ``p is None``): its ``else`` runs only when passed."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and type(test.expression) is cst.Name:
            return test.expression.value if test.expression.value in defaults else None
        if optional and type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Is \
                and type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None" and type(test.left) is cst.Name:
            return test.left.value if test.left.value in defaults else None
        return None

    def none_name(self, test: cst.BaseExpression, negated: bool = False) -> str | None:
        """``p`` for ``p is None`` or ``not exists(p)`` (with ``negated``: ``p is not None``,
        ``exists(p)``), ``exists`` a helper of the file returning ``val is not None``
        (vector-quantize-pytorch's ``if not exists(seed): seed = get_maybe_sync_seed(device)``)."""
        name = none_tested(test, negated=negated)
        if name is not None:
            return name
        if not negated:  # (`not exists(p)`: the helper's test, negated)
            if type(test) is not cst.UnaryOperation or type(test.operator) is not cst.Not:
                return None
            test = test.expression
        if type(test) is cst.Call and self._tests_not_none(test) and type(test.args[0].value) is cst.Name:
            return test.args[0].value.value  # type: ignore[attr-defined]
        return None

    def default_branch(self, node: cst.CSTNode) -> tuple[cst.If, str] | None:
        """``if max_len is None: max_len = lengths.max().item()`` on a parameter that defaults
        to None, with no loop between: the branch (and the parameter) whose code runs only
        when a caller leaves that parameter out."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(node)
        if function is None:
            return None
        memo: dict[int, frozenset[str]] = self.__dict__.setdefault("_none_defaults", {})
        defaults = memo.get(id(function))
        if defaults is None:
            params = (*function.params.params, *function.params.kwonly_params)
            defaults = memo[id(function)] = frozenset(p.name.value for p in params if p.default is not None and is_none(p.default))
        if not defaults:
            return None
        child = node
        for ancestor in ctx.tree.ancestors(node):
            if ancestor is function or type(ancestor) in (cst.For, cst.While):
                return None
            if type(ancestor) is cst.If and child is ancestor.body:
                name = self.none_name(ancestor.test)
                if name in defaults:
                    return ancestor, name  # type: ignore[return-value]
            if type(ancestor) is cst.Else:  # `if p is not None: ... else: <here>`
                branch = ctx.tree.parent(ancestor)
                name = self.none_name(branch.test, negated=True) if type(branch) is cst.If else None
                if name in defaults:
                    return branch, name  # type: ignore[return-value]
            if type(ancestor) is cst.IndentedBlock and ctx.tree.parent(ancestor) is function:
                # ``if p is not None: ...; return x`` earlier in the body: what follows runs only
                # when ``p`` is left out, as an ``else:`` would
                for statement in ctx.tree.statements_before(ancestor, child, _returns_early):
                    name = none_tested(statement.test, negated=True)
                    if name in defaults:
                        return statement, name
            child = ancestor
        return None


def _returns_early(statement: cst.BaseStatement) -> bool:
    """``if test: ... return x`` with no ``else``: a branch that leaves the function early."""
    return type(statement) is cst.If and statement.orelse is None and type(statement.body) is cst.IndentedBlock \
        and bool(statement.body.body) and _returns(statement.body.body[-1])


def _returns(statement: cst.BaseStatement) -> bool:
    """Does ``statement`` end with ``return`` (a branch that leaves the function)?"""
    return type(statement) is cst.SimpleStatementLine and type(statement.body[-1]) is cst.Return


def _as_truth(part: cst.BaseExpression, needed: bool) -> tuple[cst.BaseExpression, bool]:
    """A 0/1 switch compared with a literal read as its truth (minimind's ``if args.use_compile == 1:``,
    an ``int`` option with ``choices=[0, 1]``): ``== 1``/``!= 0`` as the setting, ``== 0`` as its negation. (Not
    ``!= 1``: a default of 2 passes it, yet its truth would say off; ``== 1`` with a default of 2 says on, the safe way.)"""
    if type(part) is not cst.Comparison or len(part.comparisons) != 1:
        return part, needed
    target = part.comparisons[0]
    value = target.comparator.value if type(target.comparator) is cst.Integer else None
    equal = type(target.operator) is cst.Equal
    if value not in ("0", "1") or not equal and type(target.operator) is not cst.NotEqual or value == "1" and not equal:
        return part, needed
    return part.left, needed if (value == "1") is equal else not needed
