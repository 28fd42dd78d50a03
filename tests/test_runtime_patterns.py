"""Runtime patterns TLR05-TLR08 (and TLR01's wording): one real profiled run of
fixtures/scripts/runtime_patterns.py, whose triggering lines sit next to near misses
that must stay quiet; the decisions that need a GPU on recorded sessions; and the
child's recorders on real tensors, in process."""

from __future__ import annotations

import json
import pstats
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import torchlint
from conftest import ahead, child_env
from torchlint.correlate import correlate
from torchlint.estimate import analyse
from torchlint.experiment.plan import candidates_for
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.report import profile_json, profile_text

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "runtime_patterns.py"
STEPS = 6


def _line(needle: str) -> int:
    return next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1) if needle in t)


@ahead()
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("torch")
    cwd = tmp_path_factory.mktemp("patterns")
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", "run",
         "--wait", "0", "--warmup", "1", "--active", "2", SCRIPT.name, "--steps", str(STEPS)],
        cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    data["_run_dir"] = str(cwd / "run")
    return data


def _runtime(report: dict, code: str) -> list[dict]:
    return [f for f in report["runtime_findings"] if f["code"] == code]


# -- the profiled run ------------------------------------------------------------


def test_single_tensor_optimizer_at_its_constructor_line(report):
    (f,) = _runtime(report, "TLR05")  # the foreach=True optimizer stays quiet
    # The fix (foreach=True) goes on the constructor: the finding is there, its step() related.
    assert f["line"] == _line("loop_opt = torch.optim.Adam(")
    assert [r["line"] for r in f["related"]] == [_line("loop_opt.step()")]
    assert "Adam.step() ran the per-parameter for-loop" in f["message"] and "26 parameter tensors" in f["message"]
    assert "CPU" in f["message"]
    (ev,) = f["evidence"]
    assert ev["op"] == "Adam.step" and ev["kind"] == "for-loop" and ev["calls"] == STEPS
    assert ev["total_s"] > 0 and f["cost_s"] == pytest.approx(ev["total_s"])
    assert f["expected"]["total"] == pytest.approx(0.5 * ev["total_s"])  # the CPU model: half of step()


def test_bf16_misaligned_matmuls_at_the_user_line_with_shapes(report):
    (f,) = _runtime(report, "TLR07")  # the aligned bf16 model and the fp32 call stay quiet
    assert f["line"] == _line("y = odd(x)")
    assert "M=12* N=30* K=30*" in f["message"] and "effect only on a GPU" in f["message"]
    shapes = {(e["op"], e["kind"]): e["calls"] for e in f["evidence"]}
    assert shapes == {("linear bfloat16", "M=12* N=30* K=30*"): 12 * STEPS, ("linear bfloat16", "M=12* N=10* K=30*"): STEPS}
    assert f["expected"]["not_applicable"] == "effect only on GPU tensor cores"
    assert f["rank"] is None


def test_profile_prof_shows_the_wrapped_matmuls_not_the_wrappers(report):
    stats = pstats.Stats(str(Path(report["_run_dir"]) / "profile.prof")).stats
    package = str(Path(torchlint.__file__).resolve().parent)  # (not any path naming "torchlint": a clone's own folder does)
    assert not [k for k in stats if str(Path(k[0]).resolve()).startswith(package)], "the pattern probes are taken out of profile.prof"
    (linear,) = [v for k, v in stats.items() if "_nn.linear" in str(k[2])]
    assert linear[1] == (2 * 13 + 2) * STEPS  # the odd model twice (bf16, fp32) and the aligned one, per step
    assert {c[2] for c in linear[4]} == {"forward"}  # Linear.forward calls it, as without torchlint


def test_patterns_this_cpu_cannot_show_are_skipped_with_reasons(report):
    skipped = {s["code"]: s["reason"] for s in report["runtime_skipped"]}
    assert set(skipped) == {"TLR06", "TLR08"}
    assert "no CUDA device" in skipped["TLR06"] and "no CUDA device" in skipped["TLR08"]
    assert {f["code"] for f in report["runtime_findings"]} <= {"TLR01", "TLR05", "TLR07"}


# -- decisions on recorded sessions (a GPU, or shapes this run cannot make) ------


def _session(tmp_path: Path, patterns: dict, **kw) -> ProfileSession:
    script = tmp_path / "train.py"
    script.write_text("\n".join(f"x{i} = {i}" for i in range(60)) + "\n")
    meta = {"cwd": str(tmp_path), "script": str(script), "script_wall_s": 10.0, "patterns": patterns, **kw.pop("meta", {})}
    return ProfileSession(meta=meta, steps={"count": 10}, **kw)


def _optimizer(tmp_path: Path, **kw) -> dict:
    record = {"class": "Adam", "has_foreach": True, "has_fused": True, "impl": "for-loop", "forced": False,
              "tensors": 200, "elements": 200 * 1024, "devices": ["cpu"], "path": str(tmp_path / "train.py"),
              "line": 40, "function": "main", "steps": 10, "step_s": 0.5}
    return {**record, **kw}


