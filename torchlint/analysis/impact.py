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
    INFER = "every step of an inference or sampling loop"
    EVAL = "every step of an evaluation loop"
    BATCH = "every step of a loop over batches"
    EPOCH = "once per epoch (a full-batch step, or a loop around the steps)"
    EVERY_N = "every N steps (a logging or checkpoint branch)"
    ONCE = "once (not every step)"


class Cost(enum.Enum):
    """What the pattern costs each time it runs (a noun phrase: the reason starts with it)."""

    SYNC = "a host-device sync that stalls the GPU pipeline"
    HOST_COPY = "a device-to-host copy and the sync it waits for"
    ROUND_TRIP = "a copy to the other device and back, with a sync"
    UPLOAD = "a tensor made on the host and copied over, the host waiting for the copy"
    ALLOCATION = "an extra host allocation and copy"
    SMALL_WORK = "a little extra work (a memset, a bias add, autograd bookkeeping)"
    SMALL_KERNELS = "slightly slower kernels (small layers, or the batch dimension)"
    PER_PARAMETER_LAUNCHES = "a kernel launch or two per parameter where one multi-tensor kernel would do"
    MEMORY_KEPT = "memory that grows with every step"
    GRAPH_BUILT = "an autograd graph built and thrown away"
    INPUT_PIPELINE = "batches loaded while the GPU waits"
    HOST_INPUT_PIPELINE = "batches loaded between steps on the host, where workers would share the model's cores"
    PINNED_COPY = "pageable host-to-device copies"
    PIN_WITHOUT_WORKERS = "pinning in the loop itself: one more copy per batch without workers"
    MISSING_PIECES = "slower kernels in a large layer's every forward and backward"
    UNFUSED_ATTENTION = "an attention in several kernels with its full weight matrix written to memory, where one fused kernel would do"
    TF32_OFF = "fp32 matmuls without TF32 (Ampere and newer GPUs run TF32 several times faster)"
    PRECISION = "fp32 math where the GPU has 2-8x faster reduced-precision units"
    GRAPH_BREAK = "a torch.compile graph break: the compiled code split in two, the code between run eagerly, no fusion across it"
    EXTRA_ALL_REDUCE = "an all-reduce of every gradient on every micro-step (N-1 of N wasted)"
    DUPLICATED_WORK = "every rank going through the whole dataset (one GPU's work, N times)"
    MULTI_GPU_OVERHEAD = "single-process multi-GPU (the model copied to every GPU, one Python thread for all)"
    DEBUG_MODE = "an autograd debugging mode left on: every op of every step checked or recorded (anomaly mode measured at 2x a CPU step)"
    UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the whole autograd graph after every forward, for a model that uses them all"
    MAYBE_UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the autograd graph after every forward, which this model may need"
    HOST_COLLECTIVES = "gradients all-reduced by gloo, through host memory, where NCCL reduces them on the GPUs"
    DETERMINISTIC_KERNELS = "deterministic kernels, slower than the fastest ones (a choice reproducibility may need)"
    API_AGE = "an old API: a style matter, not a cost"
    UNCHECKED = "the file could not be checked: none of its problems can be found"
    SUPPRESSION = "a `# noqa` that suppresses nothing: it misleads, and would hide the next real finding on its line"


# (cost, where) -> tier, columns in Where's order: train, infer, eval, batch, epoch,
# every_n, once. docs/impact.md holds the same table (tests/test_impact.py compares them).
_TABLE = """
SYNC                 high   medium low    medium low    low    low
HOST_COPY            high   low    low    low    low    low    low
ROUND_TRIP           high   medium low    medium low    low    low
UPLOAD               high   medium low    medium low    low    low
ALLOCATION           medium low    low    low    low    low    low
SMALL_WORK           low    low    low    low    low    low    low
SMALL_KERNELS        low    low    low    low    low    low    low
PER_PARAMETER_LAUNCHES medium low  low    low    low    low    low
MEMORY_KEPT          high   medium medium medium high   low    low
GRAPH_BUILT          medium medium medium medium low    low    low
INPUT_PIPELINE       high   medium low    medium low    low    low
HOST_INPUT_PIPELINE  low    low    low    low    low    low    low
PINNED_COPY          medium low    low    low    low    low    low
PIN_WITHOUT_WORKERS  low    low    low    low    low    low    low
MISSING_PIECES       medium low    low    low    low    low    low
UNFUSED_ATTENTION    high   high   medium high   medium low    low
TF32_OFF             low    low    low    low    low    low    low
PRECISION            high   medium medium medium medium low    low
GRAPH_BREAK          high   high   medium medium low    low    low
EXTRA_ALL_REDUCE     high   low    low    high   medium low    low
DUPLICATED_WORK      high   medium medium high   medium low    low
MULTI_GPU_OVERHEAD   medium low    low    medium low    low    low
DEBUG_MODE           high   high   high   high   high   high   high
UNUSED_PARAMETER_SEARCH medium medium medium medium medium medium medium
MAYBE_UNUSED_PARAMETER_SEARCH low low  low    low    low    low    low
HOST_COLLECTIVES     high   high   high   high   high   high   high
DETERMINISTIC_KERNELS low   low    low    low    low    low    low
API_AGE              low    low    low    low    low    low    low
UNCHECKED            high   high   high   high   high   high   high
SUPPRESSION          medium medium medium medium medium medium medium
"""
_TIERS: dict[Cost, dict[Where, str]] = {
    Cost[row[0]]: dict(zip(Where, row[1:])) for row in (line.split() for line in _TABLE.strip().splitlines())
}
assert set(_TIERS) == set(Cost) and all(len(row) == len(Where) for row in _TIERS.values())

# Costs that only a device has: where no tensor ever leaves the host they cost (almost)
# nothing, so they fall to low. Where the place comes from the file's own loops only: a
# model's layers or a loader of a host-only file may well run on a device another file picks.
_DEVICE_COSTS = frozenset({
    Cost.SYNC, Cost.HOST_COPY, Cost.ROUND_TRIP, Cost.UPLOAD, Cost.ALLOCATION, Cost.PINNED_COPY,
})


# Costs that do not depend on where the flagged line runs: a style matter, an unread file,
# a suppression, and switches that hold for the whole process once set (a debugging mode,
# DDP's and the process group's settings, determinism): they cost on every step after.
_PROCESS_WIDE = frozenset({
    Cost.API_AGE, Cost.UNCHECKED, Cost.SUPPRESSION, Cost.DEBUG_MODE, Cost.UNUSED_PARAMETER_SEARCH,
    Cost.MAYBE_UNUSED_PARAMETER_SEARCH, Cost.HOST_COLLECTIVES, Cost.DETERMINISTIC_KERNELS,
})


def assess(cost: Cost, where: Where, host_only: bool = False) -> tuple[str, str]:
    """The tier and its one-line reason."""
    if cost in _PROCESS_WIDE:
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
    if "epoch loop" in text:
        return Where.EPOCH
    if any(word in text for word in ("evaluation", "validation", "test_step", "eval_step", "test loop")):
        return Where.EVAL
    if any(word in text for word in ("predict", "sampling", "inference", "generation")):
        return Where.INFER
    if any(word in text for word in ("train", "backward", "optimizer", "compute_loss")):
        return Where.TRAIN
    return Where.BATCH


__all__ = ["Cost", "Where", "assess", "tiers", "where_of"]
