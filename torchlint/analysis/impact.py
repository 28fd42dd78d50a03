"""What fixing a finding is worth, as a tier (high, medium, low) and a one-line reason.

One model for every rule (docs/impact.md is its table, and a test reads that table): the
tier follows from **what the pattern costs** (the rule's :class:`Cost`, a check may name
another for one finding) and **how often it runs** (:class:`Where`: every step of a
training loop, of an evaluation or sampling loop, of a loop over batches of unknown kind,
or once), lowered when the code never touches an accelerator (the cost is a device's).

``Where`` comes from the shared loop analysis for code in a loop of its own file, from
the project-wide join for a function a step calls (``engine/settle_places.py``), and from the
check for what is not code in a loop (a DataLoader: where its batches go).
"""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import NamedTuple

from torchlint.analysis.multiplicity import DECODED_TOKEN, DENOISING_STEP, GENERATION, INPUT_CHUNK, SEQUENTIAL, Multiplicity, Place, Position, Where
from torchlint.findings import HIGH, LOW, MEDIUM


class Cost(enum.Enum):
    """What the pattern costs each time it runs (a noun phrase: the reason starts with it)."""

    SYNC = "a host-device sync that stalls the GPU pipeline"
    EMPTY_CACHE = ("the caching allocator's cached blocks released, plus a sync: the next step allocates every activation "
                   "again with `cudaMalloc`, itself synchronizing the device")
    HOST_COPY = "a device-to-host copy and the sync it waits for"
    ROUND_TRIP = "a copy to the other device and back, with a sync"
    MODULE_OFFLOAD = ("a whole module's weights copied to the host (and back by the load that pairs with it): "
                      "the model's bytes over the bus each way, not one small read")
    NEEDED_READ = ("a read the host code needs (a prioritised replay buffer's priorities, kept in a NumPy sum tree): "
                   "the sync is that structure's price, not avoidable short of keeping it on the device")
    UPLOAD = "a tensor made on the host and copied over, the host waiting for the copy"
    SMALL_UPLOAD = "a small tensor made on the host and copied over: the bytes cost nothing, but a blocking copy waits for the GPU's queue like a read"
    ALLOCATION = "an extra host allocation and copy"
    SMALL_WORK = "a little extra work (a memset, a bias add, autograd bookkeeping)"
    SMALL_KERNELS = "slightly slower kernels (small layers, or the batch dimension)"
    PER_PARAMETER_LAUNCHES = "an op or two per parameter (a kernel launch each on a GPU, a dispatch on the CPU) where one multi-tensor call would do"
    PER_ELEMENT_LAUNCHES = ("a tiny kernel launch or two per element of a Python loop over host indices (a few microseconds of host "
                            "time each, for a few bytes of work), where one indexed op on all of them would do")
    TIMESTEP_LAUNCHES = "a few tiny kernel launches per timestep of a Python loop over a rollout, where the host does the same arithmetic in about a microsecond an operation"
    PER_PARAMETER_COLLECTIVES = "a collective per parameter tensor: one latency-bound launch and wait for each small tensor where one bucket would do"
    PADDED_TO_MAX = "every sequence padded to the maximum length: the model's forward and backward run over the padding too"
    CACHE_COPIED = "the whole preallocated key-value cache copied to write one token's keys and values"
    CACHE_GROWN = "the whole key-value cache copied into a new tensor one token longer, for every token: T²/2 positions copied for T tokens"
    MEMORY_KEPT = "memory that grows with every step"
    GRAPH_BUILT = "an autograd graph built and thrown away"
    FROZEN_WEIGHT_GRADS = "weight gradients of a network no optimizer updates, computed in every backward (about a third of its forward and backward) and kept in memory"
    FROZEN_BACKBONE_GRADS = ("weight gradients of a torchvision model's layers (a perceptual loss's or a teacher's, commonly as large as "
                             "the network trained or larger) no optimizer updates, computed in every backward (about a third of its "
                             "forward and backward) and kept in memory")
    DISCARDED_GRADS = "gradients a backward computes for a network the step after it does not update, zeroed before its own step reads them"
    DISCARDED_BACKWARD = ("a whole backward through a network the step after it does not update (its input gradients and its weight "
                          "gradients, about two thirds of its forward and backward), zeroed before its own step reads them")
    DETACHED_GRAPH = ("an autograd graph recorded by a forward that is needed anyway, then dropped by `.detach()`: "
                      "the graph's bookkeeping and its saved activations' memory until the detach, no extra compute")
    INPUT_PIPELINE = "batches loaded while the GPU waits"
    HOST_INPUT_PIPELINE = "batches loaded between steps on the host, where workers would share the model's cores"
    ONE_WORKER_PIPELINE = "one worker process decoding every sample: the step waits whenever a batch takes longer to make than a step"
    PREBATCHED_PIPELINE = "whole batches made in the training process by a dataset this project does not hold (often slices of arrays in memory: one call per step)"
    GIVEN_ITEMS_PIPELINE = "batches collated in the training process from items a dataset indexes in what its constructor was given (in memory, unless that reads lazily): little for workers to take over"
    PINNED_COPY = ("pageable host-to-device copies: each batch staged through a pinned buffer, one more host copy of its bytes "
                   "(a small share of a step unless the step is transfer-bound)")
    UNPINNED_NON_BLOCKING = ("pageable host-to-device copies asked for `non_blocking=True`: from pageable memory the copy is staged "
                             "and the host waits for it, so the overlap the loop asks for does not happen (17-24 % of a "
                             "transfer-bound step measured on an H200)")
    PIN_WITHOUT_WORKERS = "pinning in the loop itself: one more copy per batch without workers"
    MISSING_PIECES = "slower kernels in a large layer's every forward and backward"
    GUIDANCE_UNBATCHED = "the model run twice per sampling step at half the batch, where one call on the doubled batch launches each kernel once (1.3-2x at small batch, little when the GPU is full)"
    DECODE_PAST_END = "every generation decodes to its full length after every row has emitted EOS: the passes after the last row ended are thrown away (often as many as the useful ones)"
    PREFIX_RECOMPUTED = "the whole prefix run through the model again for every decoded token: ~T/2 times a cached decoder's compute for T tokens"
    GENERATE_UNCACHED = ("a library's generation with its key-value cache off: every token runs the model over the whole prefix again, "
                         "about T/2 times the work for T tokens")
    UNFUSED_ATTENTION = "an attention in several kernels with its full weight matrix written to memory, where one fused kernel would do"
    SIDE_ATTENTION = ("an attention in several kernels with its full weight matrix written to memory, where it is a smaller share "
                      "of the step than a transformer's self-attention: cross-attention over another, short input, an attention block "
                      "between a convolutional network's blocks, or scores carrying a second score matrix a fused kernel reads as a mask anyway")
    LATENT_ATTENTION = ("an attention in several kernels whose queries are a few learned latents (a Perceiver's) or one position "
                        "(a class token's): a thin score matrix, a small share of the step, where one fused kernel would do")
    RETURNED_ATTENTION = ("an attention in several kernels with its full weight matrix written to memory, which the module also returns: "
                          "one fused kernel would do where its callers read the weights only under an option")
    TF32_OFF = "fp32 matmuls without TF32 (Ampere and newer GPUs run TF32 several times faster)"
    PRECISION = "fp32 math where the GPU has 2-8x faster reduced-precision units"
    GRAPH_BREAK = "a torch.compile graph break: the compiled code split in two, the code between run eagerly, no fusion across it"
    EXTRA_ALL_REDUCE = "an all-reduce of every gradient on every micro-step (N-1 of N wasted)"
    DUPLICATED_WORK = "every rank going through the whole dataset (one GPU's work, N times)"
    MULTI_GPU_OVERHEAD = "single-process multi-GPU (the model copied to every GPU, one Python thread for all)"
    ONE_DEVICE_PARALLEL = "a data-parallel wrapper over one device: no replica, only its scatter and gather of each call's inputs and outputs"
    CHECKPOINT_SAVE = ("a checkpoint written: every parameter (and, in a checkpoint, the optimizer's state: twice as much again "
                       "for Adam) copied to the host after a sync, then pickled and written to disk; a second or more per GB "
                       "written (0.2 GB/s measured on a CPU host), where the step itself takes milliseconds")
    CHECKPOINT_SAVE_LONG_STEP = ("a checkpoint written once per full-batch step (an epoch over the whole data): every parameter copied "
                                 "to the host and written to disk, a smaller share of a step that goes over all the data, but "
                                 "a save that only every N epochs or an improvement needs")
    DEBUG_MODE = "an autograd debugging mode left on: every op of every step checked or recorded (anomaly mode measured at 2x a CPU step)"
    UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the whole autograd graph after every forward, for a model that uses them all"
    MAYBE_UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the autograd graph after every forward, which this model may need"
    HOST_COLLECTIVES = "gradients all-reduced by gloo, through host memory, where NCCL reduces them on the GPUs"
    DETERMINISTIC_KERNELS = "deterministic kernels, slower than the fastest ones (a choice reproducibility may need)"
    API_AGE = "an old API: a style matter, not a cost"
    SUPPRESSION = "a `# noqa` that suppresses nothing: it misleads, and would hide the next real finding on its line"


