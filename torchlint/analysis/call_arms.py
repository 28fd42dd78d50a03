"""Which exclusive branches of its function a call sits in (``CallSite.arms``): plain data the join sums call sites by."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.arms_counts import Arms
from torchlint.analysis.guard_shapes import conjuncts
from torchlint.analysis.tree import Tree

AFTER = -1  # the arm of the code after an `if` whose body returns or raises: it runs only where that body did not

# Around these a call may run any number of times, or not on the normal path: no sure count per run of its function.
_UNSURE = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda, cst.ExceptHandler, cst.ExceptStarHandler})
_TESTS = frozenset({cst.If, cst.IfExp, cst.IndentedBlock})  # what may make an arm
_ENDS = frozenset({cst.FunctionDef, cst.Module})


def call_arms(tree: Tree, call: cst.Call) -> Arms | None:
    """The arms of the ``if``/``elif``/``else`` chains and conditional expressions ``call`` is in within
    its function, outermost first; an early return's ``if`` counts as a chain whose other arm is the
    code after it (``if x is None: return f(a)`` then ``return f(b)``: one call per run, not two).
    None where a run of the function may make it any number of times (in a comprehension, a
    lambda, an exception handler): its count per run is not known."""
    levels: list[list[tuple[int, int]]] = []  # innermost first
    child: cst.CSTNode = call
    for ancestor in tree.ancestors(call):
        kind = type(ancestor)
        if kind in _TESTS:
            if kind is cst.If:
                if child is not ancestor.test:  # type: ignore[attr-defined]
                    if _periodic(ancestor.test):  # type: ignore[attr-defined]
                        return None  # (`if global_step % args.train_frequency == 0:`: on some steps only, however the loop's step is taken)
                    if not _is_elif(tree, ancestor, child):  # type: ignore[arg-type]
                        levels.append([_chain_arm(tree, ancestor, child)])  # type: ignore[arg-type]
            elif kind is cst.IfExp:
                if child is not ancestor.test:  # type: ignore[attr-defined]
                    levels.append([(tree.index(ancestor), 0 if child is ancestor.body else 1)])  # type: ignore[attr-defined]
            else:  # an indented block: the early returns before the statement holding it
                exits = [(tree.index(statement), AFTER) for statement in tree.statements_before(ancestor, child, _returns_early)]  # type: ignore[arg-type]
                if exits:
                    levels.append(exits)
        elif kind in _ENDS:
            break
        elif kind in _UNSURE:
            return None
        child = ancestor
    return tuple(arm for level in reversed(levels) for arm in level)


def _periodic(test: cst.BaseExpression) -> bool:
    """Is ``test`` (or one of its ``and``-ed parts) an every-N test, ``step % n == 0``?"""
    return any(type(part) is cst.Comparison and type(part.left) is cst.BinaryOperation and type(part.left.operator) is cst.Modulo
               for part in conjuncts(test))


def _is_elif(tree: Tree, branch: cst.If, child: cst.CSTNode) -> bool:
    """Is ``child`` the ``elif`` of ``branch`` (an ``If`` as its ``orelse``)? Its own arm was taken from the chain's head already."""
    return child is branch.orelse and type(child) is cst.If


def _chain_arm(tree: Tree, branch: cst.If, child: cst.CSTNode) -> tuple[int, int]:
    """The chain's head (the first ``if``) and which arm ``child`` is: 0 for its body, one more per ``elif``, the ``else`` last."""
    arm = 0 if child is branch.body else 1
    head = branch
    parent = tree.parent(head)
    while type(parent) is cst.If and parent.orelse is head:  # `elif`: the arm of a longer chain
        head, arm = parent, arm + 1
        parent = tree.parent(head)
    return tree.index(head), arm


def _returns_early(statement: cst.CSTNode) -> bool:
    """An ``if`` with no ``else`` whose body ends in ``return`` or ``raise``: what follows it runs only where it did not."""
    if type(statement) is not cst.If or statement.orelse is not None or type(statement.body) is not cst.IndentedBlock:
        return False
    last = statement.body.body[-1] if statement.body.body else None
    return type(last) is cst.SimpleStatementLine and any(type(small) in (cst.Return, cst.Raise) for small in last.body)
