"""Rare-branch guards: ``if step % 100 == 0:`` and ``if i == 0:`` do not run every step."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# `== 0`, `== 3`: one particular step. `== "train"` and `== 1.0` pick a mode or a setting
# that holds on every step, so they are not rare.
_STEP_NUMBERS = (cst.Integer,)
# Names of step and batch counters: `if step < warmup:` and `if i == len(loader) - 1:` hold
# on a few steps only.
_COUNTER = re.compile(r"(?:i|j|it|itr|iters?|iteration|steps?|idx|index|count|counter|n_iter|n_steps|i_batch|ibatch|batch_i|batch_id|batch_idx|batch_index|batch_num|batch_nb)$|.*_(?:step|steps|idx|iter|iteration|count)$")


def is_rare_test(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    """A test with a modulo (``step % N == 0``, also inside and/or), ``== integer``, or a
    step counter bounded above or matched (``i < 3``, ``step == len(loader) - 1``)."""
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            if not isinstance(node.left, cst.BaseString):  # "%s" % x is formatting
                return True
        if isinstance(node, cst.Comparison):
            for target in node.comparisons:
                if isinstance(target.operator, cst.Equal) and (
                    isinstance(target.comparator, _STEP_NUMBERS) or isinstance(node.left, _STEP_NUMBERS)
                ):
                    return True
                if isinstance(target.operator, (cst.LessThan, cst.LessThanEqual, cst.Equal)) and _is_counter(node.left):
                    return True
    return False


def _is_counter(expr: cst.BaseExpression) -> bool:
    """A step counter (``step``, ``batch_idx``, ``self.global_step``) or a fill level
    (``len(buffer)``)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len":
        return True
    name = dotted(expr)
    return name is not None and _COUNTER.match(name.rsplit(".", 1)[-1]) is not None


def _exits_unless_rare(statement: cst.CSTNode) -> bool:
    """``if step % N != 0: return`` (or ``continue``): what follows runs every N steps."""
    if not isinstance(statement, cst.If) or statement.orelse is not None:
        return False
    body = statement.body.body if isinstance(statement.body, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    if not isinstance(last, cst.SimpleStatementLine) or not any(isinstance(s, (cst.Return, cst.Continue)) for s in last.body):
        return False
    test = statement.test
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        return True  # `if step % N:` exits unless step is a multiple of N
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator = test.comparisons[0].operator
        modulo = isinstance(test.left, cst.BinaryOperation) and isinstance(test.left.operator, cst.Modulo)
        if modulo and isinstance(operator, (cst.NotEqual, cst.GreaterThan)):
            return True
    return False


def _after_rare_exit(block: cst.IndentedBlock, child: cst.CSTNode) -> bool:
    """Is ``child`` preceded in ``block`` by an early exit that only lets rare steps past?"""
    for statement in block.body:
        if statement is child:
            return False
        if _exits_unless_rare(statement):
            return True
    return False


def _is_none(expr: cst.CSTNode | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _mentions(expr: cst.CSTNode | None, name: str, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    return expr is not None and any(
        isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == name for n in (expr, *tree_nodes(expr))
    )


def _none_tested(test: cst.BaseExpression) -> str | None:
    """``preds`` for ``preds is None`` (also ``self.preds is None``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Is) or not _is_none(target.comparator):
        return None
    return dotted(test.left)


def _mentions_device(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.Name) and any(word in node.value.lower() for word in ("cuda", "gpu", "device")):
            return True
    return False


class Guards:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def conditions(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> list[cst.If]:
        """The ``if`` statements whose body (or else branch) holds ``node``, up to ``stop``."""
        found: list[cst.If] = []
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and not self.ctx.tree.is_inside(node, ancestor.test):
                found.append(ancestor)
        return found

    def rare(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in the body of an ``if`` that runs every N steps or once?"""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, cst.IndentedBlock) and _after_rare_exit(ancestor, child):
                return True
            if isinstance(ancestor, cst.If) and child is ancestor.body:
                if is_rare_test(ancestor.test, tree.descendants) or self.first_pass(ancestor, stop):
                    return True
            if isinstance(ancestor, cst.IfExp) and child is ancestor.body:
                if is_rare_test(ancestor.test, tree.descendants):
                    return True
            child = ancestor
        return False

    def first_pass(self, branch: cst.If, stop: cst.CSTNode | None = None) -> bool:
        """``if preds is None: preds = x.cpu()``: the body binds the tested name, so it runs
        once (its ``else`` runs on every later step), unless ``stop`` (the loop) binds the
        name again each step to something that may be None (``preds = None``, ``cache.get(k)``)."""
        name = _none_tested(branch.test)
        if name is None:
            return False
        tree = self.ctx.tree
        bindings = self.ctx.bindings.lookup(name, branch)
        if not any(b.kind == "assign" and tree.is_inside(b.node, branch.body) for b in bindings):
            return False  # the body does not fill the name in: it may run again
        for binding in bindings:
            if stop is None or not tree.is_inside(binding.node, stop) or tree.is_inside(binding.node, branch):
                continue
            if binding.kind != "augassign" and not _mentions(binding.value, name, tree.descendants):
                return False  # not `preds = torch.cat([preds, p])`: may be None again next step
        return True

    def device_branch(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch (``if``/``else``, ``a if t else b``) chosen by the device:
        ``if train_on_gpu:``, ``... if not use_cuda else ...``, ``if torch.cuda.is_available():``?"""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test and _mentions_device(ancestor.test, tree.descendants):
                return True
            child = ancestor
        return False

    def conditional(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under any ``if`` (body or else) between it and ``stop``?"""
        return bool(self.conditions(node, stop))
