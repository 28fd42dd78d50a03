"""`torchlint profile` on a GPU: the CUDA path end to end (issue 26). Skipped without CUDA.

Run by the GPU kit (``pytest -m gpu``, benchmarks/gpu_check.py) on a session that finds a
GPU. Each test profiles one fixture of fixtures/scripts/gpu/ and checks what only a GPU
run can show: syncs found at their lines, the idle gap after each sync read from the
trace and used as the sync's cost, TF32's expected saving ranked above a cheap sync, and
pinning without workers expecting nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "fixtures" / "scripts" / "gpu"


@pytest.fixture(scope="module")
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the GPU kit runs these: benchmarks/gpu_check.py)")


def profile(tmp_path: Path, script: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", "run",
         str(GPU / script), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # torch's warnings about torchlint's own instruments (sync debug mode's prototype notice, the
    # profiler clearing a window's events) are torchlint's business, not the user's terminal's
    assert "prototype feature" not in proc.stderr and "clears events" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def by_code(report: dict) -> dict[str, dict]:
    return {f["code"]: f for f in report["findings"] + report["runtime_findings"]}


def line_of(script: str, text: str) -> int:
    return next(i for i, line in enumerate((GPU / script).read_text().splitlines(), 1) if text in line)


def test_syncs_copies_and_idle_time_on_a_small_loop(cuda, tmp_path):
    report = profile(tmp_path, "gpu_loader.py", "--batches", "30")
    assert report["run"]["device"].startswith("cuda")
    assert report["coverage"]["sync_debug"]["enabled"]
    found = by_code(report)
    item = found["TL101"]
    assert item["line"] == line_of("gpu_loader.py", "running += loss.item()")
    assert item["syncs"] >= 20  # sync debug mode saw the .item() at its line, about once a step
    assert {"TLR02", "TLR03"} <= set(found)
    window = report["torch_window"]
    assert window["gpu_idle_share"] is not None
    gaps = [g for g in window["sync_gaps"] if g["line"] == item["line"]]
    assert gaps and gaps[0]["measured"] >= 1 and gaps[0]["call"] == "Tensor.item"
    assert "idle gap" in item["expected"]["model"]  # the gap model had its data
    assert item["expected"]["per_step"] <= gaps[0]["wait_s"] / gaps[0]["syncs"] + 1e-9  # never more than the wait
    pin = found["TL202"]
    assert pin["expected"]["per_step"] == 0.0 and "main process" in pin["expected"]["model"]


def test_tf32_outranks_a_sync_on_a_busy_gpu(cuda, tmp_path):
    report = profile(tmp_path, "gpu_busy.py", "--steps", "20")
    found = by_code(report)
    assert "TLR08" in found, report["runtime_skipped"]
    tf32, item = found["TLR08"], found["TL101"]
    assert tf32["expected"]["per_step"] > 0 and "TF32" in tf32["expected"]["model"]
    assert tf32["rank"] is not None and item["rank"] is not None and tf32["rank"] < item["rank"]
    # the .item() waits for the whole step but costs only the launch gap after it (issue 26: 0.12 of ~9 ms)
    step = report["run"]["step_median_s"]
    assert item["expected"]["per_step"] < 0.25 * step, (item["expected"], step)
    assert report["torch_window"]["matmul_device_s"] > 0
