"""TLR09 host-allocator-churn: two real profiled runs of fixtures/scripts/allocator_churn.py
(a fresh 48 MiB scratch tensor every step, and the near miss that reuses one), the
decision on recorded sessions, the child's fault counter on real memory, and the
experiment's malloc switch in a fresh interpreter."""

from __future__ import annotations

import json
import mmap
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ahead, child_env
from torchlint.correlate import correlate
from torchlint.correlate.allocator import CHURN_SHARE_THRESHOLD, churn_reason, refaulted
from torchlint.estimate import analyse
from torchlint.experiment.plan import candidates_for
from torchlint.findings import Finding, Location
from torchlint.profiler import allocator
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.report import profile_json, profile_text

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "allocator_churn.py"
SCRATCH_PAGES = 48 * 1024 * 1024 // mmap.PAGESIZE
STEPS = 8
GLIBC = allocator.allocator() == "glibc"


def _profile(cwd: Path, out: str, *args: str, profile_imports: bool) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", out,
         SCRIPT.name, "--steps", str(STEPS), *args],
        cwd=cwd, env={**child_env(profile_imports), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@ahead(alone=True)  # TLR09 weighs page faults against the script's time
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    pytest.importorskip("torch")
    if not GLIBC:
        pytest.skip("TLR09 reads glibc's malloc")
    cwd = tmp_path_factory.mktemp("churn")
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    # name -> (the script's options, whether the imports made ahead are profiled and grafted).
    # The quiet runs keep the user's default, the graft on: its faults are what could make
    # them look like churn. The churn run opts out (~3 s of CPU on the suite's serial path):
    # whatever faults the graft could add would only add to the churn that run must find.
    runs = {"fresh": ((), False), "reuse": (("--reuse",), True), "workers": (("--reuse", "--workers", "1"), True)}
    # One after another: TLR09 weighs page faults against the script's time, and three runs
    # sharing two cores made the reuse run's faults look like churn (a failed full-suite run).
    return {name: _profile(cwd, name, *args, profile_imports=graft) for name, (args, graft) in runs.items()}


def _tlr09(report: dict) -> list[dict]:
    return [f for f in report["runtime_findings"] if f["code"] == "TLR09"]


# -- the profiled runs -------------------------------------------------------------


def test_a_fresh_scratch_tensor_per_step_is_churn_ranked_by_its_expected_saving(runs):
    report = runs["fresh"]
    (f,) = _tlr09(report)
    pages = int(f["message"].split(": ")[1].split(" pages")[0].replace(",", ""))
    # steps 3..8 allocate the scratch 6 times after the snapshot; at least 5 re-fault it
    assert 5 * SCRATCH_PAGES * 0.95 <= pages <= 7 * SCRATCH_PAGES
    assert f["rank"] == 1 and f["observed"] is None  # a process figure, never "time at lines"
    expected = f["expected"]
    assert expected["total"] > 0 and "kernel's work per page" in expected["model"]
    assert expected["bound"] is False  # an estimate, labelled as one
    assert f["fix_hint"].startswith("Keep freed memory in the process") and "MALLOC_MMAP_THRESHOLD_" in f["fix_hint"]
    text = profile_text.render(report)
    ranked = text.split("Findings ranked by what fixing them saves")[1].split("Runtime findings")[0]
    assert "TLR09 host-allocator-churn" in ranked and "expected saving ≈ " in ranked
    assert "TLR09 host-allocator-churn (ranked above)" in text.split("Runtime findings")[1]


def test_a_reused_scratch_buffer_stays_quiet(runs):
    report = runs["reuse"]
    assert _tlr09(report) == []
    assert "TLR09" not in {s["code"] for s in report["runtime_skipped"]}  # under the bar: nothing to say
    # The steady state takes next to no faults (plain `python` 0-1, profiled 10-20 here). The
    # count ends where the script does: when it ran on through torchlint writing profile.prof,
    # it was ~215 pages, and ~1,800 with the imports grafted into it (the default).
    record = ProfileSession.load(Path(report["artifacts"]["run_dir"]) / "session.json").meta["allocator"]
    assert record["faults"] < SCRATCH_PAGES // 100, record


def test_batches_from_worker_processes_are_not_churn(runs, tmp_path):
    report = runs["workers"]
    assert _tlr09(report) == []
    # the worker batches were seen and left out: without that, their faults would count
    record = ProfileSession.load(Path(report["artifacts"]["run_dir"]) / "session.json").meta["allocator"]
    assert record["worker_batch_bytes"] >= 5 * 8 * 1024 * 1024
    assert record["faults"] > refaulted(record)


# -- the decision on recorded sessions ------------------------------------------------


def _session(tmp_path: Path, record: dict, script_s: float = 2.0, **kw) -> ProfileSession:
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    meta = {"cwd": str(tmp_path), "script": str(script), "script_wall_s": script_s, "script_s": script_s,
            "allocator": record, **kw.pop("meta", {})}
    return ProfileSession(meta=meta, steps={"count": 10}, **kw)


def _record(**kw) -> dict:
    # 60,000 faults, of which 10,000 pages are new peak memory: 50,000 re-faults at 4 µs = 200 ms
    return {"allocator": "glibc", "options": [], "faults": 60_000, "peak_growth_bytes": 10_000 * 4096,
            "page_bytes": 4096, "fault_cost_s": 4e-6, **kw}


def test_refaults_are_faults_beyond_the_growth_of_the_peak_and_the_worker_batches():
    assert refaulted(_record()) == 50_000
    assert refaulted(_record(peak_growth_bytes=10**9)) == 0  # all new memory (a retained graph): no churn
    assert refaulted(_record(worker_batch_bytes=20_000 * 4096)) == 30_000  # shared memory from workers


def test_decision_fires_over_the_bar_with_its_figures(tmp_path):
    s = _session(tmp_path, _record())
    (c,) = analyse([], s).runtime
    assert (c.finding.code, c.finding.line, c.calls) == ("TLR09", 1, 50_000)
    assert "50,000 pages (0.19 GiB)" in c.finding.message and "4.00 µs a page" in c.finding.message
    assert c.expected is not None and c.expected.total == pytest.approx(0.2) and c.expected.per_step == pytest.approx(0.02)
    assert c.expected.bound is False and "not a bound" in c.expected.model
    assert c.rank == 1


def test_decision_quiet_under_the_bar_and_says_why_it_could_not_look(tmp_path):
    under = _record(faults=int(CHURN_SHARE_THRESHOLD * 2.0 / 4e-6) - 1, peak_growth_bytes=0)
    assert correlate([], _session(tmp_path, under)).runtime == []
    assert "TLR09" not in correlate([], _session(tmp_path, under)).runtime_skipped
    jemalloc = correlate([], _session(tmp_path, _record(allocator="jemalloc")))
    assert jemalloc.runtime == [] and "jemalloc, not glibc" in jemalloc.runtime_skipped["TLR09"]
    chosen = correlate([], _session(tmp_path, _record(options=["MALLOC_TRIM_THRESHOLD_"])))
    assert chosen.runtime == [] and "MALLOC_TRIM_THRESHOLD_" in chosen.runtime_skipped["TLR09"]
    short = correlate([], _session(tmp_path, {"skipped": "the run took fewer than 3 optimizer steps"}))
    assert short.runtime == [] and "fewer than 3" in short.runtime_skipped["TLR09"]
    assert churn_reason({}, 2.0) == "not measured in this run"


def test_a_measured_runtime_saving_ranks_with_the_static_findings_but_symptoms_do_not(tmp_path):
    script = str(tmp_path / "train.py")
    hs = [Hotspot("probe", script, 1, "line", "main", "DataLoader.__next__", 0.8, 0.8, 10)]
    loaders = [{"path": script, "line": 1, "num_workers": 0}]
    s = _session(tmp_path, _record(), hotspots=hs, dataloader={"wait_share": 0.4, "fetch_s": 0.8, "loaders": loaders})
    tl201 = Finding(code="TL201", name="dataloader-no-workers", message="no workers",
                    location=Location("train.py", 1, 1), related=(Location("train.py", 1, 1),))
    result = analyse([tl201], s)
    by_code = {c.finding.code: c for c in (*result.runtime, *result.findings)}
    assert by_code["TLR09"].rank is not None and by_code["TL201"].rank is not None
    assert by_code["TLR01"].expected is not None and by_code["TLR01"].rank is None  # TL201's remedy: ranked there
    data = profile_json.build(result, s, run_dir=str(tmp_path), static={}, artifacts={}, snakeviz={})
    assert sorted(f["code"] for f in profile_json.ranked_findings(data)) == ["TL201", "TLR09"]
    # no TL201 at its loader (one TL201 leaves alone): the wait's remedy is ranked nowhere else, so TLR01 is
    alone = {c.finding.code: c for c in analyse([], s).runtime}
    assert alone["TLR01"].rank is not None and alone["TLR01"].expected.total is not None


def test_the_experiment_switches_the_malloc_thresholds():
    finding = Finding(code="TLR09", name="host-allocator-churn", message="m", location=Location("/abs/train.py", 1, 1))
    (cand,) = candidates_for(finding, cuda=False, cores=2)
    assert cand.kind == "runtime" and cand.switches == [{"target": "malloc"}]


# -- the child's counter and switch, on real memory -----------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults are read on Linux only")
def test_fault_watch_counts_churn_after_the_third_step_but_not_torchlints_own():
    watch = allocator.FaultWatch()
    size = 8 << 20

    def churn(times: int) -> None:
        for _ in range(times):
            buf = mmap.mmap(-1, size)
            buf.write(b"\1" * size)  # touches every page
            buf.close()

    churn(3)  # before the steady state: not counted
    for step in (1, 2, 3):
        watch.on_step(step)
    churn(10)
    watch.tool_begin()
    churn(10)  # torchlint's own work in the hook
    watch.tool_end()
    summary = watch.summary()
    pages = 10 * size // mmap.PAGESIZE
    assert pages * 0.95 <= summary["faults"] <= pages * 1.5
    assert summary["fault_cost_s"] > 0 and summary["page_bytes"] == mmap.PAGESIZE
    assert allocator.FaultWatch().summary()["skipped"].startswith("the run took fewer than 3")


def test_malloc_options_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=4096")
    assert allocator.glibc_options() == ["MALLOC_TRIM_THRESHOLD_", "glibc.malloc.mmap_threshold"]


_CHURN_CHILD = """
import resource, sys
from torchlint.profiler.switches import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory() == 1
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = bytearray(40 << 20)  # over glibc's 32 MiB adaptive ceiling: mmapped by default
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not GLIBC, reason="the switch calls glibc's mallopt")
def test_the_malloc_switch_keeps_freed_memory_in_a_fresh_interpreter():
    def faults(mode: str) -> int:
        proc = subprocess.run([sys.executable, "-c", _CHURN_CHILD, mode], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout)

    pages = (40 << 20) // mmap.PAGESIZE
    default, kept = faults("default"), faults("keep")
    assert default >= 15 * pages  # every block faulted in again
    assert kept <= 3 * pages  # the first block's pages, then reused
