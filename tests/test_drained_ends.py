"""A read right after a call whose every run ends drained (analysis/drained_ends.py) waits for almost
nothing: low, in its own file and through the join (``FileSummary.drained_ends``/``drained_tails``,
``project_callees.ends_drained``), for TL101, TL102 and TL105 alike; a helper that queues work after
its sync, or returns early on some runs, keeps the read's tier."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext
from torchlint.config import from_table
from torchlint.engine import lint_paths

HELPERS = '''import torch
from syncs import device_sync


class Timer:
    def stop(self):
        torch.cuda.synchronize()
        return 1.0


def sync_all():
    device_sync()


def sync_then_work(model, x):
    torch.cuda.synchronize()
    return model(x)


def sync_if_distributed(t):
    if not torch.distributed.is_initialized():
        return
    torch.cuda.synchronize()


def act(env, policy, obs):
    action = policy(obs)
    next_obs, reward, done = env.step(action.cpu())
    return action, next_obs
'''

SYNCS = '''import torch


def device_sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
'''

TRAIN = '''import torch
from helpers import Timer, act, sync_all, sync_if_distributed, sync_then_work


def step(model, opt, x, y):
    loss = model(x.cuda()).sub(y.cuda()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def train(model, opt, loader):
    timer = Timer()
    for x, y in loader:
        loss = step(model, opt, x, y)
        timer.stop()
        print(loss.item())


def train_chain(model, opt, loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync_all()
        total = float(loss)


def train_work(model, opt, loader):
    for x, y in loader:
        loss = step(model, opt, x, y)
        out = sync_then_work(model, x)
        print(out.sum().item())


def train_early(model, opt, loader):
    for x, y in loader:
        loss = step(model, opt, x, y)
        sync_if_distributed(loss)
        print(loss.item())


def collect(env, policy, model, opt, memory, episodes):
    for episode in range(episodes):
        loss = step(model, opt, *memory.sample())
        obs = env.reset()
        for t in range(1000):
            action, obs = act(env, policy, torch.as_tensor(obs).cuda())
            memory.append(obs, action.cpu())
'''


@pytest.fixture
def found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[str, str, str]]:
    for name, text in (("helpers.py", HELPERS), ("syncs.py", SYNCS), ("train.py", TRAIN)):
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    result = lint_paths([Path(".")], from_table({"select": ["TL101", "TL102", "TL105"], "min-impact": "low"}, tmp_path))
    assert not result.errors
    return {f.line: (f.code, f.impact, f.impact_reason) for f in result.findings if Path(f.path).name == "train.py"}


def _line(text: str, after: str) -> int:
    """The line of ``TRAIN`` right after the one that holds ``after``."""
    return next(i for i, line in enumerate(TRAIN.splitlines(), 1) if after in line) + 1


def test_reads_after_another_files_draining_call_are_low(found: dict[int, tuple[str, str, str]]) -> None:
    timer, chain, planet = _line(TRAIN, "timer.stop()"), _line(TRAIN, "sync_all()"), _line(TRAIN, "action, obs = act(")
    assert found[timer][:2] == ("TL101", "low") and "right after a sync" in found[timer][2]  # `timer.stop()` of another file's class
    assert found[chain][:2] == ("TL105", "low") and "right after a sync" in found[chain][2]  # `sync_all()` -> `device_sync()`: a tail call, a file further
    # PlaNet: the helper's `env.step(action.cpu())` drained the queue in the same pass: the second copy, however often the pass runs
    assert found[planet][:2] == ("TL102", "low") and "right after another read of the same pass" in found[planet][2]


def test_helpers_that_work_after_their_sync_or_exit_early_keep_the_tier(found: dict[int, tuple[str, str, str]]) -> None:
    assert found[_line(TRAIN, "sync_then_work(model, x)")][1] == "medium"  # its model runs after its sync
    assert found[_line(TRAIN, "sync_if_distributed(loss)")][1] == "medium"  # one process returns before the sync


@pytest.mark.parametrize(("code", "drained"), [
    ("def f(x):\n    y = x * 2\n    torch.cuda.synchronize()\n    return y\n", True),
    ("def f(model, x):\n    out = model(x)\n    preds = out.argmax(-1).cpu()\n    print(preds)\n    return preds\n", True),
    ("def f(model, x):\n    torch.cuda.synchronize()\n    return model(x)\n", False),
    ("def f(x, timed):\n    if timed:\n        torch.cuda.synchronize()\n", False),
    ("def f(x):\n    if x is None:\n        return\n    torch.cuda.synchronize()\n", False),
    ("def f(x):\n    torch.cuda.synchronize()\n    y = x.sum() * 2\n    return y\n", False),
    # one-line bodies (minimind's `def rotate_half(x): return torch.cat(...)` stopped the file's check)
    ("def f(): torch.cuda.synchronize()\n", True),
    ("def f(x): return torch.cat((-x[..., 1:], x[..., :1]), dim=-1)\n", False),
    ("def f(x): x = x * 2; torch.cuda.synchronize()\n", True),
    ("def f(x): torch.cuda.synchronize(); y = x.sum() * 2\n", False),
])
def test_ends_drained_in_its_own_file(code: str, drained: bool) -> None:
    ctx = FileContext(cst.parse_module("import torch\n\n\n" + code), "m.py")
    function = ctx.tree.nodes(cst.FunctionDef)[0]
    assert ctx.places.ends_drained(function) is drained
