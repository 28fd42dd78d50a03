"""Distributed-only guards: code that runs only in a multi-process run (``if world_size > 1:``,
``if dist.is_initialized():``, ``if self.multi_gpu:``, an early ``if world_size == 1: return``).

On one GPU such a branch never runs; on many, a scalar's collective and its read wait for the
other ranks, which the step's own gradient all-reduce does anyway: the impact model lowers a
read there one tier (``Place.distributed_only``, carried across calls beside the guard's words)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from torchlint.analysis.guard_ranks import last_name, main_process_test, number_of
from torchlint.analysis.guard_shapes import conjuncts
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import FUNCTION_OR_CLASS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

#: The words of a guard that runs code only in a multi-process run, before the test shown: "only in a
#: multi-process run (`if world_size > 1:`)". (The fact itself travels as ``Place.distributed_only``.)
DISTRIBUTED_ONLY = "only in a multi-process run"
# Flags and attributes that name the multi-process mode (`args.distributed`, rl_games' `self.multi_gpu`).
# `args.distributed` may be an argparse `store_true` a one-process run could set: the name still says the
# branch is the multi-process path, and with one process its collective is trivial anyway.
_FLAGS = frozenset({"distributed", "is_distributed", "multi_gpu", "is_multi_gpu", "use_ddp", "ddp", "is_ddp", "multiprocessing_distributed"})
# Counts of processes: `world_size > 1` is a multi-process run. (Not `n_gpu`: one process's DataParallel.)
_COUNTS = ("world_size", "num_processes", "num_replicas", "nprocs", "n_procs")


Resolve = Callable[[cst.Name], "cst.BaseExpression | None"]


def _is_count(node: cst.BaseExpression, resolve: Resolve | None) -> bool:
    """A count of processes: ``world_size``, ``dist.get_world_size()``, or a name assigned one
    (``size = world_size()``)."""
    if any(word in last_name(node) for word in _COUNTS):
        return True
    value = resolve(node) if resolve is not None and type(node) is cst.Name else None
    return value is not None and any(word in last_name(value) for word in _COUNTS)


def _compared(test: cst.BaseExpression, resolve: Resolve | None) -> tuple[str, int] | None:
    """``world_size > 1`` -> ('>', 1) for a count of processes (or `local_rank`) on the left; the
    mirrored form ``1 < world_size`` too. None for other tests."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    operator = type(target.operator)
    symbols = {cst.GreaterThan: ">", cst.GreaterThanEqual: ">=", cst.LessThan: "<", cst.LessThanEqual: "<=", cst.Equal: "==", cst.NotEqual: "!="}
    mirror = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
    if operator not in symbols:
        return None
    left, right, symbol = test.left, target.comparator, symbols[operator]
    if number_of(left) is not None:
        left, right, symbol = right, left, mirror[symbol]
    number = number_of(right)
    if number is None:
        return None
    if _is_count(left, resolve):
        return symbol, number
    if last_name(left) == "local_rank" and number == -1 and symbol in ("==", "!="):  # `args.local_rank != -1`: launched by a distributed launcher
        return symbol, -1
    return None


def multi_process_test(test: cst.BaseExpression, resolve: Resolve | None = None) -> bool:
    """Does ``test`` hold only in a multi-process run? A conjunction where one part does."""
    test_type = type(test)
    if test_type is cst.BooleanOperation:
        if type(test.operator) is cst.And:
            return multi_process_test(test.left, resolve) or multi_process_test(test.right, resolve)
        return False  # `a or b`: either may hold in one process
    if test_type is cst.UnaryOperation and type(test.operator) is cst.Not:
        return one_process_test(test.expression, resolve)
    if test_type is cst.Call:
        last = last_name(test)
        # `dist.is_initialized()`, `is_dist_avail_and_initialized()`, `is_distributed()`, `is_multi_gpu()`
        if last == "is_initialized":
            name = dotted(test.func) or ""
            return "dist" in name
        return ("dist" in last and ("init" in last or last.startswith("is_"))) or "multi_gpu" in last
    if test_type in (cst.Name, cst.Attribute):
        return last_name(test) in _FLAGS
    compared = _compared(test, resolve)
    if compared is None:
        return False
    symbol, number = compared
    if number == -1:
        return symbol == "!="
    return (symbol == ">" and number == 1) or (symbol == ">=" and number == 2) or (symbol == "!=" and number == 1)


