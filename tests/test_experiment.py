"""`profile --experiment` without running torch: the statistics on synthetic per-step
samples, the plan (what is tried, what is skipped and why), the window length, and
the source variants on real source (each rewrite changes only its one thing and
never touches the user's file)."""

from __future__ import annotations

import ast
import difflib
import os
import random
import statistics
from pathlib import Path

import pytest

from torchlint.config import Config
from torchlint.engine import lint_paths
from torchlint.experiment import stats
from torchlint.experiment.plan import candidates_for, plan, worker_values
from torchlint.experiment.runner import Windowing, windowing
from torchlint.experiment.variants import VariantError, make_variant
from torchlint.findings import Finding, Location
from torchlint.savings import NO_CHANGE, SAVING, SLOWER

# -- statistics ---------------------------------------------------------------


def _windows(median: float, spread: float, n_windows: int, steps: int, seed: int, drift: float = 0.0):
    rng = random.Random(seed)
    out = []
    for w in range(n_windows):
        shift = rng.gauss(0, drift)
        out.append([max(median + shift + rng.gauss(0, spread), 1e-6) for _ in range(steps)])
    return out


def test_a_real_saving_is_a_saving_with_an_interval_around_it() -> None:
    original = _windows(0.050, 0.002, 4, 30, seed=1)
    variant = _windows(0.040, 0.002, 4, 30, seed=2)
    c = stats.compare(original, variant)
    assert c.verdict == SAVING
    assert c.ci_low <= c.per_step <= c.ci_high
    assert 0.008 < c.per_step < 0.012
    assert c.original_steps == c.variant_steps == 120


def test_a_slower_variant_is_slower() -> None:
    c = stats.compare(_windows(0.030, 0.001, 4, 20, seed=3), _windows(0.036, 0.001, 4, 20, seed=4))
    assert c.verdict == SLOWER
    assert c.per_step < 0 and c.ci_high < 0


def test_a_difference_inside_the_noise_is_no_measurable_change() -> None:
    # the same distribution on both arms, with window-to-window drift larger than any
    # step-level difference: the interval must include zero
    original = _windows(0.050, 0.004, 3, 25, seed=5, drift=0.003)
    variant = _windows(0.050, 0.004, 3, 25, seed=6, drift=0.003)
    c = stats.compare(original, variant)
    assert c.ci_low <= 0 <= c.ci_high
    assert c.verdict == NO_CHANGE


def test_window_to_window_noise_widens_the_interval() -> None:
    calm = stats.compare(_windows(0.05, 0.002, 4, 30, 7), _windows(0.049, 0.002, 4, 30, 8))
    noisy = stats.compare(_windows(0.05, 0.002, 4, 30, 7, drift=0.004), _windows(0.049, 0.002, 4, 30, 8, drift=0.004))
    assert (noisy.ci_high - noisy.ci_low) > (calm.ci_high - calm.ci_low)
    assert noisy.noise > calm.noise


def test_three_whole_run_windows_per_arm_never_make_a_verdict() -> None:
    """Whole-run windows are the only replicates: 3 against 3, even fully apart, cannot
    reach 95 % (an exact permutation test gives p = 0.1), although the bootstrap's
    interval excludes 0. Four against four, fully apart, can (p = 2/70)."""
    slow, fast = [[2.45], [2.50], [2.40]], [[2.10], [2.20], [2.15]]
    three = stats.compare(slow, fast)
    assert three.ci_low > 0 and three.verdict == NO_CHANGE
    assert stats.permutation_p([2.45, 2.5, 2.4], [2.1, 2.2, 2.15]) == pytest.approx(0.1)
    # the stopping rule's comparison (runner._precise): the same interval, no permutation test
    interval = stats.compare(slow, fast, permutation=False)
    assert (interval.ci_low, interval.ci_high, interval.p) == (three.ci_low, three.ci_high, 1.0) and interval.verdict == SAVING
    assert stats.compare([*slow, [2.6]], [*fast, [2.0]]).verdict == SAVING
    assert stats.compare([*fast, [2.0]], [*slow, [2.6]]).verdict == SLOWER
    mixed = stats.compare([[2.4], [2.1], [2.45], [2.6]], [[2.5], [2.15], [2.2], [2.0]])
    assert mixed.verdict == NO_CHANGE


