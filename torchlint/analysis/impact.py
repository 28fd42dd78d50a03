"""What fixing a finding is worth, as a tier (high, medium, low) and a one-line reason.

One model for every rule (docs/impact.md is its table, and a test reads that table): the
tier follows from **what the pattern costs** (the rule's :class:`Cost`, a check may name
another for one finding; the costs and their table are :mod:`torchlint.analysis.costs`'s,
imported from here by the checks) and **how often it runs** (:class:`Where`: every step of a
training loop, of an evaluation or sampling loop, of a loop over batches of unknown kind,
or once), lowered when the code never touches an accelerator (the cost is a device's).

``Where`` comes from the shared loop analysis for code in a loop of its own file, from
the project-wide join for a function a step calls (``engine/settle_places.py``), and from the
check for what is not code in a loop (a DataLoader: where its batches go).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from torchlint.analysis.costs import LONG_STEP_COSTS, TIERS, Cost, tiers
from torchlint.analysis.multiplicity import DECODED_TOKEN, DENOISING_STEP, GENERATION, INPUT_CHUNK, SEQUENTIAL, Multiplicity, Place, Position, Where
from torchlint.findings import HIGH, LOW, MEDIUM


# Costs that only a device has: where no tensor ever leaves the host they cost (almost)
# nothing, so they fall to low. Where the place comes from the file's own loops only: a
# model's layers or a loader of a host-only file may well run on a device another file picks.
_DEVICE_COSTS = frozenset({
    Cost.SYNC, Cost.EMPTY_CACHE, Cost.HOST_COPY, Cost.ROUND_TRIP, Cost.MODULE_OFFLOAD, Cost.UPLOAD, Cost.SMALL_UPLOAD, Cost.LARGE_UPLOAD, Cost.ALLOCATION, Cost.PINNED_COPY,
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
        return TIERS[cost][where], cost.value  # how often it runs changes nothing
    times = place.per_step.words() if where in _PER_STEP else ""
    # (per step, the guard says how much of it: "only on every 2nd step (`if timer % policy_delay == 0:`)")
    often = ", ".join(filter(None, (where.value, times, place.guard))) if where in _PER_STEP else place.guard or where.value
    if host_only and cost in _DEVICE_COSTS:
        return LOW, f"{cost.value}, {often}, but on the host only: no device to wait for"
    tier = TIERS[cost][where]
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
        tier = TIERS[Cost.SYNC][where]
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


# (Cost, LONG_STEP_COSTS and tiers are costs.py's, named here too: the checks take their cost and its assessment from one module.)
__all__ = ["LONG_STEP_COSTS", "Cost", "assess", "per_call", "tiers", "with_multiplicity"]