def one_process_test(test: cst.BaseExpression, resolve: Resolve | None = None) -> bool:
    """Does ``test`` hold in every one-process run (an early exit's: ``world_size == 1``, ``not
    dist.is_initialized()``)? A disjunction where one part does."""
    test_type = type(test)
    if test_type is cst.BooleanOperation:
        if type(test.operator) is cst.Or:
            return one_process_test(test.left, resolve) or one_process_test(test.right, resolve)
        return False
    if test_type is cst.UnaryOperation and type(test.operator) is cst.Not:
        return multi_process_test(test.expression, resolve)
    compared = _compared(test, resolve)
    if compared is None:
        return False
    symbol, number = compared
    if number == -1:
        return symbol == "=="
    return (symbol == "==" and number == 1) or (symbol == "<" and number == 2) or (symbol == "<=" and number == 1)


def _exits(statement: cst.CSTNode, resolve: Resolve | None = None) -> bool:
    """``if world_size == 1: return x`` (or ``raise``): the statements after it run only with several processes."""
    if type(statement) is not cst.If or statement.orelse is not None or not one_process_test(statement.test, resolve):
        return False
    body = statement.body.body if type(statement.body) is cst.IndentedBlock else ()
    last = body[-1] if body else None
    return type(last) is cst.SimpleStatementLine and any(type(s) in (cst.Return, cst.Raise, cst.Continue) for s in last.body)


class DistributedOnly:
    """The guard that runs a node only in a multi-process run, and its words."""

    ctx: FileContext

    def distributed_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """"only in a multi-process run (`if world_size > 1:`)" where a branch up to ``stop`` (or
        its function) runs ``node`` only with several processes; "" elsewhere (``if rank == 0:``
        runs in a one-process run too)."""
        tree = self.ctx.tree
        resolve = self._resolver()
        child = node
        for ancestor in tree.ancestors(node):
            ancestor_type = type(ancestor)
            if ancestor is stop or ancestor_type in FUNCTION_OR_CLASS:
                return ""
            if ancestor_type is cst.If:
                # the body of a multi-process test, or the else of a one-process one
                if child is ancestor.body and multi_process_test(ancestor.test, resolve):
                    return self._words(ancestor)
                if ancestor.orelse is not None and child is ancestor.orelse and one_process_test(ancestor.test, resolve):
                    return self._words(ancestor, negated=True)
            if ancestor_type is cst.IndentedBlock:
                # (a scan of the block, not `Tree.statements_before`: its memo would keep this test, and through its
                # resolver the file's bindings and tree, past the file's end: a cycle the paused collector never frees)
                exits = [statement for statement in _before(ancestor, child) if _exits(statement, resolve)]
                if exits:
                    return self._words(exits[0], exit_=True)
            child = ancestor
        return ""

    def main_process_words(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> str:
        """"on the main process (`if rank == 0:`)" where a branch up to ``stop`` (or its function)
        runs ``node`` only there: every step still (the other ranks wait for it at the next
        collective), so no rare guard; "" elsewhere."""
        tree = self.ctx.tree
        for branch in self.ctx.guards.conditions(node, stop):
            if tree.is_inside(node, branch.body) and any(main_process_test(part) for part in conjuncts(branch.test)):
                test = " ".join(plain_code(self.ctx.module, branch.test).split())
                return f"on the main process (`if {test}:`)"
        return ""

    def _resolver(self) -> Resolve:
        """What a name was assigned (one plain assignment in scope: ``size = world_size()``), else None."""
        def resolve(name: cst.Name) -> cst.BaseExpression | None:
            bound = self.ctx.bindings.lookup(name.value, name)
            if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None:
                return bound[0].value  # type: ignore[no-any-return]
            return None
        return resolve

    def _words(self, branch: cst.If, negated: bool = False, exit_: bool = False) -> str:
        test = " ".join(plain_code(self.ctx.module, branch.test).split())
        shown = f"after `if {test}: return`" if exit_ else f"`else` of `if {test}:`" if negated else f"`if {test}:`"
        return f"{DISTRIBUTED_ONLY} ({shown})"


def _before(block: cst.IndentedBlock, child: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements of ``block`` before ``child`` (one of them)."""
    body = list(block.body)
    return body[:next((i for i, statement in enumerate(body) if statement is child), len(body))]


__all__ = ["DistributedOnly", "multi_process_test", "one_process_test"]
