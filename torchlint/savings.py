"""What a fix would save: the three figures a ranked finding may carry. Pure data.

A profiled finding can carry up to three numbers, and the report always says which
is which (docs/profiling.md, "What a number is"):

- **observed**: the time the run spent at the finding's call sites (what cProfile,
  the probes or the line sampler saw there). It is context, never a saving, and
  never ranks a finding by itself.
- **expected**: an :class:`Estimate`, an upper bound on the saving from a documented
  per-rule model (``model`` names it; ``torchlint/estimate/`` holds the models).
- **measured**: a :class:`Measurement`, from ``torchlint profile --experiment``: the
  script run again with only that finding switched off, alternated with the original.

Rules whose effect is not time carry their own ``unit`` (TL302: bytes retained per
step) or say why they have no figure on this machine (``not_applicable``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SECONDS = "s"
BYTES = "bytes"

#: Verdicts of a measurement (a difference inside the noise is never a saving).
SAVING = "saving"
SLOWER = "slower"
NO_CHANGE = "no measurable change"
SKIPPED = "skipped"
#: the experiment's windows could not see the finding's code (it runs outside them):
#: not a measurement, and the expected figure ranks
NOT_MEASURABLE = "not measurable"

#: Family-wise error of one experiment's verdicts together (Holm's correction).
ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class Estimate:
    """An expected saving from a model, labelled with the model: an upper bound, or, where
    no figure of the run can bound it (``bound=False``), an estimate that says so."""

    model: str  # one sentence: what the figure is computed from
    per_step: float | None = None  # in ``unit`` per optimizer step
    total: float | None = None  # in ``unit`` over the profiled run
    unit: str = SECONDS
    not_applicable: str | None = None  # why there is no figure here ("effect only on GPU tensor cores")
    bound: bool = True  # False: an estimate ("≈"), not an upper bound ("≤")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Estimate:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True, slots=True)
class Measurement:
    """A saving measured by an experiment: original vs. one variant, alternated."""

    code: str
    path: str  # absolute path of the finding's file
    line: int
    variant: str  # what was switched off ("num_workers=2", "torch.from_numpy at train.py:41")
    verdict: str  # SAVING | SLOWER | NO_CHANGE | SKIPPED
    per_step: float | None = None  # median per-step difference (original - variant), seconds
    ci_low: float | None = None  # bootstrap 95 % interval of that median difference
    ci_high: float | None = None
    total: float | None = None  # per_step x the run's optimizer steps
    steps: int = 0  # optimizer steps measured per arm
    unit: str = SECONDS
    why: str = ""  # for SKIPPED: the reason; otherwise how it was measured
    # each window's figure (its whole-run time, or its median step), original then variant,
    # in the order they ran: what the verdict came from, to check it afterwards
    windows: tuple[list[float], list[float]] | None = None
    p: float | None = None  # the windows' permutation p-value, this variant alone
    p_corrected: float | None = None  # the same, Holm-corrected for every variant the experiment tested

    def key(self) -> tuple[str, str, int]:
        return (self.code, self.path, self.line)

    def interval_total(self) -> tuple[float, float] | None:
        """The 95 % interval on the scale of ``total`` (over the run), if there is one."""
        if self.ci_low is None or self.ci_high is None:
            return None
        scale = self.total / self.per_step if (self.per_step and self.total is not None) else 1.0
        return (self.ci_low * scale, self.ci_high * scale)

    def inconclusive_about(self, expected_total: float) -> bool:
        """No saving resolved (the interval holds 0, or it did not pass the corrected
        test), and the interval holds ``expected_total``: the windows could not tell the
        expected saving apart, so this is no evidence against it."""
        if self.verdict != NO_CHANGE:
            return False
        interval = self.interval_total()
        return interval is not None and interval[0] <= expected_total <= interval[1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


#: rank_key's first element for a finding with nothing to rank it by (not ranked)
UNRANKED = 4


def rank_key(measured: Measurement | None, expected: Estimate | None) -> tuple[int, float]:
    """Sort key (ascending) for ranking findings by what fixing them saves; observed time
    never ranks by itself. In order:

    0. a measured saving (the interval resolves it), by its size;
    1. an expected saving above zero, by its size; a measurement ranks a finding only when
       it decides, so an inconclusive one (no saving resolved, and its interval holds the
       expected saving) and one that could not see the code (``not measurable``, ``skipped``) leave the
       expected figure in charge;
    2. measured as no change or slower where the interval excludes the expected saving
       (or there is no expected figure), by the measured difference;
    3. an expected saving of zero ("none here"): never above a finding expected to save;
    4. (UNRANKED) nothing to rank by.
    """
    expected_total = None
    if expected is not None and expected.unit == SECONDS and expected.total is not None and expected.not_applicable is None:
        expected_total = expected.total
    if measured is not None and measured.unit == SECONDS and measured.verdict in (SAVING, NO_CHANGE, SLOWER):
        value = measured.total if measured.total is not None else (measured.per_step or 0.0)
        if measured.verdict == SAVING:
            return (0, -value)
        if expected_total is None:
            return (2, -value)
        if expected_total > 0 and not measured.inconclusive_about(expected_total):
            return (2, -value)  # the windows saw it, and they exclude the expected saving
    if expected_total is not None:
        return (1, -expected_total) if expected_total > 0 else (3, 0.0)
    return (UNRANKED, 0.0)
