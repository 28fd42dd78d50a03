"""What an experiment could not see never demotes a finding, and the report says what it
saw (issue 28): the ranking rule, where a finding's code runs, the report's account of
the experiment, and the report defects (the interval's format, the unranked sections,
options after the script)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import ahead
from test_profile_run import profile

from torchlint.correlate import fmt_interval
from torchlint.experiment.runner import where_it_runs
from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.report import profile_text
from torchlint.report.profile_json import _experiment
from torchlint.savings import NO_CHANGE, NOT_MEASURABLE, SAVING, SKIPPED, SLOWER, Estimate, Measurement, rank_key

STEPS = 100


def _m(verdict: str, per_step: float, low: float | None = None, high: float | None = None) -> Measurement:
    return Measurement("TL201", "/t.py", 1, "v", verdict, per_step=per_step, ci_low=low, ci_high=high,
                       total=per_step * STEPS, steps=40)


def _e(total: float) -> Estimate:
    return Estimate("model", per_step=total / STEPS, total=total)


def _order(*items: tuple[Measurement | None, Estimate | None]) -> list[int]:
    return sorted(range(len(items)), key=lambda i: rank_key(*items[i]))


def test_an_inconclusive_measurement_leaves_the_expected_figure_in_charge():
    # issue 28: an MLP's TL201, expected 4.1 s, measured "no change" in [-2.7, +2.0] s, fell below
    # two findings expected to save 0 ms
    tl201 = (_m(NO_CHANGE, -0.004, -0.027, 0.020), _e(4.1))
    item = (None, _e(0.0))
    cpu = (_m(SKIPPED, 0.0), _e(0.0))
    assert _order(item, cpu, tl201)[0] == 2
    # an interval that holds 0 and the expected saving is no evidence either way: the expected ranks
    wide = (_m(NO_CHANGE, 0.004, -0.027, 0.045), _e(4.1))
    assert rank_key(*wide) == (1, -4.1)
    assert _order(item, cpu, wide)[0] == 2
    # an interval above 0 that did not pass the corrected test is no saving, and it holds the
    # expected figure: not a decision either (the savings benchmark caught numpy_mlp's TL203)
    corrected_away = (_m(NO_CHANGE, 0.0006, 0.0001, 0.002), _e(0.018))
    assert rank_key(*corrected_away) == (1, -0.018)


def test_a_measurement_decides_when_its_interval_excludes_the_expected_saving():
    contradicted = (_m(NO_CHANGE, 0.001, -0.002, 0.004), _e(4.1))  # [-0.2, +0.4] s excludes 4.1 s
    assert rank_key(*contradicted)[0] == 2
    slower = (_m(SLOWER, -0.01, -0.02, -0.005), _e(1.0))
    assert rank_key(*slower)[0] == 2
    saving = (_m(SAVING, 0.01, 0.005, 0.015), _e(0.1))
    assert rank_key(*saving) == (0, -1.0)


def test_a_zero_expected_saving_never_ranks_above_a_nonzero_one():
    zero = (None, _e(0.0))
    contradicted = (_m(NO_CHANGE, 0.001, -0.002, 0.004), _e(4.1))
    tiny = (None, _e(0.001))
    assert _order(zero, contradicted, tiny) == [2, 1, 0]


def test_not_measurable_keeps_the_expected_figure():
    assert rank_key(_m(NOT_MEASURABLE, 0.0), _e(0.2)) == (1, -0.2)


def _session(tmp_path: Path) -> ProfileSession:
    script = str(tmp_path / "train.py")
    return ProfileSession(
        meta={"cwd": str(tmp_path), "script": script},
        hotspots=[Hotspot("sampler", script, 30, "line", "setup", None, 0.1, 0.1, 0)],
        torch_window={
            "lines_seen": [[script, 10, 5], [script, 11, 5], [script, 20, 1]],
            "window_steps": 5,
            "eval_lines_seen": [[script, 25]],
        },
    )


def _at(tmp_path: Path, code: str, line: int, related: tuple = ()) -> Finding:
    return Finding(code, "x", "m", Location(str(tmp_path / "train.py"), line, 1), related=related)


def test_where_a_findings_code_runs(tmp_path):
    s = _session(tmp_path)
    assert where_it_runs(s, _at(tmp_path, "TL303", 10)) == (True, "")
    inside, why = where_it_runs(s, _at(tmp_path, "TL301", 20))  # once in five steps: an evaluation between them
    assert inside is False and "1 of the 5" in why
    assert where_it_runs(s, _at(tmp_path, "TL301", 25)) == (False, "it runs in the evaluation pass")
    assert where_it_runs(s, _at(tmp_path, "TL203", 30))[0] is False  # the run ran it, no window did
    assert where_it_runs(s, _at(tmp_path, "TL203", 40)) == (None, "")  # nothing says
    assert where_it_runs(s, _at(tmp_path, "TL401", 3)) == (None, "")  # a definition: its effect is elsewhere
    # a loader is judged by the loops it feeds: the validation loader's for line ran only in evaluation
    val = _at(tmp_path, "TL201", 2, related=(Location(str(tmp_path / "train.py"), 25, 1),))
    assert where_it_runs(s, val)[0] is False


def test_the_interval_is_printed_in_one_unit_with_signs():
    assert fmt_interval(-0.098510, 0.0366) == "[-98.5, +36.6] ms"  # was "-98510 µs–36.6 ms"
    assert fmt_interval(-2.7, 2.0) == "[-2.70, +2.00] s"
    m = _m(NO_CHANGE, -0.004, -0.098510, 0.0366).to_dict()
    assert "95% CI [-98.5, +36.6] ms/step" in profile_text.measured_line(m)
    assert "inconclusive" in profile_text.measured_line(m, inconclusive=True)


def _finding(code: str, line: int, observed: bool, not_applicable: str | None) -> dict:
    return {"code": code, "name": "n", "message": "m", "path": "t.py", "line": line, "column": 1, "rank": None,
            "observed": {"seconds": 0.01} if observed else None, "cost_s": 0.01 if observed else 0.0,
            "expected": {"model": "", "not_applicable": not_applicable} if not_applicable else None}


def test_one_rules_unranked_findings_are_not_split_by_a_sampler_hit():
    # two TL401 on a CPU: the sampler happened to catch one constructor line, not the other
    findings = [_finding("TL401", 5, True, "effect only on a GPU"), _finding("TL401", 9, False, "effect only on a GPU"),
                _finding("TL304", 20, True, None), _finding("TL304", 30, False, None)]
    observed, not_here, static_only = profile_text.unranked_sections(findings)
    assert [f["line"] for f in not_here] == [5, 9]
    assert [f["line"] for f in observed] == [20] and [f["line"] for f in static_only] == [30]


def test_the_report_says_what_the_experiment_saw_and_why_it_skipped():
    data = {
        "budget_s": 40.0, "spent_s": 39.0, "load": {"at_start": 0.5, "at_end": 3.1},
        "windowing": {"mode": "steps", "max_steps": 14, "warmup": 2},
        "variants": [_m(NO_CHANGE, 0.0, -0.001, 0.001).to_dict()],
        "skipped": [
            {"code": "TL301", "path": "/w/t.py", "line": 45, "variant": "no_grad", "not_measurable": True,
             "reason": "not measurable by this experiment: it runs in the evaluation pass, ..."},
            {"code": "TL201", "path": "/w/t.py", "line": 30, "variant": "num_workers=4",
             "reason": "budget: needs about 12 s more, 3 s left"},
        ],
    }
    exp = _experiment(data, "/w")
    text = "\n".join(profile_text.experiment_section(exp))
    assert "14-step windows" in text and "evaluation passes" in text
    assert "not measurable TL301 at t.py:45: not measurable by this experiment" in text
    assert "skipped        TL201 at t.py:30 (num_workers=4): budget: needs about 12 s more" in text
    assert "load average 0.5 at the start, 3.1 at the end" in text


def test_experiment_json_is_listed_and_its_account_reported(both, tmp_path):
    from torchlint.cli.profile import report_run

    run_dir = tmp_path / "run"
    shutil.copytree(both.run.run_dir, run_dir)
    (run_dir / "experiment.json").write_text(json.dumps({
        "measurements": [], "variants": [], "budget_s": 20.0, "spent_s": 1.0,
        "skipped": [{"code": "TL201", "path": str(both.run.cwd / "tiny_transformer.py"), "line": 93,
                     "variant": "num_workers=4", "reason": "budget: needs about 12 s more, 3 s left"}],
        "windowing": {"mode": "run", "max_steps": None, "warmup": 0}}))
    report, text = report_run(run_dir)
    assert report["artifacts"]["experiment"] == "experiment.json"
    listing = text[text.index("Run directory:"):]
    assert "experiment.json" in listing
    assert "budget: needs about 12 s more" in text
    html = (run_dir / "report.html").read_text()
    assert "What the experiment could see" in html and 'href="experiment.json"' in html


@ahead()
def option_run(tmp_path_factory):
    """A script given torchlint's --no-browser after its name (argparse rejects it). The near
    miss, the option after the script in a run that succeeds and so no hint, is
    test_profile_run.test_script_arguments_are_passed_through's."""
    cwd = tmp_path_factory.mktemp("options")
    (cwd / "train.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    return profile(cwd, "--out", "run", "train.py", "--no-browser", timeout=120)


def test_torchlints_options_after_the_script_get_a_hint_when_the_run_fails(option_run):
    run = option_run
    assert run.rc == 2  # argparse rejected the option the script was given
    assert "--no-browser came after the script" in run.stdout
    assert "torchlint profile --no-browser train.py" in run.stdout