def test_single_tensor_decision_cpu_small_gpu_forced_and_large(tmp_path):
    s = _session(tmp_path, {"optimizers": [_optimizer(tmp_path)]})
    (c,) = correlate([], s).runtime
    assert (c.finding.code, c.finding.line, c.observed_s) == ("TLR05", 40, 0.5)
    forced = _session(tmp_path, {"optimizers": [_optimizer(tmp_path, forced=True, devices=["cuda"])]}, meta={"cuda": True})
    (c,) = analyse([], forced).runtime
    assert "foreach=False" in c.finding.message and "GPU" in c.finding.message
    assert c.hint is None and c.finding.fix_hint.startswith("Drop foreach=False")
    assert c.expected is not None and c.expected.total == pytest.approx(0.5)  # on a GPU: the whole step() bound
    large = _session(tmp_path, {"optimizers": [_optimizer(tmp_path, tensors=4, elements=4 * 4_000_000)]})
    result = correlate([], large)
    assert result.runtime == [] and "foreach saved nothing consistent" in result.runtime_skipped["TLR05"]
    quiet = _session(tmp_path, {"optimizers": [_optimizer(tmp_path, impl="foreach"), _optimizer(tmp_path, has_foreach=False)]})
    assert correlate([], quiet).runtime == [] and "TLR05" not in correlate([], quiet).runtime_skipped


def _matmul(tmp_path: Path, line: int, dtype: str, mnk: list[int], device: str = "cuda", tf32=False, calls: int = 10) -> dict:
    return {"path": str(tmp_path / "train.py"), "line": line, "function": "main", "op": "mm", "dtype": dtype,
            "device": device, "mnk": mnk, "allow_tf32": tf32, "calls": calls, "total_s": 0.01}


AMPERE = {"cuda": True, "capability": "8.0", "ampere_or_newer": True, "allow_tf32": False, "float32_matmul_precision": "highest"}


def test_tf32_decision_needs_ampere_and_tf32_off(tmp_path):
    records = [_matmul(tmp_path, 12, "float32", [128, 128, 64]), _matmul(tmp_path, 12, "float32", [64, 64, 64], calls=3)]
    (c,) = correlate([], _session(tmp_path, {"matmuls": records, "tf32": AMPERE})).runtime
    assert (c.finding.code, c.finding.line, c.calls) == ("TLR08", 12, 13)
    assert "compute capability 8.0" in c.finding.message and "M=128 N=128 K=64" in c.finding.message
    on = {**AMPERE, "allow_tf32": True}
    assert correlate([], _session(tmp_path, {"matmuls": records, "tf32": on})).runtime == []
    high = {**AMPERE, "float32_matmul_precision": "high"}
    assert correlate([], _session(tmp_path, {"matmuls": records, "tf32": high})).runtime == []
    turing = correlate([], _session(tmp_path, {"matmuls": records, "tf32": {**AMPERE, "capability": "7.5", "ampere_or_newer": False}}))
    assert turing.runtime == [] and "7.5" in turing.runtime_skipped["TLR08"]
    cpu = correlate([], _session(tmp_path, {"matmuls": [], "tf32": {"cuda": False}}))
    assert "no CUDA device" in cpu.runtime_skipped["TLR08"]


def test_fill_then_move_decision_reports_the_creation_line(tmp_path):
    moves = [{"path": str(tmp_path / "train.py"), "line": 7, "function": "main", "made_by": "torch.zeros",
              "kind": "HtoD pageable", "calls": 10, "bytes": 4_000_000},
             {"path": str(tmp_path / "train.py"), "line": 7, "function": "main", "made_by": "Tensor.fill_",
              "kind": "HtoD pageable", "calls": 2, "bytes": 800_000}]
    s = _session(tmp_path, {"fill_moves": moves, "fill_watch": "on"}, meta={"cuda": True})
    (c,) = analyse([], s).runtime
    assert (c.finding.code, c.finding.line, c.calls) == ("TLR06", 7, 12)
    assert "4.80 MB" in c.finding.message and "Tensor.fill_, torch.zeros" in c.finding.message
    skipped = correlate([], _session(tmp_path, {"fill_moves": [], "fill_watch": "no CUDA device: nothing to move to"}))
    assert skipped.runtime == [] and skipped.runtime_skipped["TLR06"] == "no CUDA device: nothing to move to"


def test_aligned_low_precision_records_stay_quiet(tmp_path):
    s = _session(tmp_path, {"matmuls": [_matmul(tmp_path, 5, "bfloat16", [16, 64, 64], device="cpu")]})
    assert correlate([], s).runtime == []


