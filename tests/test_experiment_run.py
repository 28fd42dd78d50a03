"""`torchlint profile --experiment` end to end on a tiny CPU training script, with a
tight budget. One run, shared by the tests (torch start-up costs seconds here).

The script's DataLoader sleeps in ``__getitem__``: two workers halve the wait, an
effect far above any machine noise, so the runtime switch must come out as a
saving. The source variants (TL301, TL302) are only checked for being measured
or skipped with a reason, never for their size."""

from __future__ import annotations

import hashlib
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ahead, child_env, session_env
from torchlint.savings import NO_CHANGE, NOT_MEASURABLE, SAVING, SKIPPED, SLOWER

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
BUDGET = 25

SCRIPT = '''\
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sleepy(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.full((16,), float(i % 7)), i % 2


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(Sleepy(), batch_size=8)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
seen = 0.0
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(loss)
    seen += loss.item()

model.eval()
scores = model(torch.ones(4, 16, device=device))
print("done", len(history))
'''


@ahead(alone=True)  # the verdicts weigh the windows' times
def experiment_run(tmp_path_factory):
    pytest.importorskip("torch")
    cwd = tmp_path_factory.mktemp("exp")
    script = cwd / "tiny_train.py"
    script.write_text(SCRIPT)
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    env = dict(child_env(), OMP_NUM_THREADS="1")  # the imports made ahead unprofiled, as the suite's other runs
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json",
         "--experiment", "--budget", str(BUDGET), "--out", "run", "tiny_train.py"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )
    data = json.loads((cwd / "run" / "experiment.json").read_text())
    return proc, data, script, digest


def _by_code(data, code):
    return [m for m in data["measurements"] if m["code"] == code]


def test_exit_status_and_report_survive_the_experiment(experiment_run) -> None:
    proc, _data, _script, _digest = experiment_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    json.loads(proc.stdout)  # stdout is still only the JSON report
    assert "Traceback" not in proc.stderr


def test_overwrite_knows_every_file_a_run_writes(experiment_run) -> None:
    """--overwrite removes only RUN_ARTIFACTS: a name a run writes outside that list would
    survive an overwrite and be read as the next run's."""
    from torchlint.profiler.run import RUN_MARKER, is_run_artifact

    _proc, _data, script, _digest = experiment_run
    left = [p.name for p in (script.parent / "run").iterdir() if p.name != RUN_MARKER and not is_run_artifact(p)]
    assert left == []


def test_the_users_script_is_never_written(experiment_run) -> None:
    _proc, _data, script, digest = experiment_run
    assert hashlib.sha256(script.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in script.parent.iterdir() if p.suffix == ".py") == ["tiny_train.py"]


def test_workers_switched_on_at_runtime_are_a_saving(experiment_run) -> None:
    _proc, data, _script, _digest = experiment_run
    (m,) = _by_code(data, "TL201")
    assert m["variant"].startswith("num_workers=")
    assert m["verdict"] == SAVING, m
    assert m["ci_low"] > 0 and m["ci_low"] <= m["per_step"] <= m["ci_high"]
    assert m["total"] == pytest.approx(m["per_step"] * 40)  # 320 items / 8 per batch
    assert m["steps"] > 0
    original, variant = m["windows"]  # the figures the verdict came from, one per window
    assert len(original) == len(variant) >= 4 and statistics.median(original) > statistics.median(variant)


@pytest.mark.gpu  # holds on both: the GPU kit (benchmarks/gpu_check.py) runs it with CUDA
def test_gpu_remedies_are_skipped_with_the_reason(experiment_run) -> None:
    """Without CUDA the device remedies are skipped, saying so; with CUDA they are tried
    (TL101's `seen += loss.item()` by the deferred-sync variant, TL202 by pin_memory=True):
    measured, or skipped for the budget, never for want of a device."""
    import torch

    _proc, data, _script, _digest = experiment_run
    for code in ("TL101", "TL202"):
        (m,) = _by_code(data, code)
        if not torch.cuda.is_available():
            assert m["verdict"] == SKIPPED and "CUDA" in m["why"], m
        else:
            assert "CUDA" not in m["why"], m
            assert m["verdict"] in (SAVING, NO_CHANGE, SLOWER) or m["why"].startswith("budget"), m


def test_source_variants_are_measured_or_skipped_with_a_reason(experiment_run) -> None:
    _proc, data, _script, _digest = experiment_run
    for code in ("TL301", "TL302"):
        (m,) = _by_code(data, code)
        if m["verdict"] == SKIPPED:
            assert m["why"].startswith("budget"), m
        elif m["verdict"] == NOT_MEASURABLE:  # its code ran outside the steps and whole runs did not fit
            assert m["why"].startswith("not measurable by this experiment: it ") and "budget" in m["why"], m
        else:
            assert m["verdict"] in (SAVING, NO_CHANGE, SLOWER)
            assert "mechanical" in m["variant"] and m["ci_low"] <= m["ci_high"]


def test_budget_is_kept_and_stated(experiment_run) -> None:
    _proc, data, _script, _digest = experiment_run
    assert data["budget_s"] == BUDGET
    # planning keeps the next window inside the budget; one window may overrun it a little
    assert data["spent_s"] <= BUDGET + 10
    assert all(s["reason"] for s in data["skipped"])


SWITCH_PROBE = '''\
import json, sys
import torch
from torchlint.profiler import switches

path = sys.argv[1]
applied = switches.apply([
    {"target": "DataLoader", "path": path, "lines": [4, 4], "set": {"num_workers": 2, "persistent_workers": True}},
    {"target": "zero_grad", "path": path, "lines": [7, 7]},
])
ns = {}
exec(compile(open(path).read(), path, "exec"), ns)
print(json.dumps({"flagged": [ns["flagged"].num_workers, ns["flagged"].persistent_workers],
                  "other": [ns["other"].num_workers, ns["other"].persistent_workers],
                  "grads": ns["grads"], "calls": switches.counts(applied)}))
'''

USER = '''\
import torch
from torch.utils.data import DataLoader
data = list(range(8))
flagged = DataLoader(data, batch_size=2, num_workers=0)
other = DataLoader(data, batch_size=2)
p = torch.nn.Parameter(torch.ones(2)); p.grad = torch.ones(2); opt = torch.optim.SGD([p], lr=0.1)
opt.zero_grad(set_to_none=False); first = p.grad
p.grad = torch.ones(2); opt.zero_grad(set_to_none=False)
grads = [first is None, p.grad is None]
'''


@ahead()
def switch_probe(tmp_path_factory):
    """The probe's child (a fresh interpreter importing torch) made ahead: its output, parsed."""
    pytest.importorskip("torch")
    cwd = tmp_path_factory.mktemp("switches")
    user = cwd / "user.py"
    user.write_text(USER)
    probe = cwd / "probe.py"
    probe.write_text(SWITCH_PROBE)
    proc = subprocess.run([sys.executable, str(probe), str(user)], env=dict(session_env(), PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_runtime_switches_change_only_the_call_at_the_findings_line(switch_probe) -> None:
    out = switch_probe
    assert out["flagged"] == [2, True]  # the explicit num_workers=0 is overridden at that line
    assert out["other"] == [0, False]  # the loader on the next line is untouched
    assert out["grads"] == [True, False]  # set_to_none forced on line 7 only
    assert out["calls"] == [{"target": "DataLoader", "calls": 1}, {"target": "zero_grad", "calls": 1}]