def test_step_windows_are_replicated_by_window_not_by_step() -> None:
    """Steps of one window share its process: 3 windows a side whose every step is 1 ms
    apart make a bootstrap interval that excludes 0, but windows, not steps, are the
    replicates, and 3 against 3 cannot reach 95 %. A fourth window each, apart, can."""
    rng = random.Random(1)

    def arm(medians: list[float]) -> list[list[float]]:
        return [[m + rng.gauss(0, 0.0003) for _ in range(30)] for m in medians]

    slow, fast = arm([0.0500, 0.0506, 0.0497]), arm([0.0490, 0.0492, 0.0494])
    three = stats.compare(slow, fast)
    assert three.ci_low > 0 and three.verdict == NO_CHANGE
    assert stats.window_p(slow, fast) == pytest.approx(0.1)
    assert stats.compare([*slow, *arm([0.0503])], [*fast, *arm([0.0489])]).verdict == SAVING


def test_whole_run_windows_are_compared_by_the_hodges_lehmann_shift() -> None:
    """One figure per window: the median of all pairwise differences, which with ten
    runs a side scatters about 12 % less than the difference of the two medians
    (6 % at four), and still ignores one very slow run."""
    rng = random.Random(3)
    hl, med = [], []
    for _ in range(2000):
        o, v = [rng.gauss(1.0, 0.03) for _ in range(10)], [rng.gauss(0.95, 0.03) for _ in range(10)]
        hl.append(stats.hodges_lehmann(o, v))
        med.append(statistics.median(o) - statistics.median(v))
    assert statistics.fmean(hl) == pytest.approx(0.05, abs=0.002)
    assert statistics.stdev(hl) < 0.92 * statistics.stdev(med)
    assert stats.compare([[x] for x in o], [[x] for x in v]).per_step == stats.hodges_lehmann(o, v)
    one_slow = stats.compare([[1.0], [1.01], [0.99], [1.0], [3.0]], [[0.9], [0.91], [0.89], [0.9], [0.9]])
    assert one_slow.per_step == pytest.approx(0.1, abs=0.011)


def test_the_whole_run_interval_covers_the_true_shift_at_its_confidence() -> None:
    """The exact (Moses) interval of the shift holds the true shift in at least 95 % of
    experiments even with five runs a side, where a percentile bootstrap over the same
    five runs held it in 88 % (it cannot be wider than the runs' own spread). Four a
    side: the whole range."""
    rng = random.Random(5)
    covered = 0
    for _ in range(400):
        o, v = [rng.gauss(1.0, 0.03) for _ in range(5)], [rng.gauss(0.95, 0.03) for _ in range(5)]
        c = stats.compare([[x] for x in o], [[x] for x in v])
        covered += c.ci_low <= 0.05 <= c.ci_high
    assert covered / 400 >= 0.94
    assert stats.shift_interval([1.0, 2.0, 3.0, 4.0], [0.0, 0.5, 1.0, 1.5]) == (-0.5, 4.0)
    # the Mann-Whitney table: 8 against 8, two-sided 5 %, rejects for U <= 13
    cdf = stats.mann_whitney_cdf(8, 8)
    assert cdf[13] <= 0.025 < cdf[14]


def test_compare_needs_steps_on_both_arms() -> None:
    with pytest.raises(ValueError):
        stats.compare([[0.1, 0.2]], [[]])


@pytest.mark.parametrize("low, high, verdict", [(0.001, 0.01, SAVING), (-0.01, -0.001, SLOWER), (-0.001, 0.01, NO_CHANGE), (0.0, 0.01, NO_CHANGE)])
def test_verdict_follows_the_interval_only(low: float, high: float, verdict: str) -> None:
    assert stats.verdict_of(low, high) == verdict


