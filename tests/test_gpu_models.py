"""The CUDA saving models of issue 26, on plain data (no GPU, no torch).

- the trace reader finds, for each sync inside a probed call's range, the host's wait
  and the GPU idle gap after it (from its return to the next kernel's start), and the
  device time of the GEMM kernels;
- TL101-TL104/TL112: a sync costs min(wait, gap), not min(host, device) capped by the
  wait (which said 4.3 ms a step where removing the `.item()` saved 0.12 ms on one H200);
  where no trace covers the syncs, the older bound is kept and labelled;
- TLR08 gets an expected saving of its own (the GEMMs' device time at TF32's rate) and
  ranks with the static findings;
- TL202 without workers expects no saving (pinning in the main process is one more copy).

The traces are synthesised as Chrome trace events, the shape torch.profiler exports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchlint.estimate import TF32_SPEEDUP, analyse
from torchlint.findings import Finding, Location
from torchlint.profiler.session import ProfileSession
from torchlint.profiler.tracewindows import WindowSummary

COVERAGE = {"cprofile": {"span": "script"}, "sampler": {"span": "script"}, "probes": {"span": "script", "ops": []},
            "torch_profiler": {"ran": True}}
LABEL = "torchlint train.py:9 Tensor.item"


def cpu(name, ts, dur, tid=1, ext=None, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": {} if ext is None else {"External id": ext}}


def kernel(ts, dur, ext, name="sm90_xmma_gemm_f32f32"):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": {"External id": ext}}


def step_events(t0: float, wait: float, gap: float, gemm: float) -> list[dict]:
    """One step: a GEMM (aten::mm, gemm µs on the GPU), then `.item()`: its sync waits
    ``wait`` µs, returns, and the next kernel starts ``gap`` µs later."""
    ext = int(t0)
    sync_start = t0 + 20
    sync_end = sync_start + wait
    return [
        cpu("aten::mm", t0, 10, ext=ext),
        cpu("cudaLaunchKernel", t0 + 2, 5, ext=ext, cat="cuda_runtime"),
        kernel(t0 + 5, gemm, ext),
        cpu(LABEL, t0 + 15, 10 + wait),
        cpu("aten::item", t0 + 16, 8 + wait),
        cpu("aten::_local_scalar_dense", t0 + 17, 6 + wait),
        cpu("cudaStreamSynchronize", sync_start, wait, cat="cuda_runtime"),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "ts": sync_end - 3, "dur": 2,
         "pid": 0, "tid": 7, "args": {}},
        kernel(sync_end + gap, 5, ext + 1, name="vectorized_elementwise_kernel"),  # the next step's first kernel
        cpu("aten::add_", sync_end + gap - 8, 6, ext=ext + 1),
    ]


def write_trace(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def window_of(tmp_path: Path, events: list[dict], script: str) -> dict:
    summary = WindowSummary({LABEL: [script, 9, "<module>", "Tensor.item"]}, cuda=True)
    summary.add(write_trace(tmp_path, events))
    return summary.window(active_steps=2)


def test_the_trace_gives_each_sync_its_wait_and_the_idle_gap_after_it(tmp_path):
    events = step_events(0, wait=4300, gap=120, gemm=4300) + step_events(10_000, wait=4300, gap=120, gemm=4300)
    win = window_of(tmp_path, events, "/abs/train.py")
    (g,) = win["sync_gaps"]
    assert (g["path"], g["line"], g["call"], g["syncs"], g["measured"]) == ("/abs/train.py", 9, "Tensor.item", 2, 2)
    assert g["wait_s"] == pytest.approx(2 * 4300e-6)
    assert g["gap_s"] == pytest.approx(2 * 120e-6)
    assert g["saving_s"] == pytest.approx(2 * 120e-6)  # min(wait, gap) per sync
    assert win["matmul_device_s"] == pytest.approx(2 * 4300e-6)  # aten::mm's kernels, not the add's
    # a GEMM known by its name alone (cuBLAS's nvjet kernels on Hopper), whatever op it is linked to
    renamed = events + [kernel(20_000, 700, ext=999, name="nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT")]
    assert window_of(tmp_path, renamed, "/abs/train.py")["matmul_device_s"] == pytest.approx(2 * 4300e-6 + 700e-6)
    # the window's last sync with no kernel after it is counted, not measured
    last = step_events(0, wait=50, gap=300, gemm=40)[:-2]
    (g,) = window_of(tmp_path, last, "/abs/train.py")["sync_gaps"]
    assert (g["syncs"], g["measured"], g["gap_s"]) == (1, 0, 0.0)
    # a CPU run has no device trace: nothing to read
    cpu_only = WindowSummary({LABEL: ["/abs/train.py", 9, "<module>", "Tensor.item"]}, cuda=False)
    cpu_only.add(write_trace(tmp_path, events))
    assert cpu_only.window(2)["sync_gaps"] == [] and cpu_only.window(2)["matmul_device_s"] is None


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\nloader = DataLoader(ds)\nx = 1\nfor x, y in loader:\n    x = x.to(device)\n"
                    + "    x = 1\n" * 3 + "    total += loss.item()\n" + "y = 2\n" * 3)
    return str(path)


def session(script: str, window: dict, *, device="cuda:0 (NVIDIA H200)", steps=100, median=0.0089,
            observed_item=0.43, patterns=None, dataloader=None) -> ProfileSession:
    from torchlint.profiler.session import Hotspot

    hs = [Hotspot(source="probe", path=script, line=9, granularity="line", function="<module>", op="Tensor.item",
                  self_s=observed_item, total_s=observed_item, calls=steps)]
    meta = {"cwd": str(Path(script).parent), "script": script, "script_wall_s": 1.0, "device": device,
            "cuda": device != "cpu", "cpus": 16}
    if patterns is not None:
        meta["patterns"] = patterns
    return ProfileSession(meta=meta, coverage=COVERAGE, hotspots=hs, steps={"count": steps, "median_s": median},
                          torch_window=window, dataloader=dataloader or {})


def tl101() -> Finding:
    return Finding(code="TL101", name="scalar-sync-in-loop", message="item", location=Location("train.py", 9, 14, 9, 25))


def test_a_sync_on_a_busy_gpu_costs_the_launch_gap_not_the_wait(tmp_path, script):
    # issue 26's GPU-busy loop: 4.3 ms waited in `.item()` a step, the next kernel 0.12 ms after it returned
    events = step_events(0, wait=4300, gap=120, gemm=4300) + step_events(10_000, wait=4300, gap=120, gemm=4300)
    (c,) = analyse([tl101()], session(script, window_of(tmp_path, events, script))).findings
    assert c.expected.per_step == pytest.approx(120e-6)
    assert c.expected.total == pytest.approx(120e-6 * 100)
    assert "idle gap" in c.expected.model and "1.0 sync(s) a step" in c.expected.model


def test_a_sync_on_an_idle_gpu_costs_at_most_the_wait(tmp_path, script):
    # the small fixture's shape: the GPU done almost at once (30 µs waited), the host busy for 1 ms after
    events = step_events(0, wait=30, gap=1000, gemm=20) + step_events(10_000, wait=30, gap=1000, gemm=20)
    (c,) = analyse([tl101()], session(script, window_of(tmp_path, events, script))).findings
    assert c.expected.per_step == pytest.approx(30e-6)


def test_without_a_device_trace_the_older_bound_is_kept_and_labelled(script):
    window = {"gpu_idle_share": 0.6, "window_s": 0.5, "active_steps": 5}  # no sync_gaps: no window covered them
    (c,) = analyse([tl101()], session(script, window, median=0.05, observed_item=2.0)).findings
    assert c.expected.per_step == pytest.approx(min(0.020, 0.030, 0.040))
    assert "no device trace" in c.expected.model and "overstates" in c.expected.model
    (c,) = analyse([tl101()], session(script, {}, device="cpu")).findings
    assert c.expected.bound is False and c.expected.model.startswith("CPU run: 1 read(s) per step, counted exactly")


def _matmul(script: str, line: int, mnk: list[int], calls: int) -> dict:
    return {"path": script, "line": line, "function": "<module>", "op": "linear", "dtype": "float32", "device": "cuda",
            "mnk": mnk, "allow_tf32": False, "calls": calls, "total_s": 0.001}


AMPERE = {"cuda": True, "capability": "9.0", "ampere_or_newer": True, "allow_tf32": False,
          "float32_matmul_precision": "highest"}


def test_tf32_gets_an_expected_saving_and_ranks_above_a_cheap_sync(tmp_path, script):
    events = step_events(0, wait=4300, gap=120, gemm=4300) + step_events(10_000, wait=4300, gap=120, gemm=4300)
    window = window_of(tmp_path, events, script)
    patterns = {"matmuls": [_matmul(script, 5, [2048, 2048, 2048], 800)], "tf32": AMPERE}
    result = analyse([tl101()], session(script, window, patterns=patterns))
    (tf32,) = [c for c in result.runtime if c.finding.code == "TLR08"]
    assert tf32.expected.per_step == pytest.approx(4300e-6 * (1 - 1 / TF32_SPEEDUP))
    assert "TF32" in tf32.expected.model
    (item,) = result.findings
    assert tf32.rank == 1 and item.rank == 2  # the real #1 of issue 26's loop, above the .item()
    # two TLR08 lines share the window's GEMM time by their fp32 FLOPs
    patterns["matmuls"].append(_matmul(script, 7, [2048, 2048, 2048], 2400))
    shares = {c.finding.line: c.expected.per_step for c in analyse([], session(script, window, patterns=patterns)).runtime
              if c.finding.code == "TLR08"}
    assert shares[5] == pytest.approx(4300e-6 * 7 / 8 * 0.25) and shares[7] == pytest.approx(4300e-6 * 7 / 8 * 0.75)
    # no device trace of the GEMMs: no figure, so observed but not ranked
    bare = analyse([], session(script, {"active_steps": 2}, patterns=patterns)).runtime
    assert all(c.expected is None and c.rank is None for c in bare if c.finding.code == "TLR08")


def test_pinning_without_workers_expects_no_saving(script):
    from torchlint.profiler.session import Hotspot

    tl202 = Finding(code="TL202", name="dataloader-no-pin-memory", message="pin", location=Location("train.py", 2, 10),
                    related=(Location("train.py", 4, 1),))
    copies = Hotspot(source="probe", path=script, line=5, granularity="line", function="<module>", op="Tensor.to",
                     self_s=0.036, total_s=0.036, calls=100, kind="HtoD pageable")

    def run(workers: int):
        s = session(script, {"active_steps": 2}, dataloader={"loaders": [{"path": script, "line": 4, "num_workers": workers}]})
        s.hotspots.append(copies)
        (c,) = [c for c in analyse([tl202], s).findings if c.finding.code == "TL202"]
        return c

    main = run(0)
    assert main.expected.per_step == 0.0 and "main process" in main.expected.model
    with_workers = run(2)
    assert with_workers.expected.total == pytest.approx(0.036) and "thread" in with_workers.expected.model
