"""What fixing a finding is worth, as a tier (high, medium, low) and a one-line reason.

One model for every rule (docs/impact.md is its table, and a test reads that table): the
tier follows from **what the pattern costs** (the rule's :class:`Cost`, a check may name
another for one finding) and **how often it runs** (:class:`Where`: every step of a
training loop, of an evaluation or sampling loop, of a loop over batches of unknown kind,
or once), lowered when the code never touches an accelerator (the cost is a device's).

``Where`` comes from the shared loop analysis for code in a loop of its own file, from
the project-wide join for a function a step calls (``engine/settle.py``), and from the
check for what is not code in a loop (a DataLoader: where its batches go).
"""

from __future__ import annotations

import enum

from torchlint.findings import HIGH, LOW, MEDIUM


class Where(enum.Enum):
    """How often the flagged code runs."""

    TRAIN = "every step of a training loop"
    EVAL = "every step of an evaluation, inference or sampling loop"
    BATCH = "every step of a loop over batches"
    EVERY_N = "every N steps (a logging or checkpoint branch)"
    ONCE = "once (not every step)"


class Cost(enum.Enum):
    """What the pattern costs each time it runs (a noun phrase: the reason starts with it)."""

    SYNC = "a host-device sync that stalls the GPU pipeline"
    HOST_COPY = "a device-to-host copy and the sync it waits for"
    ROUND_TRIP = "a copy to the other device and back, with a sync"
    ALLOCATION = "an extra allocation or host-to-device copy"
    SMALL_WORK = "a little extra work (a memset, a bias add, autograd bookkeeping)"
    SMALL_KERNELS = "slightly slower kernels (small layers, or the batch dimension)"
    MEMORY_KEPT = "memory that grows with every step"
    GRAPH_BUILT = "an autograd graph built and thrown away"
    INPUT_PIPELINE = "batches loaded while the GPU waits"
    PINNED_COPY = "pageable host-to-device copies"
    MISSING_PIECES = "slower kernels in a large layer's every forward and backward"
    PRECISION = "fp32 math where the GPU has 2-8x faster reduced-precision units"
    DUPLICATED_WORK = "every rank going through the whole dataset (one GPU's work, N times)"
    MULTI_GPU_OVERHEAD = "single-process multi-GPU (the model copied to every GPU, one Python thread for all)"
    API_AGE = "an old API: a style matter, not a cost"
    UNCHECKED = "the file could not be checked: none of its problems can be found"
    SUPPRESSION = "a `# noqa` that suppresses nothing: it misleads, and would hide the next real finding on its line"


# (cost, where) -> tier. Read by docs/impact.md's test: keep the two in step.
_TIERS: dict[Cost, dict[Where, str]] = {
    Cost.SYNC: {Where.TRAIN: HIGH, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.HOST_COPY: {Where.TRAIN: HIGH, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.ROUND_TRIP: {Where.TRAIN: HIGH, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.ALLOCATION: {Where.TRAIN: MEDIUM, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.SMALL_WORK: {Where.TRAIN: LOW, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.SMALL_KERNELS: {Where.TRAIN: LOW, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.MEMORY_KEPT: {Where.TRAIN: HIGH, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.GRAPH_BUILT: {Where.TRAIN: MEDIUM, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.INPUT_PIPELINE: {Where.TRAIN: HIGH, Where.EVAL: LOW, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.PINNED_COPY: {Where.TRAIN: MEDIUM, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.MISSING_PIECES: {Where.TRAIN: MEDIUM, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.PRECISION: {Where.TRAIN: HIGH, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.DUPLICATED_WORK: {Where.TRAIN: HIGH, Where.EVAL: MEDIUM, Where.BATCH: HIGH, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.MULTI_GPU_OVERHEAD: {Where.TRAIN: MEDIUM, Where.EVAL: LOW, Where.BATCH: MEDIUM, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.API_AGE: {Where.TRAIN: LOW, Where.EVAL: LOW, Where.BATCH: LOW, Where.EVERY_N: LOW, Where.ONCE: LOW},
    Cost.UNCHECKED: {Where.TRAIN: HIGH, Where.EVAL: HIGH, Where.BATCH: HIGH, Where.EVERY_N: HIGH, Where.ONCE: HIGH},
    Cost.SUPPRESSION: {Where.TRAIN: MEDIUM, Where.EVAL: MEDIUM, Where.BATCH: MEDIUM, Where.EVERY_N: MEDIUM, Where.ONCE: MEDIUM},
}

# Costs that only a device has: where no tensor ever leaves the host they cost (almost)
# nothing, so they fall to low.
_DEVICE_COSTS = frozenset({
    Cost.SYNC, Cost.HOST_COPY, Cost.ROUND_TRIP, Cost.ALLOCATION, Cost.PINNED_COPY, Cost.MISSING_PIECES, Cost.PRECISION,
})


def assess(cost: Cost, where: Where, host_only: bool = False) -> tuple[str, str]:
    """The tier and its one-line reason."""
    if cost in (Cost.API_AGE, Cost.UNCHECKED, Cost.SUPPRESSION):
        return _TIERS[cost][where], cost.value  # how often it runs changes nothing
    if host_only and cost in _DEVICE_COSTS:
        return LOW, f"{cost.value}, {where.value}, but on the host only: no device to wait for"
    return _TIERS[cost][where], f"{cost.value}, {where.value}"


def tiers() -> dict[Cost, dict[Where, str]]:
    """The table itself (docs/impact.md is checked against it)."""
    return {cost: dict(row) for cost, row in _TIERS.items()}


def where_of(origin: str) -> Where:
    """How often a step runs, from the words the loop analysis and the join use for it
    ("a training loop", "an evaluation loop", "Lightning `validation_step`", ...)."""
    text = origin.lower()
    if any(word in text for word in ("evaluation", "validation", "test_step", "predict", "sampling", "inference")):
        return Where.EVAL
    if "train" in text or "backward" in text or "optimizer" in text:
        return Where.TRAIN
    return Where.BATCH


__all__ = ["Cost", "Where", "assess", "tiers", "where_of"]
