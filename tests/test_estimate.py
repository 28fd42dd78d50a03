"""Expected savings (torchlint.estimate) and the three labelled figures in the reports.

Pure: synthetic sessions over a small script, no torch. Each model is checked
against numbers worked out by hand from its documented formula.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from torchlint.estimate import AUTOGRAD_SHARE, analyse
from torchlint.estimate.syncs import SYNC_GAP_ESTIMATE_S
from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession, load_measurements
from torchlint.report import profile_json, profile_text
from torchlint.savings import BYTES, NO_CHANGE, SAVING, SKIPPED, SLOWER, Measurement

SOURCE = textwrap.dedent(
    """\
    import torch
    loader = DataLoader(ds, batch_size=32)
    model = Net()
    for x, y in loader:
        a, b = torch.tensor(x), torch.tensor(y)
        loss = model(a).sum()
        loss.backward()
        opt.step()
        print(loss.item())
        total = total + loss
    model.eval()
    out = model(x)
    """
)
COVERAGE = {
    "cprofile": {"span": "script"},
    "sampler": {"span": "script", "interval_s": 0.005, "samples": 100},
    "probes": {"span": "script", "ops": []},
    "torch_profiler": {"ran": False, "not_run_reason": "disabled"},
}


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    return str(path)


def hot(source, path, line, op=None, *, calls=0, total=0.0, kind=None, column=None, end_column=None):
    return Hotspot(source=source, path=path, line=line, granularity="line", function="<module>", op=op,
                   self_s=total, total_s=total, calls=calls, kind=kind, column=column, end_column=end_column)


def session(path: str, hotspots, *, cpus=2, device="cpu", n_steps=100, median=0.05, **extra) -> ProfileSession:
    cwd = str(Path(path).parent)
    meta = {"cwd": cwd, "script": path, "script_wall_s": 10.0, "device": device, "cuda": device != "cpu",
            "cpus": cpus, **extra.pop("meta", {})}
    return ProfileSession(meta=meta, coverage=COVERAGE, hotspots=list(hotspots),
                          steps={"count": n_steps, "median_s": median, **extra.pop("steps", {})}, **extra)


def f(code, line, col=1, end_col=None, related=()):
    return Finding(code=code, name=code.lower(), message=f"{code} here",
                   location=Location("train.py", line, col, end_line=line, end_column=end_col),
                   related=tuple(related))


FETCH = dict(calls=100, total=4.0)  # 40 ms a batch; median step 50 ms: 10 ms of compute


def tl201():
    return f("TL201", 2, related=[Location("train.py", 4, 1)])


@pytest.mark.parametrize(
    ("cpus", "cpu_s", "per_step"),
    [
        # max(compute, fetch_cpu / min(4, spare), fetch / 4) with compute 10 ms, fetch 40 ms
        (8, 4.0, 0.040),   # all CPU, 7 spare cores: max(10, 10, 10) -> 50 - 10
        (2, 4.0, 0.010),   # all CPU, one spare core: max(10, 40, 10) -> 50 - 40
        (2, 0.0, 0.040),   # all waiting (I/O): no core needed, max(10, 0, 10)
        (1, 4.0, 0.0),     # no spare core: max(10 + 40, 10) -> nothing to gain
    ],
)
def test_workers_model_caps_the_overlap_by_usable_cores(script, cpus, cpu_s, per_step):
    s = session(script, [hot("probe", script, 4, "DataLoader.__next__", **FETCH)], cpus=cpus,
                dataloader={"fetch_s": 4.0, "fetch_cpu_s": cpu_s})
    (c,) = analyse([tl201()], s).findings
    assert c.observed_s == pytest.approx(4.0)
    assert c.expected.per_step == pytest.approx(per_step)
    assert c.expected.total == pytest.approx(per_step * 100)
    assert "worker" in c.expected.model


def test_syncs_on_the_cpu_are_counted_and_their_gpu_cost_estimated_and_on_cuda_min_host_device(script):
    item = hot("probe", script, 9, "Tensor.item", calls=100, total=2.0)  # 20 ms a step waited
    (c,) = analyse([f("TL101", 9)], session(script, [item])).findings
    assert c.observed_s == pytest.approx(2.0)
    # the CPU run counts the reads exactly (100 calls over 100 steps); their cost is an estimate, said so
    assert c.reads_per_step == pytest.approx(1.0)
    assert c.expected.per_step == pytest.approx(SYNC_GAP_ESTIMATE_S) and c.expected.total == pytest.approx(100 * SYNC_GAP_ESTIMATE_S)
    assert c.expected.bound is False and "counted exactly" in c.expected.model and "estimate" in c.expected.model
    # three reads a step: three times the cost, ranked above the one read a step
    three = hot("probe", script, 6, "Tensor.item", calls=300, total=0.3)
    result = analyse([f("TL101", 9), f("TL101", 6)], session(script, [item, three]))
    assert [(c.finding.line, c.reads_per_step) for c in result.ranked] == [(6, 3.0), (9, 1.0)]
    # no optimizer step to count the reads over: nothing to estimate
    (c,) = analyse([f("TL101", 9)], session(script, [item], n_steps=0)).findings
    assert c.reads_per_step is None and c.expected.total == 0.0 and "no device to wait for" in c.expected.model
    # CUDA: step 50 ms, 20 ms of it waiting -> host 30 ms; device busy 40 % of a 0.5 s window of 5 steps
    cuda = session(script, [item], device="cuda (test)",
                   torch_window={"gpu_idle_share": 0.6, "window_s": 0.5, "active_steps": 5})
    (c,) = analyse([f("TL101", 9)], cuda).findings
    assert c.expected.per_step == pytest.approx(min(0.020, 0.030, 0.040))
    assert c.expected.total == pytest.approx(2.0)
    assert "min(host, device)" in c.expected.model


def test_tensor_copy_model_and_two_calls_on_one_line_share_by_column(script):
    # line 5: `    a, b = torch.tensor(x), torch.tensor(y)` (1-based columns 12-27 and 29-44)
    hs = [hot("probe", script, 5, "torch.tensor", calls=100, total=0.3, column=12, end_column=27),
          hot("probe", script, 5, "torch.tensor", calls=100, total=0.1, column=29, end_column=44)]
    first, second = f("TL203", 5, 12, 27), f("TL203", 5, 29, 44)
    result = analyse([first, second], session(script, hs))
    by_col = {c.finding.location.column: c for c in result.findings}
    assert by_col[12].calls == 100 and by_col[12].observed_s == pytest.approx(0.3)
    assert by_col[29].calls == 100 and by_col[29].observed_s == pytest.approx(0.1)
    assert by_col[12].expected.total == pytest.approx(0.3 - 100 * 2e-6)
    assert [c.finding.location.column for c in result.ranked] == [12, 29]


def test_gpu_only_rules_are_not_applicable_on_the_cpu_and_never_ranked(script):
    hs = [hot("sampler", script, 3, total=5.0), hot("probe", script, 4, "DataLoader.__next__", **FETCH)]
    fs = [f("TL402", 3), f("TL202", 2, related=[Location("train.py", 4, 1)])]
    result = analyse(fs, session(script, hs))
    assert result.ranked == []
    by_code = {c.finding.code: c for c in result.findings}
    assert by_code["TL402"].expected.not_applicable == "effect only on GPU tensor cores"
    assert by_code["TL402"].observed_s == pytest.approx(5.0)  # observed, shown, but not a saving
    assert "pinned memory only matters" in by_code["TL202"].expected.not_applicable


def test_retained_memory_is_in_bytes_per_step(script):
    hs = [hot("sampler", script, 10, total=0.5)]
    grows = session(script, hs, steps={"memory": {"source": "rss", "growth_per_step": 65536.0}})
    (c,) = analyse([f("TL302", 10)], grows).findings
    assert c.expected.unit == BYTES and c.expected.per_step == 65536.0 and c.expected.total == 65536.0 * 100
    assert c.rank is None  # not time: not ranked against seconds
    (c,) = analyse([f("TL302", 10)], session(script, hs)).findings
    assert c.expected.per_step is None and "nothing was measured" in c.expected.model


def test_eval_without_no_grad_is_bounded_by_the_autograd_share(script):
    hs = [hot("sampler", script, 12, total=2.0)]
    (c,) = analyse([f("TL301", 12)], session(script, hs)).findings
    assert c.expected.total == pytest.approx(AUTOGRAD_SHARE * 2.0)
    assert AUTOGRAD_SHARE <= 0.25  # small on the CPU: issue 8 measured ~0 for this fix


def test_measured_saving_ranks_first_then_expected_and_observed_never_alone(script):
    hs = [hot("probe", script, 4, "DataLoader.__next__", **FETCH),
          hot("probe", script, 9, "Tensor.item", calls=100, total=0.5),
          hot("sampler", script, 12, total=3.0)]
    fs = [tl201(), f("TL101", 9), f("TL301", 12), f("TL204", 12)]
    s = session(script, hs, cpus=8, dataloader={"fetch_s": 4.0, "fetch_cpu_s": 4.0})
    plain = analyse(fs, s)
    assert [c.finding.code for c in plain.ranked] == ["TL201", "TL301", "TL101"]
    tl204 = next(c for c in plain.findings if c.finding.code == "TL204")
    assert tl204.observed and tl204.rank is None  # observed 3 s, no model: unranked
    measured = [
        Measurement("TL101", script, 9, "deferred .item()", SAVING, per_step=0.01, total=1.0),
        Measurement("TL201", script, 2, "num_workers=4", SLOWER, per_step=-0.01, total=-1.0),
        Measurement("TL301", str(Path(script).parent / "x" / ".." / "train.py"), 12, "no_grad", NO_CHANGE),
        Measurement("TL999", script, 1, "elsewhere", SKIPPED, why="not in the report"),
    ]
    result = analyse(fs, s, measured)
    # a saving first; then no measurable change; a variant that was slower last
    assert [c.finding.code for c in result.ranked] == ["TL101", "TL301", "TL201"]
    assert result.ranked[1].measured.verdict == NO_CHANGE  # joined through a `..` path
    assert [m.code for m in result.unmatched] == ["TL999"]


def test_shares_are_of_the_scripts_own_time_not_torchlints_export(script):
    s = session(script, [hot("probe", script, 9, "Tensor.item", calls=10, total=1.0)], meta={"tool_s": 5.0})
    (c,) = analyse([f("TL101", 9)], s).findings
    assert s.script_s == pytest.approx(5.0)
    assert c.share == pytest.approx(0.2)  # 1 s of the script's 5 s, not of 10 s with the trace export


def test_tlr01_agrees_with_a_loader_that_has_workers(script):
    loaders = [{"path": script, "line": 4, "num_workers": 2, "persistent_workers": False}]
    s = session(script, [hot("probe", script, 4, "DataLoader.__next__", **FETCH)], cpus=8,
                dataloader={"wait_share": 0.4, "fetch_s": 4.0, "loaders": loaders})
    (r,) = analyse([], s).runtime
    assert "Give the DataLoader workers" not in r.finding.fix_hint
    assert "2 workers" in r.finding.message and "do not keep up" in r.finding.fix_hint
    assert r.expected.total == pytest.approx(4.0)  # the wait they left is the most more workers hide
    s.dataloader["loaders"][0]["num_workers"] = 0
    (r,) = analyse([], s).runtime
    assert "Give the DataLoader workers" in r.finding.fix_hint


def test_cpu_hints_do_not_speak_of_gpus(script):
    s = session(script, [hot("probe", script, 4, "DataLoader.__next__", **FETCH)])
    (c,) = analyse([Finding("TL201", "dataloader-no-workers", "m", Location("train.py", 2, 1),
                            fix_hint="Pass `num_workers` > 0 (about 4 per GPU to start with)",
                            related=(Location("train.py", 4, 1),))], s).findings
    assert "GPU" not in c.hint and "2 core" in c.hint


def test_reports_label_each_figure(script, tmp_path):
    hs = [hot("probe", script, 9, "Tensor.item", calls=100, total=1.2),
          hot("probe", script, 4, "DataLoader.__next__", **FETCH), hot("sampler", script, 12, total=2.0)]
    (tmp_path / "experiment.json").write_text(json.dumps({"measurements": [
        Measurement("TL101", script, 9, "deferred .item()", SAVING, per_step=0.0021, ci_low=0.0018,
                    ci_high=0.0024, total=0.31, steps=40).to_dict(),
        Measurement("TL201", script, 2, "num_workers=2", SLOWER, per_step=-0.002, total=-0.2).to_dict(),
        Measurement("TL301", script, 12, "no_grad", NO_CHANGE, per_step=0.0, ci_low=-0.001, ci_high=0.001).to_dict(),
    ]}))
    measurements, problem = load_measurements(tmp_path)
    assert problem is None and len(measurements) == 3
    s = session(script, hs)
    result = analyse([tl201(), f("TL101", 9), f("TL301", 12)], s, measurements)
    report = profile_json.build(result, s, run_dir=str(tmp_path), static={"available": True},
                                artifacts={}, snakeviz={"launched": False, "command": None})
    data = json.loads(profile_json.render(report))
    tl101 = next(x for x in data["findings"] if x["code"] == "TL101")
    assert tl101["observed"] == {"seconds": pytest.approx(1.2), "basis": "probe", "share": pytest.approx(0.12), "backward_s": 0}
    assert tl101["expected"]["total"] == pytest.approx(100 * SYNC_GAP_ESTIMATE_S) and tl101["expected"]["bound"] is False
    assert tl101["measured"]["verdict"] == SAVING and tl101["rank"] == 1
    assert tl101["reads_per_step"] == pytest.approx(1.0)
    text = profile_text.render(data)
    assert "host waits: 1 read per step (100 calls of Tensor.item over 100 optimizer steps)" in text
    assert "observed 1.20 s at these lines (probe)" in text
    assert "measured saving 310.0 ms/run, 2.1 ms/step, 95% CI [+1.80, +2.40] ms/step (experiment: deferred .item())" in text
    assert "measured: slower by 200.0 ms/run" in text
    assert "measured: no measurable change" in text
    assert "expected saving ≤ 400.0 ms" in text and "(model: autograd bookkeeping" in text


def test_unreadable_experiment_file_is_a_warning_not_a_traceback(tmp_path):
    (tmp_path / "experiment.json").write_text("{not json")
    measurements, problem = load_measurements(tmp_path)
    assert measurements == [] and "experiment.json" in problem


def test_a_finding_whose_lines_never_ran_stays_static_only(script):
    s = session(script, [hot("probe", script, 9, "Tensor.item", calls=100, total=0.5)])
    result = analyse([tl201(), f("TL203", 5, 12, 27)], s)
    assert result.ranked == [] and [c.expected for c in result.static_only] == [None, None]
