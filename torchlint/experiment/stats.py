"""Statistics of an experiment: per-step median difference, bootstrap interval, verdict.

The samples are per-step durations (seconds) grouped by *window*: one window is
one child run of the original or of the variant. Steps within one window share
that process's conditions (its memory layout, what else the machine was doing),
so they are not independent draws. The bootstrap therefore resamples at both
levels: windows with replacement, then steps within each drawn window
(a hierarchical bootstrap). Between-window noise widens the interval, as it
should; with a single window per arm it reduces to a plain bootstrap over steps.

The difference is ``median(original) - median(variant)``: positive means the
variant's steps are shorter (a saving). Where every window is one figure (a
whole-run time), the windows are plain samples and the difference is the
Hodges-Lehmann shift, the median of every original-minus-variant difference:
as robust to one slow run as the difference of medians, and nearly as precise
as the difference of means (with ten normal runs a side it scatters 12 % less
than the difference of medians, which would need about a quarter more runs). An interval that
contains 0 is "no measurable change", whatever the point estimate says.

The windows are the only independent replicates, and a bootstrap over a few of them
is far too narrow: with 3 against 3 whole-run windows it can exclude 0 although no
test on six numbers can reach 95 %, and with K-step windows the steps' own spread
narrows it further while one slow or fast process moves every step it ran (a window
of zero_grad variants once read as a 2 ms/step saving that the whole runs did not
show). So a saving or a slowdown also needs an exact permutation test over the
windows' figures (their medians, or their one whole-run time; ``permutation_p``)
below 5 %: at least 4 windows per arm, nearly all apart.

One experiment tests every candidate of a run, and a report ranks them: at 5 % each,
one null candidate in twenty still reads as a saving (a CPU padding fix once read
+272 ms against true savings of +2 and -82 ms). So the verdicts of one experiment are
corrected together (``holm``: Holm's step-down, family-wise error at most 5 %), and a
candidate gets enough pairs that its windows, fully apart, can pass its share of the
5 % (``pairs_to_separate``).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from torchlint.savings import NO_CHANGE, SAVING, SLOWER

Windows = Sequence[Sequence[float]]


@dataclass(frozen=True, slots=True)
class Comparison:
    per_step: float  # median(original) - median(variant), seconds
    ci_low: float
    ci_high: float
    verdict: str
    original_median: float
    variant_median: float
    original_steps: int
    variant_steps: int
    noise: float  # relative spread of the original windows' medians (max-min over median)
    p: float = 1.0  # the windows' permutation p-value (window_p)


def _pooled_median(windows: Windows) -> float:
    return statistics.median([x for w in windows for x in w])


def _resample(windows: Windows, rng: random.Random) -> list[float]:
    drawn: list[float] = []
    n = len(windows)
    for _ in range(n):
        w = windows[rng.randrange(n)]
        k = len(w)
        drawn.extend(w[rng.randrange(k)] for _ in range(k))
    return drawn


def hodges_lehmann(original: Sequence[float], variant: Sequence[float]) -> float:
    """The median of every pairwise difference ``o - v``: the shift between two samples."""
    return statistics.median([o - v for o in original for v in variant])


def mann_whitney_cdf(n: int, m: int) -> list[float]:
    """P(U <= u) for u = 0..n*m, U the Mann-Whitney count of (x, y) pairs with x > y,
    exact under the null of no shift (every ordering of the n + m values equally likely)."""
    # ways[j][u]: orderings of i x's and j y's with count u, built one x at a time
    ways = [[1] + [0] * (n * m) for _ in range(m + 1)]
    for _i in range(1, n + 1):
        nxt = [[0] * (n * m + 1) for _ in range(m + 1)]
        for j in range(m + 1):
            for u in range(n * m + 1):
                # the largest value is a y (count unchanged) or an x (above all j y's)
                nxt[j][u] = (nxt[j - 1][u] if j else 0) + (ways[j][u - j] if u >= j else 0)
        ways = nxt
    total = sum(ways[m])
    out, acc = [], 0
    for count in ways[m]:
        acc += count
        out.append(acc / total)
    return out


def shift_interval(original: Sequence[float], variant: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The distribution-free interval of the Hodges-Lehmann shift (Moses): between the
    k-th smallest and k-th largest pairwise difference, k from the exact Mann-Whitney
    distribution. Honest with four runs a side, where a bootstrap's interval is far too
    narrow; with so few runs that no k reaches the confidence, the whole range."""
    diffs = sorted(o - v for o in original for v in variant)
    cdf = mann_whitney_cdf(len(original), len(variant))
    tail = (1.0 - confidence) / 2.0
    k = sum(1 for p in cdf if p <= tail)  # P(U <= k - 1) <= tail
    k = max(k, 1)
    return diffs[k - 1], diffs[len(diffs) - k]