# -- plan and windows -------------------------------------------------------------


def _finding(code: str, line: int = 3) -> Finding:
    return Finding(code, "x", "m", Location("/abs/train.py", line, 5, line + 1, 9))


def test_worker_counts_include_the_one_the_expected_figure_assumes() -> None:
    # the expected saving of TL201 assumes 4 workers (estimate.workers_estimate): an experiment
    # that tried only 2 on a 2-core machine could neither confirm nor refute it (issue 28)
    assert worker_values(2) == [4]
    assert worker_values(4) == [2, 4]
    assert worker_values(8) == [2, 4]
    assert worker_values(1) == [4]


def test_gpu_remedies_are_not_tried_without_a_gpu() -> None:
    for code in ("TL101", "TL202", "TL403", "TL402"):
        (c,) = candidates_for(_finding(code), cuda=False, cores=2)
        assert c.skip and "CUDA" in c.skip
    (pin,) = candidates_for(_finding("TL202"), cuda=True, cores=2)
    assert pin.skip is None and pin.switches[0]["set"] == {"pin_memory": True}


def test_dataloader_switch_targets_the_finding_span() -> None:
    cs = candidates_for(_finding("TL201", line=10), cuda=False, cores=8)
    assert [c.switches[0]["set"]["num_workers"] for c in cs] == [2, 4]
    assert cs[0].switches[0]["lines"] == [10, 11] and cs[0].switches[0]["path"] == "/abs/train.py"


def test_plan_tries_the_most_observed_first_and_skips_last() -> None:
    out = plan([(_finding("TL301"), 0.1), (_finding("TL101"), 5.0), (_finding("TL203"), 0.9)], cuda=False, cores=2)
    assert [c.finding.code for c in out] == ["TL203", "TL301", "TL101"]
    assert out[-1].skip


def test_windows_cover_k_steps_or_the_whole_short_run() -> None:
    long_run = windowing({"count": 500, "durations_s": [0.01] * 499, "first_step_at_s": 1.0}, 6.0)
    assert isinstance(long_run, Windowing) and long_run.max_steps == 2 + 1 + 40
    short = windowing({"count": 8, "durations_s": [0.2] * 7, "first_step_at_s": 0.5, "max_steps": 8}, 3.0)
    assert isinstance(short, Windowing) and short.max_steps == 8
    assert isinstance(windowing({"count": 2, "durations_s": [0.1]}, 1.0), str)


def test_whole_run_windows_when_the_budget_affords_them() -> None:
    steps = {"count": 100, "durations_s": [0.02] * 99, "first_step_at_s": 0.5}
    affordable = windowing(steps, 2.5, candidates=2, budget_s=70)
    assert isinstance(affordable, Windowing) and affordable.mode == "run" and affordable.max_steps is None
    tight = windowing(steps, 2.5, candidates=2, budget_s=20)
    assert isinstance(tight, Windowing) and tight.mode == "steps" and tight.max_steps == 2 + 1 + 25


# -- source variants on real source -----------------------------------------------

SCRIPT = '''\
import numpy as np
import torch
from torch import nn

model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rng = np.random.default_rng(0)
history = []
for step in range(4):
    x = torch.tensor(rng.normal(size=(4, 3, 8, 8)).astype(np.float32))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(loss)

model.eval()
# evaluate once
scores = model(torch.ones(2, 3, 8, 8))
print(scores.sum())
'''


@pytest.fixture()
def user_script(tmp_path: Path) -> Path:
    path = tmp_path / "proj" / "train.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


def _variant_for(path: Path, code: str, tmp_path: Path):
    findings = [f for f in lint_paths([path], Config()).findings if f.code == code]
    assert findings, f"{code} not reported on the sample"
    before = path.read_bytes()
    v = make_variant(findings[0], tmp_path / "variants" / code)
    assert path.read_bytes() == before  # the user's file is never written
    assert Path(v.copy).parent == tmp_path / "variants" / code
    compile(v.after, v.copy, "exec")
    changed = [line for line in difflib.ndiff(v.before.splitlines(), v.after.splitlines()) if line[:1] in "+-"]
    return v, changed


