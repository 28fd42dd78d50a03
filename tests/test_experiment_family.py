"""The verdicts of one experiment are corrected together (Holm), and each candidate
gets the pairs that correction needs: a ranked list of measured savings must not hold
a false one 5 % of the time per line."""

from __future__ import annotations

import random

import pytest

from torchlint.experiment import stats
from torchlint.experiment.runner import corrected, windowing
from torchlint.savings import NO_CHANGE, SAVING, SLOWER, Measurement


def test_fully_separated_windows_reach_a_p_that_shrinks_with_the_pairs() -> None:
    for n in (4, 5, 6):
        apart = stats.permutation_p([2.0 + i / 100 for i in range(n)], [1.0 + i / 100 for i in range(n)])
        assert apart == pytest.approx(stats.separated_p(n))
    assert stats.separated_p(4) == pytest.approx(2 / 70)


@pytest.mark.parametrize(("tests", "pairs"), [(1, 4), (2, 5), (6, 5), (7, 6), (23, 6), (24, 7)])
def test_pairs_to_separate_lets_a_clean_saving_pass_the_strictest_holm_bar(tests: int, pairs: int) -> None:
    assert stats.pairs_to_separate(tests, 4) == pairs
    assert stats.separated_p(pairs) < 0.05 / tests
    assert pairs == 4 or stats.separated_p(pairs - 1) >= 0.05 / tests


def test_holm_adjusts_in_step_down_order_and_keeps_the_input_order() -> None:
    # sorted: 0.01 x 3, then 0.03 x 2 = 0.06, then 0.04 x 1 = 0.04 -> kept at 0.06 (monotone)
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert stats.holm([0.02]) == pytest.approx([0.02])


def _m(verdict: str, p: float | None, line: int = 3) -> Measurement:
    return Measurement("TL301", "/x/train.py", line, "v", verdict, per_step=0.01, ci_low=0.001, ci_high=0.02,
                       total=1.0, why="measured", p=p)


def test_a_saving_that_only_passes_alone_is_no_measurable_change_once_corrected() -> None:
    """p = 2/70 passes at 5 % alone; beside two other tests Holm needs it under 5/3 %."""
    clear, marginal, null = _m(SAVING, 0.0079, 1), _m(SAVING, 2 / 70, 2), _m(NO_CHANGE, 0.6, 3)
    out = corrected([clear, marginal, null])
    assert [m.verdict for m in out] == [SAVING, NO_CHANGE, NO_CHANGE]
    assert out[0].p_corrected == pytest.approx(3 * 0.0079)
    assert "would read 'saving' alone" in out[1].why and "3 variants tested (Holm)" in out[1].why
    assert corrected([marginal])[0].verdict == SAVING
    assert corrected([_m(SLOWER, 2 / 70), null])[0].verdict == NO_CHANGE


def test_a_measurement_without_a_p_value_is_left_as_it_is() -> None:
    skipped = Measurement("TL201", "/x/train.py", 9, "num_workers=2", "skipped", why="budget")
    assert corrected([skipped, _m(SAVING, 0.001)]) [0] == skipped


def test_whole_run_windows_need_the_corrected_pairs_for_every_candidate() -> None:
    steps = {"count": 100, "durations_s": [0.02] * 99, "first_step_at_s": 0.5}
    one = windowing(steps, 2.5, candidates=1, budget_s=30)
    three = windowing(steps, 2.5, candidates=3, budget_s=90)
    assert one.mode == "run" and one.min_pairs == 4  # 4 + 1 * 2 * 4 * 2.8 = 26.4 s
    assert three.mode == "run" and three.min_pairs == 5  # 4 + 3 * 2 * 5 * 2.8 = 88 s
    assert windowing(steps, 2.5, candidates=3, budget_s=80).mode == "steps"


def test_correction_holds_the_family_wise_false_saving_rate_on_exchangeable_windows() -> None:
    """Five candidates whose variants change nothing, whole-run windows with the noise of
    this machine (2 %): uncorrected, some family reads a false verdict far more often than
    5 % of experiments; corrected, at most about 5 %."""
    rng = random.Random(11)
    families, raw_false, corrected_false = 300, 0, 0
    pairs = stats.pairs_to_separate(5, 4)
    for _ in range(families):
        ms = []
        for line in range(5):
            o = [[rng.gauss(2.0, 0.04)] for _ in range(pairs)]
            v = [[rng.gauss(2.0, 0.04)] for _ in range(pairs)]
            c = stats.compare(o, v)
            ms.append(Measurement("TL301", "/x.py", line, "v", c.verdict, per_step=c.per_step,
                                  ci_low=c.ci_low, ci_high=c.ci_high, p=c.p))
        raw_false += any(m.verdict != NO_CHANGE for m in ms)
        corrected_false += any(m.verdict != NO_CHANGE for m in corrected(ms))
    assert raw_false / families > 0.12
    assert corrected_false / families <= 0.07


def test_the_report_says_when_only_the_correction_made_it_no_change() -> None:
    from torchlint.report.profile_text import measured_line

    out = corrected([_m(SAVING, 2 / 70, 1), _m(NO_CHANGE, 0.6, 2)])
    line = measured_line(out[0].to_dict())
    assert line is not None and line.startswith("measured: no measurable change")
    assert "once corrected for the other variants tested (Holm)" in line
    assert "Holm" not in (measured_line(out[1].to_dict()) or "")
