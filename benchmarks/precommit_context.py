"""What checking a given file in its project's context costs pre-commit (issue 25).

pre-commit passes only the changed files; `torchlint check FILE` then joins the step
summaries of the project's other files (from the cache, else summarised with no rule
run). This script builds a project of N files (default 200: a package of models, data
and metric helpers, a training loop that calls one of them every step, plain utility
modules), commits nothing, and times whole `torchlint check` processes, alternated and
repeated, side by side:

  alone       `check pkg/metrics_000.py` without the project (the engine before issue 25)
  warm        `check pkg/metrics_000.py` with the project, its summaries in the cache
  cold        the same, the cache emptied before each run (the first run in a checkout)
  caller      `check train.py` with the project, warm: the loop's file, whose call puts the
              helper's `.item()` into every step (reported at the call, issue 36)
  caller-cold the same, cold
  project     `check .` over the whole project, warm (what CI runs)
  project-cold `check .`, cold

Each run is a fresh process (interpreter start and imports included, as pre-commit pays
them). It also says whether the helper's per-step finding was reported, alone and with
the project. Usage: python benchmarks/precommit_context.py [--files 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = '''import torch
import torch.nn as nn


class Block{i}(nn.Module):
    """A residual block."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width * 2)
        self.fc2 = nn.Linear(width * 2, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(self.norm(x)))
        return x + self.fc2(h)


def build{i}(depth: int = 4, width: int = 64) -> nn.Module:
    return nn.Sequential(*[Block{i}(width) for _ in range(depth)])


def count_parameters{i}(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
'''

METRIC = '''import torch


def accuracy_{i}(logits, labels):
    """Share of right answers."""
    correct = (logits.argmax(dim=1) == labels).float().mean()
    return correct{read}


def topk_{i}(logits, labels, k=5):
    top = logits.topk(k, dim=1).indices
    return (top == labels[:, None]).any(dim=1).float().mean()
'''

PLAIN = '''"""Paths, names and small helpers: no torch here."""

import json
import os


def load_settings_{i}(path):
    with open(path) as handle:
        return json.load(handle)


def run_name_{i}(settings, seed):
    parts = [settings.get("name", "run"), str(seed)]
    return "-".join(parts)


def ensure_dir_{i}(path):
    os.makedirs(path, exist_ok=True)
    return path
'''

TRAIN = '''import torch
from pkg.metrics_000 import accuracy_0
from pkg.models_000 import build0

model = build0().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
for epoch in range(10):
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = accuracy_0(logits, y)
'''


def build(root: Path, count: int) -> Path:
    """A project of ``count`` files; the path of the helper the loop calls."""
    package = root / "pkg"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (package / "__init__.py").write_text("")
    (root / "train.py").write_text(TRAIN)
    kinds = [("models", MODEL), ("metrics", METRIC), ("plain", PLAIN)]
    for i in range(count - 3):
        name, template = kinds[i % 3]
        (package / f"{name}_{i // 3:03d}.py").write_text(template.format(i=i // 3, read=".item()" if i // 3 == 0 else ""))
    return package / "metrics_000.py"


WITHOUT_PROJECT = """
import torchlint.engine as engine
real = engine.lint_paths
def alone(*args, **kwargs):
    kwargs["project"] = False
    return real(*args, **kwargs)
engine.lint_paths = alone
from torchlint.cli import main
main()
"""


def run(root: Path, cache: Path, args: list[str], alone: bool = False) -> tuple[float, str]:
    command = [sys.executable, "-c", WITHOUT_PROJECT] if alone else [sys.executable, "-m", "torchlint"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHLINT_CACHE_DIR=str(cache))
    started = time.perf_counter()
    done = subprocess.run([*command, "check", "--output-format", "concise", "-q", *args], cwd=root, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"torchlint failed: {done.stderr}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "project"
        helper = build(root, options.files).relative_to(root).as_posix()
        cache = Path(temp) / "cache"
        run(root, cache, ["."])  # fills the cache: full results of every file
        _, alone_out = run(root, cache, [helper], alone=True)
        _, warm_out = run(root, cache, [helper])
        print(f"project: {options.files} files; helper {helper}")
        print(f"  helper's per-step TL101 reported: alone {'TL101' in alone_out}, with the project {'TL101' in warm_out}")
        caller_out = run(root, cache, ["train.py"])[1]
        print(f"  train.py alone reports it at its call: {'train.py:' in caller_out and 'TL101' in caller_out}")

        def cold(args: list[str], alone: bool = False) -> float:
            shutil.rmtree(cache, ignore_errors=True)
            return run(root, cache, args, alone)[0]

        cases = {
            "alone": lambda: run(root, cache, [helper], alone=True)[0],
            "warm": lambda: run(root, cache, [helper])[0],
            "cold": lambda: cold([helper]),
            "caller": lambda: run(root, cache, ["train.py"])[0],
            "caller-cold": lambda: cold(["train.py"]),
            "project": lambda: run(root, cache, ["."])[0],
            "project-cold": lambda: cold(["."]),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(options.repeat):  # alternated: every case once per round, in turn
            for name, case in cases.items():
                times[name].append(case())
                if name.endswith("cold"):
                    run(root, cache, ["."])  # the next warm case finds the cache full again
        base = statistics.median(times["alone"])
        print(f"{'case':<13} {'median s':>9} {'min s':>7} {'max s':>7} {'x alone':>8}")
        for name, values in times.items():
            middle = statistics.median(values)
            print(f"{name:<13} {middle:>9.3f} {min(values):>7.3f} {max(values):>7.3f} {middle / base:>8.2f}")


if __name__ == "__main__":
    main()