def test_tl301_wraps_only_the_evaluation_statement_in_no_grad(user_script: Path, tmp_path: Path) -> None:
    v, changed = _variant_for(user_script, "TL301", tmp_path)
    assert sorted(changed) == ["+     scores = model(torch.ones(2, 3, 8, 8))", "+ with torch.no_grad():", "- scores = model(torch.ones(2, 3, 8, 8))"]
    assert "# evaluate once\nwith torch.no_grad():" in v.after
    assert v.description.startswith("mechanical")


def test_tl302_detaches_only_the_stored_loss(user_script: Path, tmp_path: Path) -> None:
    _v, changed = _variant_for(user_script, "TL302", tmp_path)
    assert changed == ["-     history.append(loss)", "+     history.append(loss.detach())"]


def test_tl203_uses_the_engine_fix_when_there_is_one(user_script: Path, tmp_path: Path) -> None:
    v, changed = _variant_for(user_script, "TL203", tmp_path)
    assert v.description.startswith("autofix")
    assert len(changed) == 2 and "torch.tensor(" in changed[0] and "torch.tensor(" not in changed[1]
    assert ast.dump(ast.parse(changed[0][2:].strip()).body[0].targets[0]) == ast.dump(ast.parse(changed[1][2:].strip()).body[0].targets[0])


def test_tl203_mechanical_from_numpy_without_an_autofix(tmp_path: Path) -> None:
    from torchlint.experiment.variants import _mechanical
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    text = "import torch\nimport numpy as np\na = np.zeros(3)\nt = torch.tensor(a)\n"
    wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
    fix = _mechanical(Finding("TL203", "x", "m", Location("f.py", 4, 5, 4, 20)), wrapper)
    assert wrapper.module.code_for_node(fix.new) == "torch.from_numpy(a)"
    with pytest.raises(VariantError):
        _mechanical(Finding("TL203", "x", "m", Location("f.py", 3, 5, 3, 16)), MetadataWrapper(cst.parse_module("import torch\nx = 1\nt = torch.tensor(a, dtype=torch.float32)\n"), unsafe_skip_copy=True))


def test_tl401_autofix_drops_the_conv_bias(user_script: Path, tmp_path: Path) -> None:
    v, changed = _variant_for(user_script, "TL401", tmp_path)
    assert v.description.startswith("autofix")
    assert changed[0].startswith("- model =") and "bias=False" in changed[1] and len(changed) == 2


def test_a_rule_without_a_rewrite_says_so(user_script: Path, tmp_path: Path) -> None:
    finding = Finding("TL304", "x", "m", Location(str(user_script), 19, 10))
    with pytest.raises(VariantError):
        make_variant(finding, tmp_path / "v")


# -- the alternation and the budget, with a fake window server --------------------


class FakeServer:
    """Answers windows from a model: the variant's steps take ``variant_s``."""

    def __init__(self, original_s: float, variant_s: float, *, fired: int = 1, fail: str | None = None,
                 noise: float = 0.01) -> None:
        self.original_s, self.variant_s, self.fired, self.fail = original_s, variant_s, fired, fail
        self.noise = noise
        self.order: list[str] = []
        self.rng = random.Random(0)

    def window(self, script, args, cwd, *, max_steps, switches=None, overrides=None, timeout_s=0):
        arm = "v" if (switches or overrides) else "o"
        self.order.append(arm)
        if self.fail == arm:
            return {"status": 1, "error": "RuntimeError: boom"}
        mean = self.variant_s if arm == "v" else self.original_s
        drift = self.rng.gauss(0, self.noise)  # the whole window runs fast or slow
        steps = [mean * (1 + drift + self.rng.gauss(0, 0.01)) for _ in range(12)]
        return {"status": 0, "durations_s": steps, "steps": 13, "wall_s": sum(steps),
                "applied": [{"target": "DataLoader", "calls": self.fired}] if arm == "v" else []}

    def close(self, *, force=False):
        pass


