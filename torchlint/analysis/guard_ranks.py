"""Main-process guards: ``if rank == 0:``, ``if dist.get_rank() == 0:``, ``if local_rank in (-1, 0):``,
``if accelerator.is_main_process:``. They are no rare guard (``guard_shapes.is_rare_test`` would take
``== 0`` for one particular step): the branch runs on every step, on one process, and the other ranks
wait for it at the next collective. ``DistributedOnly.main_process_words`` says so in a finding's place."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted

# A process's rank (`rank`, `args.local_rank`, `dist.get_rank()`, accelerate's `process_index`): `if rank == 0:`
# runs on one process, on every step, and its wait holds the other ranks at the next collective.
_RANKS = frozenset({"rank", "global_rank", "local_rank", "node_rank", "world_rank", "rank_id", "get_rank", "get_global_rank",
                    "get_local_rank", "process_index", "local_process_index", "proc_id"})
# Flags (or predicates) that hold on the main process (`accelerator.is_main_process`, lightning's `trainer.is_global_zero`).
_MAIN_FLAGS = frozenset({"is_main_process", "is_local_main_process", "is_main", "is_master", "is_master_process", "master_process",
                         "main_process", "is_rank_zero", "is_rank_0", "is_global_zero", "is_local_zero"})


def last_name(node: cst.BaseExpression) -> str:
    """The last part of a name, attribute or called name (``dist.get_world_size()`` -> ``get_world_size``)."""
    if type(node) is cst.Call:
        node = node.func
    name = dotted(node)
    return name.rsplit(".", 1)[-1].lower() if name else ""


def number_of(node: cst.BaseExpression) -> int | None:
    """The value of an integer literal (``0``, ``-1``), else None."""
    if type(node) is cst.Integer:
        return int(node.value)
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus and type(node.expression) is cst.Integer:
        return -int(node.expression.value)
    return None


def main_process_test(test: cst.BaseExpression) -> bool:
    """Does ``test`` pick the main process (``rank == 0``, ``dist.get_rank() == 0``, ``local_rank in
    (-1, 0)``, ``accelerator.is_main_process``, ``is_main_process()``)? It holds on every step there."""
    if type(test) in (cst.Name, cst.Attribute, cst.Call):
        return last_name(test) in _MAIN_FLAGS
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if number_of(left) is not None:
        left, right = right, left  # `0 == rank`
    if last_name(left) not in _RANKS:
        return False
    if type(target.operator) is cst.Equal:
        return number_of(right) == 0
    if type(target.operator) is cst.In and type(right) in (cst.Tuple, cst.List, cst.Set):
        return all(number_of(element.value) in (-1, 0) for element in right.elements)  # `local_rank in [-1, 0]`
    return False


__all__ = ["last_name", "main_process_test", "number_of"]