def window_noise(windows: Windows) -> float:
    """Relative spread of the windows' medians: (max - min) / median of them."""
    medians = [statistics.median(w) for w in windows if w]
    if len(medians) < 2:
        return 0.0
    mid = statistics.median(medians)
    return (max(medians) - min(medians)) / mid if mid > 0 else 0.0


def permutation_p(a: Sequence[float], b: Sequence[float], exact_up_to: int = 20_000, seed: int = 0) -> float:
    """Two-sided p-value of the difference of means between ``a`` and ``b`` under
    relabelling (means, not medians: with a handful of windows, medians tie across many
    splits and no split could ever be extreme enough); exact over every split when there
    are few, else 20,000 random ones."""
    pooled = [*a, *b]
    n, k = len(pooled), len(a)
    total = sum(pooled)

    def gap(chosen: tuple[int, ...]) -> float:
        left = sum(pooled[i] for i in chosen)
        return abs(left / k - (total - left) / (n - k))

    observed = gap(tuple(range(k)))  # the labelling as measured, by the same arithmetic as every split

    if math.comb(n, k) <= exact_up_to:
        splits = list(itertools.combinations(range(n), k))
    else:
        rng = random.Random(seed)
        splits = [tuple(rng.sample(range(n), k)) for _ in range(exact_up_to)]
    extreme = sum(1 for chosen in splits if gap(chosen) >= observed - 1e-12)
    return extreme / len(splits)


def window_p(original: Windows, variant: Windows) -> float:
    """Permutation p-value over the windows, each one figure: its median step (or its
    whole-run time)."""
    return permutation_p([statistics.median(w) for w in original], [statistics.median(w) for w in variant])


def separated_p(pairs: int) -> float:
    """The smallest two-sided p a permutation test of ``pairs`` windows against as many can
    give: the two arms fully apart, one way or the other, of C(2n, n) labellings."""
    return 2 / math.comb(2 * pairs, pairs)


def pairs_to_separate(tests: int, least: int, alpha: float = 0.05) -> int:
    """The fewest pairs (at least ``least``) with which fully separated windows pass the
    strictest bar Holm's correction sets for ``tests`` tests, ``alpha / tests``: 4 for one
    test, 5 for up to 6, 6 for up to 23."""
    n = least
    while separated_p(n) >= alpha / max(tests, 1):
        n += 1
    return n


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the k-th smallest p is
    multiplied by (m - k + 1), never below the adjusted p before it, at most 1. A test
    whose adjusted p is under alpha is significant with the family-wise error at most
    alpha, whatever the dependence between the tests."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [1.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * ps[i]))
        adjusted[i] = running
    return adjusted


def verdict_of(low: float, high: float) -> str:
    if low > 0:
        return SAVING
    if high < 0:
        return SLOWER
    return NO_CHANGE


def compare(
    original: Windows,
    variant: Windows,
    *,
    iterations: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    permutation: bool = True,
) -> Comparison:
    """Median per-step difference (original - variant) with a hierarchical bootstrap CI;
    where every window is one figure, the Hodges-Lehmann shift with its exact interval.
    ``permutation=False``: no permutation test (``p`` stays 1.0 and the verdict is the
    interval's alone), for a caller that reads only the interval: the test is 20,000
    relabellings once the arms hold 9 windows or more."""
    original = [list(w) for w in original if len(w) > 0]
    variant = [list(w) for w in variant if len(w) > 0]
    if not original or not variant:
        raise ValueError("each arm needs at least one window with steps")
    rng = random.Random(seed)
    one_figure = all(len(w) == 1 for w in (*original, *variant))

    def shift(o: list[float], v: list[float]) -> float:
        return hodges_lehmann(o, v) if one_figure else statistics.median(o) - statistics.median(v)

    if one_figure:
        low, high = shift_interval([w[0] for w in original], [w[0] for w in variant], confidence)
    else:
        diffs = sorted(shift(_resample(original, rng), _resample(variant, rng)) for _ in range(iterations))
        tail = (1.0 - confidence) / 2.0
        low = diffs[int(tail * (iterations - 1))]
        high = diffs[int(round((1.0 - tail) * (iterations - 1)))]
    om, vm = _pooled_median(original), _pooled_median(variant)
    verdict = verdict_of(low, high)
    p = window_p(original, variant) if permutation else 1.0
    if permutation and verdict != NO_CHANGE and p >= 1.0 - confidence:
        verdict = NO_CHANGE  # the windows themselves do not tell the arms apart (module docstring)
    return Comparison(
        per_step=shift([x for w in original for x in w], [x for w in variant for x in w]),
        ci_low=low,
        ci_high=high,
        verdict=verdict,
        original_median=om,
        variant_median=vm,
        original_steps=sum(len(w) for w in original),
        variant_steps=sum(len(w) for w in variant),
        noise=window_noise(original),
        p=p,
    )