def _experiment(server: FakeServer, budget: float = 60.0, mode: str = "steps"):
    from torchlint.experiment.plan import Candidate
    from torchlint.experiment.runner import Experiment

    exp = Experiment(script="t.py", args=[], cwd="/", work_dir=Path("/nonexistent"), budget_s=budget,
                     win=Windowing(15, 2, 0.01, mode), run_steps=100, make_server=lambda _dir: server)
    cand = Candidate(_finding("TL201"), "num_workers=2", "runtime", [{"target": "DataLoader"}])
    return exp, cand


def test_windows_alternate_abba_and_a_real_saving_is_measured() -> None:
    server = FakeServer(0.020, 0.015)
    exp, cand = _experiment(server)
    m = exp.measure(cand, {}, "runtime switch")
    assert server.order[:5] == ["o", "o", "v", "v", "o"]  # a discarded warm-up window, then O V V O
    assert m.verdict == SAVING and m.per_step == pytest.approx(0.005, rel=0.2)
    assert m.total == pytest.approx(m.per_step * 100)


def test_pairs_are_added_while_the_interval_is_wide_not_until_it_excludes_zero() -> None:
    """More pairs buy down noise (up to the budget share): a noisy equal pair of arms
    gets more windows than the minimum, a calm one stops at the minimum, and neither is
    called a saving."""
    from torchlint.experiment.runner import MAX_PAIRS, MIN_PAIRS

    def measure(server: FakeServer):
        exp, cand = _experiment(server, budget=600, mode="run")
        return exp.measure(cand, {}, "runtime switch")

    calm, noisy = FakeServer(1.0, 1.0, noise=0.0005), FakeServer(1.0, 1.0, noise=0.03)
    m_calm, m_noisy = measure(calm), measure(noisy)
    assert len(calm.order) == 1 + 2 * MIN_PAIRS
    assert 1 + 2 * MIN_PAIRS < len(noisy.order) <= 1 + 2 * MAX_PAIRS
    assert m_calm.verdict == m_noisy.verdict == NO_CHANGE


def test_a_switch_that_never_fired_is_skipped_not_no_change() -> None:
    # calm windows: the minimum pairs are precise enough (with the default noise the pairs
    # went on to the budget's share, ~5 s of permutations, before the switch was asked about)
    server = FakeServer(0.02, 0.02, fired=0, noise=0.0005)
    exp, cand = _experiment(server)
    out = exp.measure(cand, {}, "runtime switch")
    assert isinstance(out, dict) and "never applied" in out["reason"]


def test_a_failing_variant_is_skipped_with_its_error() -> None:
    exp, cand = _experiment(FakeServer(0.02, 0.02, fail="v"))
    out = exp.measure(cand, {}, "runtime switch")
    assert isinstance(out, dict) and "variant failed: RuntimeError: boom" in out["reason"]


def test_no_window_starts_when_the_budget_cannot_hold_the_minimum() -> None:
    server = FakeServer(0.02, 0.015)
    exp, cand = _experiment(server, budget=1.0)  # less than starting the window server
    out = exp.measure(cand, {}, "runtime switch")
    assert isinstance(out, dict) and out["reason"].startswith("budget") and server.order == []


def test_each_forked_window_gets_its_own_memory_layout() -> None:
    """Windows are forks of one server: padding drawn from the server's random state
    would be the same in every window (and the arm's layout bias with it). Drawn from
    the OS, two forks differ."""
    from torchlint.profiler.measure import _shuffled_layout

    sizes = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the window
            small, big = _shuffled_layout()
            os.write(write, f"{len(small)} {len(big)}".encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        sizes.append(os.read(read, 64))
        os.close(read)
    assert sizes[0] != sizes[1]
