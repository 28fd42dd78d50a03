"""Reasons that say how often a guard lets a finding run: a wall-clock timer's branch (at
most once every few seconds) and an opt-in parameter no per-step call passes."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source

_TIMED_UPLOAD = '''
import time
import torch

def train(model, loader, optimizer, device, every_seconds=30):
    last = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if time.perf_counter() - last > every_seconds:
            probe = torch.zeros(8, 8).to(device)
            last = time.perf_counter()
'''


def _findings(text: str, code: str):  # type: ignore[no-untyped-def]
    return [f for f in lint_source(text, "train.py", from_table({"select": [code]}, Path("."))) if f.code == code]


def test_timer_branch_is_rare_and_says_so() -> None:
    found = _findings(_TIMED_UPLOAD, "TL110")
    assert [f.line for f in found] == [14]
    assert found[0].impact == "low"
    assert "at most once every few seconds" in found[0].impact_reason


def test_clock_bound_without_restart_is_every_step() -> None:
    text = _TIMED_UPLOAD.replace("            last = time.perf_counter()\n", "")
    found = _findings(text, "TL110")
    assert [f.line for f in found] == [14]
    assert "every few seconds" not in found[0].impact_reason and found[0].impact != "low"


_OPT_IN = '''
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, trace=False):
        x = self.lin(x)
        if trace:
            print(x.abs().max().item())
        return x

def train(loader, device, passing):
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        loss = model(x.to(device, non_blocking=True)PASS).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_opt_in_parameter_nobody_passes_is_low_and_says_so() -> None:
    for passing in ("", ", trace=False"):
        found = _findings(_OPT_IN.replace("PASS", passing), "TL101")
        assert [(f.line, f.impact) for f in found] == [(13, "low")], passing
        assert "opt-in path: `trace` is off by default" in found[0].impact_reason


def test_opt_in_parameter_a_step_passes_runs_every_step() -> None:
    for passing in (", trace=True", ", trace=passing", ", **{'trace': True}"):
        found = _findings(_OPT_IN.replace("PASS", passing), "TL101")
        assert [(f.line, f.impact) for f in found] == [(13, "high")], passing
        assert "opt-in" not in found[0].impact_reason
