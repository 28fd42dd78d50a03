"""How many of a function's call sites one run of it makes, from their arms (``CallSite.arms``, found by
``call_arms``): plain data, no libcst, so the join's settling step (``join_counts``) runs on the light path."""

from __future__ import annotations

Arms = tuple[tuple[int, int], ...]  # (the head `if` of a chain by its pre-order index, the arm taken), outermost first


def arms_count(sites: list[Arms], depth: int = 0) -> int:
    """How many of ``sites`` (each a call's arms) one run of their function makes at most: the calls
    outside any chain add up; of one chain's arms, the largest counts (an ``if``/``else`` pair: one)."""
    total = 0
    chains: dict[int, dict[int, list[Arms]]] = {}
    for arms in sites:
        if len(arms) <= depth:
            total += 1
        else:
            head, arm = arms[depth]
            chains.setdefault(head, {}).setdefault(arm, []).append(arms)
    for chain in chains.values():
        total += max(arms_count(group, depth + 1) for group in chain.values())
    return total


def arms_sum(sites: list[tuple[Arms, dict[object, int]]], depth: int = 0) -> dict[object, int]:
    """``arms_count`` with each site weighing what one run of it makes run (a function and what it calls,
    each with how many times): summed along a run, the larger of a chain's arms taken key by key (an
    ``if``/``else`` whose two sides call two helpers that both call a third: once, not twice)."""
    total: dict[object, int] = {}
    chains: dict[int, dict[int, list[tuple[Arms, dict[object, int]]]]] = {}
    for arms, weight in sites:
        if len(arms) <= depth:
            _add(total, weight)
        else:
            head, arm = arms[depth]
            chains.setdefault(head, {}).setdefault(arm, []).append((arms, weight))
    for chain in chains.values():
        largest: dict[object, int] = {}
        for group in chain.values():
            for key, count in arms_sum(group, depth + 1).items():
                largest[key] = max(largest.get(key, 0), count)
        _add(total, largest)
    return total


def _add(total: dict[object, int], weight: dict[object, int]) -> None:
    for key, count in weight.items():
        total[key] = total.get(key, 0) + count