def test_tlr01_says_the_loader_runs_in_the_main_process(tmp_path):
    script = str(tmp_path / "train.py")
    hs = [Hotspot("probe", script, 11, "line", "main", "DataLoader.__next__", 3.0, 3.0, 10)]
    loaders = [{"path": script, "line": 11, "num_workers": 0, "pin_memory": False}]
    s = _session(tmp_path, {}, hotspots=hs, dataloader={"wait_share": 0.4, "fetch_s": 3.0, "loaders": loaders})
    (r,) = correlate([], s).runtime
    assert "num_workers=0" in r.finding.message and "main process while the step waits" in r.finding.message


def test_reports_carry_skipped_patterns_and_the_experiment_can_switch_them(tmp_path):
    s = _session(tmp_path, {"optimizers": [_optimizer(tmp_path)], "tf32": {"cuda": False}, "fill_watch": "no CUDA device"})
    result = analyse([], s)
    data = profile_json.build(result, s, run_dir=str(tmp_path), static={}, artifacts={}, snakeviz={})
    assert {x["code"] for x in data["runtime_skipped"]} == {"TLR06", "TLR08"}
    assert "TLR08 not shown here: no CUDA device" in profile_text.render(data)
    (tlr05,) = result.runtime
    finding = tlr05.finding.__class__(**{**{f: getattr(tlr05.finding, f) for f in tlr05.finding.__dataclass_fields__}})
    (cand,) = candidates_for(finding, cuda=False, cores=2)
    assert cand.kind == "runtime" and cand.switches[0]["target"] == "foreach"
    (tf32,) = candidates_for(finding.__class__(**{**{f: getattr(finding, f) for f in finding.__dataclass_fields__}, "code": "TLR08"}), cuda=True, cores=2)
    assert tf32.switches == [{"target": "tf32"}]


# -- the child's recorders, on real tensors --------------------------------------


def test_optimizer_impl_follows_torch_rules():
    torch = pytest.importorskip("torch")
    from torchlint.profiler.patterns import optimizer_impl

    params = [torch.nn.Parameter(torch.ones(3)) for _ in range(3)]
    assert optimizer_impl(torch.optim.Adam(params)) == ("for-loop", False)  # CPU params: torch's default
    assert optimizer_impl(torch.optim.Adam(params, foreach=False)) == ("for-loop", True)
    assert optimizer_impl(torch.optim.Adam(params, foreach=True)) == ("foreach", False)
    assert optimizer_impl(torch.optim.SGD(params, lr=0.1, foreach=True)) == ("foreach", False)


def test_matmul_dims_per_op():
    torch = pytest.importorskip("torch")
    from torchlint.profiler.patterns import matmul_dims

    x, w = torch.ones(4, 5, 30), torch.ones(10, 30)
    assert matmul_dims("linear", (x, w)) == (20, 10, 30)
    assert matmul_dims("mm", (torch.ones(3, 5), torch.ones(5, 7))) == (3, 7, 5)
    assert matmul_dims("bmm", (torch.ones(2, 3, 5), torch.ones(2, 5, 7))) == (3, 7, 5)
    assert matmul_dims("addmm", (torch.ones(7), torch.ones(3, 5), torch.ones(5, 7))) == (3, 7, 5)
    assert matmul_dims("matmul", (torch.ones(5), torch.ones(5, 7))) is None  # a vector product


def test_fill_watch_charges_a_move_to_the_creation_line_while_the_tensor_lives(monkeypatch):
    torch = pytest.importorskip("torch")
    from torchlint.profiler import fillwatch, patterns

    monkeypatch.setattr(patterns, "PATTERNS", patterns.Patterns())
    t = torch.zeros(1000)
    fillwatch.note_created(t, ("train.py", 7, "main"), "torch.zeros")
    fillwatch.note_moved(t, "HtoD pageable")
    fillwatch.note_moved(t, None)  # nothing moved
    fillwatch.note_moved(torch.ones(3), "HtoD pageable")  # not made at a watched line
    assert patterns.PATTERNS.moves == {("train.py", 7, "main", "torch.zeros", "HtoD pageable"): [1, 4000]}
    del t
    assert len(patterns.PATTERNS.created) == 0  # weakly held: the map never keeps a tensor alive


def test_factory_wrapper_records_the_callers_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from torchlint.profiler import fillwatch, patterns

    monkeypatch.setattr(patterns, "PATTERNS", patterns.Patterns())
    rec = type("Rec", (), {"busy": False})()
    here = threading.get_ident()
    zeros = fillwatch._wrap_creator(torch.zeros, "torch.zeros", lambda frame: ("train.py", frame.f_lineno, "f"), here, rec)
    assert zeros.__code__.co_name == "<torchlint probe torch.zeros>"  # cprof.user_view shows torch.zeros instead
    t = zeros(4)
    line = sys._getframe().f_lineno - 1
    assert [origin for _ref, origin in patterns.PATTERNS.created.values()] == [("train.py", line, "f", "torch.zeros")]
    rec.busy = True  # torchlint's own work is not the user's
    zeros(4)
    assert len(patterns.PATTERNS.created) == 1 and t.shape == (4,)