# A cost paid once per step whatever the step holds (a checkpoint's write): where the step is a
# full-batch epoch, one pass over all the data, it is a smaller share of the step (the check and
# the join both take the long step's cost there).
LONG_STEP_COSTS = {Cost.CHECKPOINT_SAVE: Cost.CHECKPOINT_SAVE_LONG_STEP}


# (cost, where) -> tier, columns in Where's order: train, infer, eval, batch, epoch,
# every_n, once. docs/impact.md holds the same table (tests/test_impact.py compares them).
_TABLE = """
SYNC                 high   medium low    medium low    low    low
EMPTY_CACHE          high   medium low    medium low    low    low
HOST_COPY            high   low    low    low    low    low    low
ROUND_TRIP           high   medium low    medium low    low    low
MODULE_OFFLOAD       high   high   medium high   low    low    low
NEEDED_READ          low    low    low    low    low    low    low
UPLOAD               high   medium low    medium low    low    low
SMALL_UPLOAD         medium medium low    medium low    low    low
ALLOCATION           medium low    low    low    low    low    low
SMALL_WORK           low    low    low    low    low    low    low
SMALL_KERNELS        low    low    low    low    low    low    low
PER_PARAMETER_LAUNCHES medium low  low    low    low    low    low
TIMESTEP_LAUNCHES    medium medium low    medium medium low    low
PER_ELEMENT_LAUNCHES medium medium low    medium low    low    low
PER_PARAMETER_COLLECTIVES high low  low    high   low    low    low
PADDED_TO_MAX        high   low    low    medium low    low    low
CACHE_COPIED         medium high   medium high   low    low    low
CACHE_GROWN          low    high   low    low    low    low    low
MEMORY_KEPT          high   medium medium medium high   low    low
GRAPH_BUILT          medium medium medium medium low    low    low
FROZEN_WEIGHT_GRADS  medium low    low    medium low    low    low
FROZEN_BACKBONE_GRADS high  low    low    medium low    low    low
DISCARDED_GRADS      medium low    low    medium low    low    low
DISCARDED_BACKWARD   high   low    low    medium low    low    low
DETACHED_GRAPH       low    low    low    low    low    low    low
INPUT_PIPELINE       high   medium low    medium low    low    low
HOST_INPUT_PIPELINE  low    low    low    low    low    low    low
ONE_WORKER_PIPELINE  medium low    low    low    low    low    low
PREBATCHED_PIPELINE  low    low    low    low    low    low    low
GIVEN_ITEMS_PIPELINE low    low    low    low    low    low    low
PINNED_COPY          low    low    low    low    low    low    low
UNPINNED_NON_BLOCKING medium low   low    low    low    low    low
PIN_WITHOUT_WORKERS  low    low    low    low    low    low    low
MISSING_PIECES       medium low    low    low    low    low    low
GUIDANCE_UNBATCHED   low    high   low    medium low    low    low
PREFIX_RECOMPUTED    high   high   medium high   medium low    low
DECODE_PAST_END      high   high   medium medium low    low    medium
GENERATE_UNCACHED    medium medium low    medium low    low    low
UNFUSED_ATTENTION    high   high   medium high   medium low    low
SIDE_ATTENTION       medium medium medium medium low    low    low
LATENT_ATTENTION     low    low    low    low    low    low    low
RETURNED_ATTENTION   medium medium low    medium low    low    low
TF32_OFF             low    low    low    low    low    low    low
PRECISION            high   medium medium medium medium low    low
GRAPH_BREAK          high   high   medium medium low    low    low
EXTRA_ALL_REDUCE     high   low    low    high   medium low    low
DUPLICATED_WORK      high   medium medium high   medium low    low
MULTI_GPU_OVERHEAD   medium low    low    medium low    low    low
ONE_DEVICE_PARALLEL  low    low    low    low    low    low    low
CHECKPOINT_SAVE      high   low    low    medium low    low    low
CHECKPOINT_SAVE_LONG_STEP medium low low  medium low    low    low
DEBUG_MODE           high   high   high   high   high   high   high
UNUSED_PARAMETER_SEARCH medium medium medium medium medium medium medium
MAYBE_UNUSED_PARAMETER_SEARCH low low  low    low    low    low    low
HOST_COLLECTIVES     high   high   high   high   high   high   high
DETERMINISTIC_KERNELS low   low    low    low    low    low    low
API_AGE              low    low    low    low    low    low    low
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
    Cost.SYNC, Cost.EMPTY_CACHE, Cost.HOST_COPY, Cost.ROUND_TRIP, Cost.MODULE_OFFLOAD, Cost.UPLOAD, Cost.SMALL_UPLOAD, Cost.ALLOCATION, Cost.PINNED_COPY,
    Cost.UNPINNED_NON_BLOCKING,
})


# The host waits for the queue to drain (a small blocking upload too: its copy is queued behind the step's kernels).
_READ_COSTS = frozenset({Cost.SYNC, Cost.HOST_COPY, Cost.ROUND_TRIP, Cost.SMALL_UPLOAD})
_REPEAT_COSTS = _READ_COSTS | {Cost.UPLOAD}  # a wait each time: repeated within a step, it adds up
# Placed in the step like a read: a blocking upload waits for the queue before its copy.
_WAITS = _READ_COSTS | {Cost.UPLOAD}
READ_COSTS = _READ_COSTS  # the costs whose findings stand at a read: the reads of a pass (``Places.note_reads``)
_PER_STEP = frozenset({Where.TRAIN, Where.INFER, Where.BATCH, Where.EVAL})
_RAISED = {LOW: MEDIUM, MEDIUM: HIGH, HIGH: HIGH}
_LOWERED = {HIGH: MEDIUM, MEDIUM: LOW, LOW: LOW}


class Unreached(NamedTuple):
    """Where a per-step finding still holds when no step is found to run its function (a
    module's ``forward``: run whenever the model is, by code not visible here)."""

    where: str  # the words for where it runs
    impact: str
    reason: str
    users: tuple[str, ...] | None  # functions of its file whose being per-step shows its use (None: any)
    # (impact, reason) in an inference application (no file trains, one samples): the
    # model's forwards only, once per call of it by code not visible; None: as above
    untrained: tuple[str, str] | None = None


_POSITION_WHY = {
    Position.STEP_END: ("one sync per step, at its end: the GPU idles while Python refills the queue; "
                        "about 1 % of a GPU-bound step, more when steps are short"),
    Position.STEP_START: ("one sync per step, at its start (nothing of the step queued before it): the GPU idles while Python refills the queue; "
                          "about 1 % of a GPU-bound step, more when steps are short"),
    Position.AFTER_SYNC: "right after a sync: the queue is already drained, so this read waits for almost nothing",
    Position.AFTER_LAST_READ: ("right after the previous step's read: that step ended with a read and only host work "
                               "(the loader's next batch) ran since, so the queue is drained and this wait costs only its own copy"),
    Position.AFTER_READ: ("right after another read of the same pass, only small ops between: that read waits for the queue, "
                          "this one only for its own small kernels (one finding stands for the pass: the first read's)"),
    Position.BEFORE_SYNC: ("right before an explicit synchronize, which waits for the queue anyway: "
                           "without this read the step would wait as long"),
    Position.BEFORE_READ: ("an explicit synchronize the step's next read follows with only host work and small ops between "
                           "(the next decoded token's `.item()`): that read waits for the same queue, so this sync adds almost nothing"),
    Position.BEFORE_EVAL: ("the iteration's next device work is an evaluation whose results come to the host (`test()` every epoch), "
                           "which waits for the queue anyway: this read adds only the refill of the evaluation's first kernels"),
    Position.TIMED: ("a synchronize the next statement reads a clock after: it bounds a timed region on purpose (a benchmark's "
                     "or a timing log's), the timing needs the device's work done, and dropping it would time the launches only"),
    Position.AFTER_DECODE: ("once per generated sequence, after its decode loop: the read is the generation's result, "
                            "one wait beside the decode steps' many (each token waits for the device anyway)"),
    Position.TOKEN_READ: "the token the loop needs on the host: one read per token is the floor",
    Position.EXTRA_READ: ("an extra read per decoded token beside the token's own, which the loop needs on the host: "
                          "one read per token is the floor, this one adds a wait (and its copy) to every token"),
    Position.BEFORE_DECODE: ("once per generated sequence, before its decode loop: each decoded token waits for the device anyway, "
                             "so this is one wait among the generation's many"),
}


# Where a token read, or a read before one, stands outside a decode loop's token: a read returned at its
# function's end, one before more device work.
_TOKEN_POSITIONS = {Position.TOKEN_READ: Position.STEP_END, Position.EXTRA_READ: Position.MID_STEP}


# Costs that do not depend on where the flagged line runs: a style matter, a suppression, and switches that hold for the whole process once set (a debugging mode,
# DDP's and the process group's settings, determinism): they cost on every step after.
_PROCESS_WIDE = frozenset({
    Cost.API_AGE, Cost.SUPPRESSION, Cost.DEBUG_MODE, Cost.UNUSED_PARAMETER_SEARCH,
    Cost.MAYBE_UNUSED_PARAMETER_SEARCH, Cost.HOST_COLLECTIVES, Cost.DETERMINISTIC_KERNELS,
})


_DISTRIBUTED_WHY = ("on one GPU it never runs; on several, this small wait is for the other ranks too, "
                    "which the step's own gradient all-reduce waits for anyway")


def assess(cost: Cost, place: Place | Where, host_only: bool = False) -> tuple[str, str]:
    """The tier and its one-line reason."""
    if isinstance(place, Where):
        place = Place(place)
    tier, reason = _assess(cost, place, host_only)
    if place.distributed_only and cost in _WAITS and not host_only:
        # Run only in a multi-process run (`if world_size > 1:`, rl_games' `if self.multi_gpu:`): a scalar's
        # collective and read wait for the other ranks, as the step's gradient all-reduce does anyway (readers
        # of reviews 16-18 lowered each such read one tier). Collectives per parameter and DDP's own costs are
        # not waits: they keep their tier.
        return _LOWERED[tier], f"{reason}; {_DISTRIBUTED_WHY}"
    return tier, reason


def _assess(cost: Cost, place: Place, host_only: bool) -> tuple[str, str]:
    where = place.where
    if cost in _PROCESS_WIDE:
        return _TIERS[cost][where], cost.value  # how often it runs changes nothing
    times = place.per_step.words() if where in _PER_STEP else ""
    # (per step, the guard says how much of it: "only on every 2nd step (`if timer % policy_delay == 0:`)")
    often = ", ".join(filter(None, (where.value, times, place.guard))) if where in _PER_STEP else place.guard or where.value
    if host_only and cost in _DEVICE_COSTS:
        return LOW, f"{cost.value}, {often}, but on the host only: no device to wait for"
    tier = _TIERS[cost][where]
    if cost is Cost.PER_ELEMENT_LAUNCHES and place.per_step.unit in (DECODED_TOKEN, DENOISING_STEP):
        # Per element per decoded token: a token's step is small and latency-bound, so hundreds of
        # launches (a penalty per distinct token generated so far) are a large share of it.
        tier = HIGH
    if cost is Cost.EMPTY_CACHE and place.per_step.unit in (DECODED_TOKEN, DENOISING_STEP):
        # The cache emptied per decoded token (wenet's attention beam search): every token allocates its
        # activations and cache again with `cudaMalloc`, a token's small step paying it each time, as a training step does.
        tier = HIGH
    if cost is Cost.HOST_COPY and place.per_step.unit == DENOISING_STEP:
        # A copy out of each denoising step carries an intermediate state, not a result the host needs
        # (only the last step's is): tiered as the sync it is, not as a sampling loop's predictions.
        tier = _TIERS[Cost.SYNC][where]
    if where not in _PER_STEP:
        return tier, f"{cost.value}, {often}"
    if cost is Cost.CACHE_GROWN and place.per_step.unit == INPUT_CHUNK:
        # A streaming encoder's cache grown once per chunk of input frames (16 or more each, the cache bounded by
        # the chunks it keeps), not once per decoded token: a few copies per utterance, small beside each chunk's work.
        return LOW, f"{cost.value}, {often}: {_PER_CHUNK}"
    if cost in _WAITS and place.per_step.unit == GENERATION and not any(repeat.kind in SEQUENTIAL for repeat in place.per_step.repeats):
        # A step that is a whole generation (its decode steps each wait for the device anyway): this line's waits,
        # once or over the rows or tokens of that generation's result, are a few beside the generation's many.
        return LOW, f"{cost.value}, {often.replace('every step of ', 'in ', 1)}: {_PER_GENERATION}"
    if cost in _REPEAT_COSTS and where is Where.EVAL and place.per_step.per_model_run:
        # An evaluation's rows each scored by the model on their own: a read per row is one wait per
        # model run, small beside that run's work, as one read per evaluation batch is.
        return tier, f"{cost.value}, {often}: {_PER_MODEL_RUN}"
    if cost in _REPEAT_COSTS and place.per_step.waits_again and place.position is Position.AFTER_DECODE:
        # Each generated sequence's rows or candidates read after the decode: once per sequence, beside the
        # decode steps' many waits (whisper's `t[i].tolist()` per row, `finalize`'s per candidate).
        return LOW, f"{cost.value}, {often.replace('every step of ', 'in ', 1)}: {_POSITION_WHY[place.position]}"
    if cost in _READ_COSTS and place.position is Position.AFTER_READ:
        # A read after another read of the same pass, nothing but small ops between: however often the pass
        # repeats, the first read pays the pass's wait (its finding carries the loop's tier) and this one waits
        # only for its own small kernels (GroundingDINO's five reads of one `nonzero` row, review 13).
        return LOW, f"{cost.value}, {often}: {_POSITION_WHY[place.position]}"
    if cost in _REPEAT_COSTS and place.per_step.waits_again:
        # Each repetition waits again: the waits add up to more than a step's worth of slack.
        # (Over a few fixed items with nothing heavy between them, the first read drained the
        # queue: the others wait for almost nothing, and the line costs what one read costs.)
        return (HIGH if where is not Where.EVAL else _RAISED[tier]), f"{cost.value}, {often}"
    if cost in _WAITS and place.position in _TOKEN_POSITIONS:
        if where is Where.INFER and place.per_step.unit == DECODED_TOKEN and not place.per_step:
            # Once per decoded token: the token's own read is what the loop needs; a read before it is one more wait per token.
            return (LOW if place.position is Position.TOKEN_READ else MEDIUM), f"{cost.value}, {often}: {_POSITION_WHY[place.position]}"
        # Not a decode loop's token: where a read returned at its function's end, or one before more work, stands.
        place = replace(place, position=_TOKEN_POSITIONS[place.position])
    copies = place.per_step.copies
    if cost in _WAITS and place.position is not Position.MID_STEP:
        drained = place.position in (Position.AFTER_SYNC, Position.AFTER_LAST_READ, Position.BEFORE_SYNC, Position.BEFORE_READ, Position.BEFORE_EVAL, Position.TIMED)
        if place.position in (Position.AFTER_DECODE, Position.BEFORE_DECODE):
            # Once per generated sequence (or window of tokens), beside the many decode steps that each wait: amortized over them.
            # (Not "every step of" its loop: the step here is the sequence, not one of its tokens.)
            return LOW, f"{cost.value}, {often.replace('every step of ', 'in ', 1)}: {_POSITION_WHY[place.position]}"
        # Drained before it: nothing to wait for but copies; one copy per row adds up to about a sync's worth.
        capped = (_LOWERED[tier] if copies else LOW) if drained else MEDIUM if tier == HIGH else tier
        why = _COPIES_AFTER_SYNC if drained and copies else _POSITION_WHY[place.position]
        if place.per_step:  # a few fixed items, or rows: the first read waits, the others find the queue drained
            after = "the rows after the first wait only for their own copies" if copies else "the repetitions after the first find the queue drained"
            why = why.replace("one sync per step", f"one real wait per step ({after})", 1)
        if cost in (Cost.UPLOAD, Cost.SMALL_UPLOAD):  # a blocking copy waits as a read does
            why = why.replace("one sync per step", "one blocking copy per step", 1).replace("this read waits", "this copy waits", 1)
        if where is Where.EVAL:  # an evaluation's step is its batch
            why = why.replace("copy per step", "copy per eval batch", 1).replace("sync per step", "sync per eval batch", 1) \
                .replace("wait per step", "wait per eval batch", 1)
        return capped, f"{cost.value}, {often}: {why}"
    if cost is Cost.SMALL_UPLOAD:
        # One small blocking copy per step, wherever it sits: the host waits once for the queue and
        # the tensor goes straight to the op that takes it, no value for Python to act on before
        # the rest of the step is queued: one sync's worth per step. (Repeated, it is high above.)
        return tier, f"{cost.value}, {often}: {_ONE_COPY}"
    if cost in _WAITS and where is not Where.EVAL and tier != LOW:
        # One wait per step mid-step: the kernels after it wait for the host, but that is one pipeline
        # refill per step, as at the step's end (0.12 ms of an 8.9 ms H200 step): medium wherever it
        # sits. High is for waits that repeat within the step (above). (A blocking upload's bytes are
        # a copy's, small beside the step's kernels unless the tensor is a batch's.)
        once = "one real wait per step" if place.per_step else "once per step"
        rows = "; the rows after the first wait only for their own copies" if copies else ""
        return MEDIUM, f"{cost.value}, {often}, {once}, mid-step: the kernels after it wait for the host, one pipeline refill per step{rows}"
    if copies and cost in _WAITS:
        return tier, f"{cost.value}, {often}: {_COPIES_MID_STEP}"
    if cost in _WAITS and where is Where.EVAL:
        # An evaluation's batch: a forward, no backward or optimizer step queued behind the wait.
        once = "one real wait per eval batch" if place.per_step else "once per eval batch"
        return tier, f"{cost.value}, {often}, {once}: one wait beside the batch's forward, no backward or optimizer step after it"
    return tier, f"{cost.value}, {often}"


_PER_CHUNK = ("once per chunk of input frames a streaming encoder is given (each of many frames), not per decoded token: "
              "a few copies of a cache bounded by the chunks it keeps, small beside each chunk's forward")
_PER_GENERATION = ("each step runs a whole generation, whose decode steps each wait for the device anyway: "
                   "its waits here, once or over the generation's rows or tokens, are a few small ones beside the generation's many")
_PER_MODEL_RUN = ("each repetition runs the model on its own (a row scored by itself), so this is one wait per model run, "
                  "once per evaluated item: small beside the model's work, as a read once per eval batch is")
_ONE_COPY = ("one blocking copy per step: the host waits once for the GPU's queue, about 1 % of a GPU-bound step "
             "(more when steps are short); high only where it repeats within the step")
_COPIES_AFTER_SYNC = ("the queue drained before its loop, and the loop queues only small ops: each row's read waits for its own "
                      "device-to-host copy (10-20 us), not for the step's kernels; a copy per row, about one sync's worth for a batch")
_COPIES_MID_STEP = ("one real wait per step, mid-step (the first row's read drains the queue, the kernels after the loop wait for the host); "
                    "the rows after it wait only for their own copies, since the loop queues only small ops")


def per_call(cost: Cost, per_call: Multiplicity, position: Position | None = None, guard: str = "",
             distributed_only: bool = False) -> tuple[str, str] | None:
    """The tier and reason of a finding in code run on every call of a model that no step is
    seen to reach (built from a config or a registry, a library's model): a wait that repeats
    within each call (per frame, once in each block) is high, as it would be in any step; one
    wait per call is medium, since how often the model runs per step is not visible. None for
    a cost that is not paid on each call (kept memory, per-parameter launches: a step's)."""
    if cost not in _REPEAT_COSTS:
        return None
    tiered = _per_call(cost, per_call, position)
    if distributed_only:  # (a read only in a multi-process run, `guard` its words: one tier lower, as in `assess`)
        return _LOWERED[tiered[0]], f"{tiered[1]}, {guard}; {_DISTRIBUTED_WHY}"
    return tiered


def _per_call(cost: Cost, per_call: Multiplicity, position: Position | None) -> tuple[str, str]:
    times = per_call.words()
    often = f"on every call of the model, {times}" if times else "on every call of the model"
    if position is Position.AFTER_READ and cost in _READ_COSTS:
        return LOW, f"{cost.value}, {often}: {_POSITION_WHY[position]}"  # the pass's first read carries the tier
    if per_call.waits_again:
        return HIGH, f"{cost.value}, {often}: each repetition waits again"
    return MEDIUM, f"{cost.value}, {often}: how often the model runs per step is not visible"


def with_multiplicity(message: str, place: Place) -> str:
    """A finding's message with how many times per step its line runs, when more than once;
    a line run once per epoch (beside the epoch's batch loop) says so, not "on every step"."""
    if place.where is Where.EPOCH:
        message = message.replace("on every step", "once per epoch").replace("every step", "once per epoch")
    elif place.where in _PER_STEP and place.per_step.unit == GENERATION:
        message = message.replace("run every step from", "run once per generated sequence from").replace("on every step", "once per generated sequence")
    elif place.position is Position.AFTER_DECODE and place.where in _PER_STEP and (not place.per_step or place.per_step.waits_again):
        # after a whole generation (whisper's word timings after its window's decode): once per sequence, not per token
        message = message.replace("run every step from", "run once per generated sequence, after its decode, from") \
            .replace("on every step", "once per generated sequence")
    words = place.per_step.words() if place.where in _PER_STEP else ""
    if not place.per_step and place.per_step.unit in message:
        return message  # "every decoded token re-runs the model": the message says its unit already
    return f"{message} ({words})" if words else message


def tiers() -> dict[Cost, dict[Where, str]]:
    """The table itself (docs/impact.md is checked against it)."""
    return {cost: dict(row) for cost, row in _TIERS.items()}


__all__ = ["Cost", "assess", "per_call", "tiers", "with_multiplicity"]
