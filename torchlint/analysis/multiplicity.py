"""How often and where in its step a finding's code runs (Where, Position, Repeat, Multiplicity, Place), and the words messages say it with."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from torchlint.findings import pickled_by_fields


class Where(enum.Enum):
    """How often the flagged code runs."""

    TRAIN = "every step of a training loop"
    INFER = "every step of an inference or sampling loop"
    EVAL = "every step of an evaluation loop"
    BATCH = "every step of a loop over batches"
    EPOCH = "once per epoch (outside the steps: not every step)"
    EVERY_N = "every N steps (a logging or checkpoint branch)"
    ONCE = "once (not every step)"


class Position(enum.Enum):
    """Where a device read sits in its step: what the device could have done meanwhile."""

    MID_STEP = "mid-step"  # device work is queued after it (inside forward, before backward): the GPU idles until Python catches up
    STEP_END = "step-end"  # nothing after it in the step but the next step's launches
    STEP_START = "step-start"  # nothing of the step queued before it: the queue holds only the previous step's tail
    AFTER_SYNC = "after-sync"  # right after an explicit synchronize or a read of the same value: the queue is already drained
    # the pass's first wait, nothing queued before it, after a pass that ended with a read (`total += loss.item()`), only host work since
    AFTER_LAST_READ = "after-last-read"
    BEFORE_SYNC = "before-sync"  # right before an explicit synchronize, only host work between: that sync waits for the queue anyway
    BEFORE_READ = "before-read"  # an explicit synchronize the step's next read follows, only small ops between: that read waits for the queue anyway
    BEFORE_EVAL = "before-eval"  # the iteration's next device work is an evaluation whose results come to the host: it waits for the queue anyway
    BEFORE_DECODE = "before-decode"  # before a decode loop whose every token waits for the device: one wait among the generation's many
    AFTER_DECODE = "after-decode"  # after a whole decode loop, outside it: once per generated sequence (its result), amortized over its tokens
    CALL_END = "call-end"  # after its function's device work, nothing after it there: where the function's call ends (settled by `at_call`)
    TOKEN_READ = "token-read"  # the sampled token a decode loop needs on the host (`return int(out)` of a `multinomial`): one read per token is the floor
    EXTRA_READ = "extra-read"  # a read before the token read on its path in the step: one more wait per token, removable
    AFTER_READ = "after-read"  # after another read of the same pass, only small ops between: that read waited for the queue, this one for its own kernels
    TIMED = "timed"  # a synchronize a clock reading follows at once: it closes (or opens) a timed region on purpose, the timing needs it


def at_call(own: Position | None, call: Position, repeated: bool = False) -> Position:
    """Where a line of a function sits in the step, from its own position in the function
    (None: wherever the call stands) and its call's: a read after the function's own work
    is no longer at the step's start (`translate_sentence`'s last `.tolist()`, after its
    decode loop, called first in the batch loop), it is where the call ends. ``repeated``:
    the line repeats in loops of its function whose repetitions each wait again."""
    if own is None:
        return call
    if call is Position.AFTER_DECODE and (repeated or own not in (Position.AFTER_SYNC, Position.AFTER_LAST_READ, Position.AFTER_READ, Position.BEFORE_SYNC, Position.BEFORE_READ, Position.TIMED)):
        # The function runs once per generated sequence, after its decode: wherever its line sits in it. (A single
        # read right after a sync there says more by that; a repeated one, whisper's `finalize` reading each
        # candidate after its `sum_logprobs.cpu()`, waits once per candidate per sequence, not per token.)
        return call
    if own is Position.CALL_END:  # the function's own work came after whatever drained the queue before the call
        return Position.STEP_END if call in (Position.STEP_START, Position.AFTER_SYNC, Position.AFTER_LAST_READ) else call
    return own


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Repeat:
    """One loop (or repeated call) between the step and the flagged line."""

    kind: str  # "decoded token", "denoising step", "beam", "candidate", "block", "layer", "batch row", "parameter", "element", "iteration"
    count: int | None = None  # when the code says (`range(12)`)
    via: str = ""  # the function each repetition runs (`Block.forward`), when it is a call
    # Over a few fixed items (`for mask in [train_mask, val_mask, test_mask]`) with no model or
    # helper run between them: after the first read each waits only for its own small kernels.
    few: bool = False
    # Over batch rows (`for i in range(B): n = int(lengths[i])`) with only small ops, slices and
    # host work in the body: the first read drains the queue (or finds it drained), and each
    # repetition after it waits only for its own device-to-host copy (~10-20 us), not a refill.
    copies: bool = False
    # Over rows (or a range) each running the model itself, or a helper of the project that may
    # (genlip's `scores = score_image(model, row)` per image, then its reads): each repetition is a
    # model run of its own, and a read after it one wait per model run, a step's ratio.
    models: bool = False
    # A function's call sites summed (``kind`` ``CALL_SITE``, join_counts.py): the functions that call it, each with how
    # many times per step it runs and how many of its calls run per run (`q_posterior_mean_variance`, run twice, four).
    calls: tuple[tuple[str, int, int], ...] = ()
    # Over its function's own `**` parameter (`for k, v in kwargs.items()`): as many items as a call passes
    # keywords the function takes by no name, which only the join sees (``keywords_counted``).
    keywords: bool = False


CALL_SITE = "call site"  # a function called from several places of one step (``Repeat.calls``): each call waits again
FEW_ITEMS = 4  # at most this many repetitions of a wait (a loop over the splits of a dataset) are "a few"


def one_fix(what: str, count: int, adjacent: bool = False) -> Repeat:
    """What ``count`` lines of one step that one fix removes together add to the finding that
    stands for them (a host index copied over at each of its indexings: engine/groups.py): a
    repetition in the step, once per line. Up to ``FEW_ITEMS`` are a few, as a loop over a few
    fixed items is: the first wait drains the queue and the others wait only for their own small
    copies, about one wait's worth (``Repeat.few``); past that, the copies and waits add up past
    a step's slack, unless the lines are ``adjacent`` (one after another, nothing else queued
    between them: each after the first waits only for the small ops of the lines before it)."""
    return Repeat(what, count, few=count <= FEW_ITEMS or adjacent)


FEW_KEYWORDS = 2  # at most this many keywords a call passes to a `**` parameter a loop reads are a few reads


def keywords_counted(repeats: tuple[tuple[str, Repeat], ...], count: int | None) -> tuple[tuple[str, Repeat], ...]:
    """``repeats`` with each loop over its function's `**` parameter (``Repeat.keywords``) given
    ``count``, the most keywords a call of the function passes there: one (or none) runs the line
    once, no loop; up to ``FEW_KEYWORDS`` over a body of reads and copies only are a few (the first
    read waits, the other finds the queue drained: no multiplication); more, that many copies. As
    they were where ``count`` is None (a call passing `**`, or none resolved)."""
    if count is None:
        return repeats
    counted = []
    for key, repeat in repeats:
        if not repeat.keywords:
            counted.append((key, repeat))
        elif count > 1:
            few = count <= FEW_KEYWORDS and (repeat.copies or repeat.few)
            counted.append((key, replace(repeat, count=count, few=few or repeat.few, copies=repeat.copies and not few)))
    return tuple(counted)


# What a loop goes over when each iteration feeds the next: one generation runs many of them.
ENV_STEP = "environment step"  # an RL rollout's iteration (`envs.step(action)`): sequential, as a decoded token is
DENOISING_STEP = "denoising step"  # a sampler's iteration (`x = step(model(x, t))`): sequential too
DECODED_TOKEN = "decoded token"  # a decode loop's iteration
INPUT_CHUNK = "input chunk"  # a streaming encoder's iteration: a slice of frames of an input it was given, not a token it made
GENERATION = "generated sequence"  # a step loop's iteration that runs a whole generation (`gen = tts.tts(text)` per text chunk)
SEQUENTIAL = frozenset({DECODED_TOKEN, DENOISING_STEP, ENV_STEP})


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Multiplicity:
    """How many times the flagged line runs per step: the loops around it, outermost first."""

    repeats: tuple[Repeat, ...] = ()
    unit: str = "step"  # what the step is, when a loop the join made a step says ("decoded token")

    def __bool__(self) -> bool:
        return bool(self.repeats)

    @property
    def waits_again(self) -> bool:
        """Does each repetition wait for device work of its own weight (a forward per block, a
        decoded token's), not only for the small kernels since the last read?"""
        # (two loops of copies nested, per row per token, multiply them into thousands: as costly as waits)
        return sum(repeat.copies for repeat in self.repeats) > 1 or any(not (repeat.few or repeat.copies) for repeat in self.repeats)

    @property
    def per_model_run(self) -> bool:
        """Is every repetition that waits again one whose iterations each run the model (``Repeat.models``)?"""
        waiting = [repeat for repeat in self.repeats if not (repeat.few or repeat.copies)]
        return bool(waiting) and all(repeat.models for repeat in waiting)

    @property
    def copies(self) -> bool:
        """Is it repeated over rows whose reads after the first are copies only (``Repeat.copies``)?"""
        return not self.waits_again and any(repeat.copies for repeat in self.repeats)

    @property
    def count(self) -> int | None:
        total = 1
        for repeat in self.repeats:
            if repeat.count is None:
                return None
            total *= repeat.count
        return total

    def then(self, *more: Repeat) -> Multiplicity:
        return Multiplicity(self.repeats + more, self.unit)

    def outweighs(self, other: Multiplicity) -> bool:
        """Does a line run more often per step this way than ``other`` way (two reaches of one
        function in one phase)? Per decoded token beats per generation, whatever the rows of a
        generation: a generation runs many tokens; then more loops beat fewer (per layer per
        token beats per token), then the larger count (an unknown one is taken as large)."""
        return self._weight() > other._weight()

    def _weight(self) -> tuple[int, int, float]:
        levels = (self.unit, *(repeat.kind for repeat in self.repeats))
        count = self.count
        return sum(level in SEQUENTIAL for level in levels), len(self.repeats), float("inf") if count is None else count

    def words(self) -> str:
        """"24 times per step: once in each `Block.forward()`", "per candidate per beam per
        decoded token", "per decoded token" for once per token of a decode loop (a sequential
        loop's iteration is the step: the loop's kind says so, not only the loops inside it),
        "" for once per step."""
        if not self.repeats:
            return f"per {self.unit}" if self.unit in SEQUENTIAL else ""
        summed = next((r for r in self.repeats if r.calls), None)
        if summed is not None:  # "8 times per denoising step: from 2 calls in `p_mean_variance()`, 4 in ..."
            parts = [_share(caller, runs, sites, index == 0) for index, (caller, runs, sites) in enumerate(summed.calls)]
            if self.count is not None:
                return f"{self.count} times per {self.unit}: from {', '.join(parts)}"
            # (its own loops of no known count inside: "per iteration, in each of 6 calls per step (from ...)")
            inner = Multiplicity(tuple(r for r in self.repeats if r is not summed), self.unit).words()
            return f"{inner}, in each of {summed.count} calls per {self.unit} (from {', '.join(parts)})"
        vias = [f"`{r.via}()`" for r in self.repeats if r.via]
        each = f": once in each {' in each '.join(reversed(vias))}" if vias else ""
        count = self.count
        if count is not None:
            return f"{count} times per {self.unit}{each}"
        return " ".join(f"per {kind}" for kind in self._levels()) + each

    def _levels(self) -> list[str]:
        """What each level goes over, innermost first, the step last; a level of the same kind
        as the one around it (a decode loop in a function a decode step calls) is the inner one."""
        kinds = [self.unit] + [r.kind for r in self.repeats]  # outermost first
        named = [kind if index == 0 or kind != kinds[index - 1] else f"inner {kind}" for index, kind in enumerate(kinds)]
        return list(reversed(named))


def _share(caller: str, runs: int, sites: int, first: bool) -> str:
    """"2 calls in `q_sample()`", "4 in each of 2 runs of `q_posterior_mean_variance()`"; a step loop's own: "in the loop"."""
    calls = (" call" if sites == 1 else " calls") if first else ""
    where = f"`{caller.partition('#')[0]}()`" if caller else "the loop"
    return f"{sites}{calls} in each of {runs} runs of {where}" if runs > 1 else f"{sites}{calls} in {where}"


ONCE_PER_STEP = Multiplicity()
MODEL_CALL = "model call"  # the unit of code run on every call of a model no step is seen to reach


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Place:
    """How often the flagged code runs and where in its step: plain data from the loop
    analysis (its own file) and the project-wide join (a function a step calls)."""

    where: Where
    per_step: Multiplicity = ONCE_PER_STEP
    position: Position = Position.MID_STEP
    # How often a guard lets it run, where that says more than ``where`` (a wall-clock timer:
    # "at most once every few seconds"; an opt-in parameter no per-step call passes; per step,
    # an every-N guard whose N is 2 or 3: "only on every 2nd step").
    guard: str = ""
    # A guard runs it only in a multi-process run (`if world_size > 1:`, analysis/guard_distributed.py;
    # ``guard`` holds its words): the impact model lowers a wait there one tier.
    distributed_only: bool = False


#: How a loop of each kind is named in messages (the loop analysis decides the kind).
LOOP_WORDS = {
    Where.TRAIN: "a training loop",
    Where.INFER: "a sampling loop",
    Where.EVAL: "an evaluation loop",
    Where.BATCH: "a per-batch loop",
    Where.EPOCH: "an epoch loop",
}

#: An epoch loop each of whose iterations is one training step on the whole data (GCNII's
#: ``for epoch in range(n): train(); validate()``): the step is the epoch.
FULL_BATCH_WORDS = "an epoch loop of full-batch training steps"

#: What an evaluation of the file (``CallSite.evaluates``) a training loop calls on every iteration runs:
#: once per evaluation, its results brought to the host (ogb's full-batch ``result = test(...)`` every
#: epoch, its ``Evaluator.eval`` copying the predictions for a NumPy metric), tiered as an evaluation's.
EVALUATION_WORDS = "an evaluation called on every iteration of a training loop"

#: A sampling loop that steps an environment (``envs.step(action)``): an RL rollout, each iteration
#: one environment step, not a decoded token.
ROLLOUT_WORDS = "an environment rollout loop"

#: A framework's phase (analysis/frameworks.py) and how often it runs.
PHASE_WHERE = {"training": Where.TRAIN, "evaluation": Where.EVAL, "prediction": Where.INFER}


def phase_rank(where: Where) -> int:
    """Training first, then evaluation, then the rest: the order the join reaches functions in."""
    return 0 if where is Where.TRAIN else 1 if where is Where.EVAL else 2


__all__ = ["CALL_SITE", "DECODED_TOKEN", "ENV_STEP", "EVALUATION_WORDS", "FEW_ITEMS", "FEW_KEYWORDS", "GENERATION", "FULL_BATCH_WORDS", "LOOP_WORDS", "MODEL_CALL", "ONCE_PER_STEP", "PHASE_WHERE", "Multiplicity", "Place", "Position", "ROLLOUT_WORDS", "Repeat", "Where", "at_call", "keywords_counted", "one_fix", "phase_rank"]
