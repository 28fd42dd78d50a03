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
        assert [(f.line, f.impact) for f in found] == [(13, "medium")], passing
        assert "opt-in" not in found[0].impact_reason


def test_the_else_of_a_negated_opt_in_flag_is_opt_in_too() -> None:
    # vits' duration predictor: `if not reverse: <training> else: <sampling>`, reverse=False
    text = _OPT_IN.replace("        if trace:\n            print(x.abs().max().item())\n",
                           "        if not trace:\n            x = x * 2\n        else:\n            print(x.abs().max().item())\n")
    found = _findings(text.replace("PASS", ""), "TL101")
    assert [(f.line, f.impact) for f in found] == [(15, "low")]
    assert "opt-in path: `trace` is off by default" in found[0].impact_reason
    found = _findings(text.replace("PASS", ", trace=True"), "TL101")
    assert [(f.line, f.impact) for f in found] == [(15, "medium")]


# Review 6 (vits, glide): reads that run only when a check fails or a cache misses.
_DIAGNOSTICS = '''
import torch

mel_basis = {}

def train(loader, model, opt, m, best):
    for y in loader:
        y = y.cuda(non_blocking=True)
        key = str(y.device)
        if torch.min(y) < -1.:
            print("min value is ", torch.min(y))
        if key not in mel_basis:
            mel_basis[key] = torch.hann_window(400).to(y.device)
        assert y.dim() == 2, f"bad shape {y.sum().item()}"
        out = model(mel_basis[key] @ y)
        out.sum().backward()
        opt.step()
        if torch.isnan(out).any():
            print("nan at", out.sum().item())
        if out.mean() > best:
            print("better", out.sum().item())
'''


_CONFIG = from_table({"select": ["TL101", "TL102", "TL110"], "min-impact": "low"}, Path("."))


def _tiers(text: str) -> dict[tuple[int, str], str]:
    return {(f.line, f.code): f.impact for f in lint_source(text, "train.py", _CONFIG)}


def test_a_sanity_checks_report_a_cache_fill_and_an_assert_message_run_rarely() -> None:
    tiers = _tiers(_DIAGNOSTICS)
    # print under `torch.min(y) < -1.` (runs when the data is wrong), `mel_basis[key] = ...` under
    # `key not in mel_basis` (once per key), the assert's message (built only when it fails), the
    # report of a NaN check: none is paid on every step
    for line in (11, 13, 14, 19):
        assert tiers.get((line, "TL101"), "low") == "low" and tiers.get((line, "TL110"), "low") == "low", line
    # `out.mean() > best` is no sanity bound (an improvement is common): it runs every step, low only as the
    # read right after the NaN check's, which waits for the queue (fp51's reads after reads)
    reasons = {(f.line, f.code): f.impact_reason for f in lint_source(_DIAGNOSTICS, "train.py", _CONFIG)}
    assert "every step" in reasons[(21, "TL101")] and "right after another read" in reasons[(21, "TL101")]
    assert tiers[(18, "TL101")] != "low"


def test_a_cache_emptied_every_step_is_filled_every_step() -> None:
    text = _DIAGNOSTICS.replace("        key = str(y.device)\n", "        mel_basis = {}\n        key = str(y.device)\n")
    assert _tiers(text)[(14, "TL110")] != "low"


# detectron2's retry_if_cuda_oom: what follows a `with` whose body returns runs only when the
# context manager swallowed an error (an OOM), not on every step.
_RETRY = '''
import torch

def train(loader, model, opt, ignore_oom):
    for x in loader:
        x = x.cuda(non_blocking=True)
        with ignore_oom():
            model(x).sum().backward()
            opt.step()
            continue
        torch.cuda.empty_cache()
        print(x.sum().item())
'''


def test_code_after_a_with_that_returns_runs_only_after_a_swallowed_error() -> None:
    config = from_table({"select": ["TL101", "TL103"], "min-impact": "low"}, Path("."))
    tiers = {(f.line, f.code): f.impact for f in lint_source(_RETRY, "train.py", config)}
    assert tiers[(11, "TL103")] == "low" and tiers.get((12, "TL101"), "low") == "low"
    falls_through = _RETRY.replace("            continue\n", "")
    tiers = {(f.line, f.code): f.impact for f in lint_source(falls_through, "train.py", config)}
    assert tiers[(10, "TL103")] != "low"  # nothing leaves the block early: every step


def test_a_with_block_that_returns_is_an_exit_only_an_error_gets_past() -> None:
    import libcst as cst

    from torchlint.analysis.guard_shapes import first_rare_exit
    from torchlint.analysis.tree import Tree

    def exit_of(body: str):  # type: ignore[no-untyped-def]
        module = cst.parse_module(f"def wrapped(x):\n{body}")
        return first_rare_exit(Tree(module), module.body[0].body)  # type: ignore[attr-defined]

    retry = "    with ignore_oom():\n        return f(x)\n    torch.cuda.empty_cache()\n    return f(x.cpu())\n"
    assert isinstance(exit_of(retry), cst.With)
    assert exit_of(retry.replace("        return f(x)\n", "        y = f(x)\n")) is None  # falls through: every call
