"""The flags of the run a call waits for: settings of a config object tested for truth around it
in its function (``if args.gail:``, ``args.augment and args.augment_p == 0``, the ``else`` of
``if not args.use_amp:``) that no code of its file assigns. As plain data for the join
(``CallSite.run_flags``), which reads each one's default where the run parses it, another file
often (``args = get_args()``): ``SettingDefaults.run_flag_off``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.constants import is_setting
from torchlint.analysis.guard_shapes import conjuncts, enclosing_tests
from torchlint.analysis.literal_tests import literal
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext
    from torchlint.analysis.tree import Tree

# (the setting's dotted name, whether this file knows its default is off, whether its test sits in a loop of the
# function, re-tested each iteration): `("args.gail", False, True)`
RunFlag = tuple[str, bool, bool]


class RunFlags:
    """A part of :class:`~torchlint.analysis.guards.Guards` (its ``_set_settings``)."""

    ctx: FileContext

    def run_flags(self, node: cst.CSTNode, direct: bool = False) -> tuple[RunFlag, ...]:
        """The run's settings that must be true for ``node`` to run, innermost first: a conjunct of a
        test it runs under in its function, or the flag of an ``if not args.x:`` whose ``else`` holds it.
        Not one this file assigns (``args.probe = True``), nor one whose default here is true. With
        ``direct`` (``node`` is the line itself, no call that may run a whole loop elsewhere), a test
        outside loops counts as one in a loop where no loop stands between it and ``node``: ogb's
        ``if args.train_subset: train_loader = DataLoader(...)``, setup the run may leave out."""
        return self.run_tests(node, direct)[1]

    def under_run_mode(self, node: cst.CSTNode) -> bool:
        """Does ``node`` run only under a bare truth test of a setting of the run in its function
        (``if args.gail:``)? A mode the run is launched in, or not: no tier's matter (``option_off``
        leaves such flags on), but the join's words prefer a reach that runs without one."""
        return self.run_tests(node)[0]

    def run_tests(self, node: cst.CSTNode, direct: bool = False) -> tuple[bool, tuple[RunFlag, ...]]:
        """``under_run_mode`` and ``run_flags`` of ``node`` from one walk of the tests around it (a call
        site records both). Neither follows from the other: the mode counts an UPPER_CASE constant
        (``if DEBUG:``), a setting the file assigns and one on by default, which no flag is; a flag
        counts the ``else`` of ``if not args.x:``, which no mode is."""
        tree = self.ctx.tree
        function = tree.enclosing_function(node)
        mode, found = False, []
        for ancestor, _, test, holds_there in enclosing_tests(tree, node, function):
            if test is None:
                continue
            if holds_there and not mode:
                mode = any(type(part) in (cst.Name, cst.Attribute) and is_setting(part) for part in conjuncts(test))
            if function is not None:  # (a flag is tested in its function: the join reads a module's code once)
                self._add_flags(found, ancestor, test, holds_there, node, function, direct)
        return mode, tuple(found)

    def _add_flags(self, found: list[RunFlag], ancestor: cst.CSTNode, test: cst.BaseExpression, holds_there: bool,
                   node: cst.CSTNode, function: cst.FunctionDef, direct: bool) -> None:
        """The run flags ``test`` needs true for ``node`` to run (``run_flags``), onto ``found``."""
        tree = self.ctx.tree
        # (`if args.gail:` inside the step loop: a part of each step the run may leave out; `if args.do_train:`
        # around the loop: the mode the run is launched in, which the join counts only for a class's constructions)
        in_loop = any(type(a) in (cst.For, cst.While) for a in tree.ancestors(ancestor) if tree.is_inside(a, function)) \
            or direct and not _loop_between(tree, node, ancestor)
        parts = conjuncts(test) if holds_there else [_not_of(test)]
        for part in parts:
            flag = self._run_flag(part) if part is not None else None
            if flag is not None and (*flag, in_loop) not in found:
                found.append((*flag, in_loop))

    def _run_flag(self, part: cst.BaseExpression) -> tuple[str, bool] | None:
        if type(part) is not cst.Attribute or not is_setting(part):
            return None  # (a comparison, `args.mode == "gail"`, is `option_off`'s: its literal against the default)
        name = dotted(part)
        if name is None or name in self._set_settings():  # type: ignore[attr-defined]
            return None  # assigned in the file: no longer the parser's default
        default = literal(self.ctx.constants.setting_default(name))
        if default is not None and default[1]:
            return None  # on by default here (`--log-norms`, `default=True`): it runs at the defaults
        return name, default is not None


def _not_of(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """The flag that must hold in the ``else`` of ``if not flag:``; None for any other test."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return test.expression
    return None


def _loop_between(tree: Tree, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
    """Is there a ``for`` or ``while`` around ``node`` below ``ancestor`` (the flag's branch holds a whole loop)?"""
    for each in tree.ancestors(node):
        if each is ancestor:
            return False
        if type(each) in (cst.For, cst.While):
            return True
    return False
