"""A training step called every N iterations is the step, not a rare branch (Rainbow's
``if T % replay_frequency == 0: dqn.learn(mem)``), while a periodic evaluation stays out of the
step; and a function reached several ways in one phase is placed by its costliest reach (a
cache's position read per decoded token, not once per generation's prefill). Fixtures:
fixtures/projects/learnsteps and fixtures/projects/cachereach."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, project_findings
from torchlint.analysis.multiplicity import Multiplicity, Repeat
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


def test_a_learn_step_called_every_4_environment_steps_is_the_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("learnsteps", tmp_path, monkeypatch)
    found = project_findings(root)
    assert_markers_hold(root, found)
    read = next(f for f in found if f.code == "TL101" and f.path.endswith("agent.py"))
    # its own step: a training step, one read at its end; the call site is the guarded call
    assert "`Agent.learn()`" in read.message and "training loop at main.py:31" in read.message
    assert "at its end" in read.impact_reason
    # the periodic evaluation (no backward, no optimiser step) is not made per-step
    assert not any(f.path.endswith("main.py") for f in found)


SAME_FILE = """\
import torch
from torch import nn

device = torch.device("cuda")


class Agent:
    def __init__(self):
        self.net = nn.Linear(64, 512).to(device)
        self.optimiser = torch.optim.Adam(self.net.parameters(), lr=1e-4, fused=True)

    def learn(self, mem):
        loss = (self.net(mem.states) - mem.returns).pow(2).mean()
        self.optimiser.zero_grad()
        loss.backward()
        self.optimiser.step()
        self.losses.append(loss.item())

    def evaluate(self, env):
        return self.net(env.reset()).max().item()

    def run(self, env, mem, steps):
        for step in range(steps):
            env.step(env.sample())
{guard}
            if step % 100 == 0:
                self.evaluate(env)
"""


@pytest.mark.parametrize(("guard", "reported"), [
    ("            if step % 4 == 0:\n                self.learn(mem)", True),
    # a timer's branch recurs too: the step it runs is the step
    ("            if time.time() - last > 5:\n                last = time.time()\n                self.learn(mem)", True),
    # once, on the way in: a first pass is no step run again and again
    ("            if step == 0:\n                self.learn(mem)", False),
    # the loop steps its optimiser every iteration anyway: a learn() every N is an extra, rare
    ("            self.optimiser.step()\n            if step % 4 == 0:\n                self.learn(mem)", False),
])
def test_a_guarded_training_step_in_the_same_file(guard: str, reported: bool) -> None:
    source = ("import time\n" if "time." in guard else "") + SAME_FILE.format(guard=guard)
    found = lint_source(source, "agent.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    learn = [f for f in found if "`Agent.learn()`" in f.message]
    assert bool(learn) is reported
    if reported:
        (read,) = learn
        assert read.impact == "medium" and "training loop" in read.message
    # the evaluation every 100 steps stays out of the step
    assert not any("evaluate" in f.message for f in found)


def test_a_cache_read_is_placed_per_decoded_token_not_per_prefill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("cachereach", tmp_path, monkeypatch)
    found = project_findings(root)
    assert_markers_hold(root, found)
    (position,) = [f for f in found if f.path.endswith("engine.py") and f.line == 14]
    # the decode loop's forward (line 38), not the sampling loop over prompts whose generation prefills once
    assert "called from `TinyLM.forward()`" in position.message and "sampling loop at line 38" in position.message
    assert "train.py" not in position.message


@pytest.mark.parametrize(("heavier", "lighter"), [
    (Multiplicity((), "decoded token"), Multiplicity((Repeat("batch row", 2, via="Engine.generate_batch"),), "step")),
    (Multiplicity((Repeat("layer"),), "decoded token"), Multiplicity((), "decoded token")),
    (Multiplicity((Repeat("block", 12),), "step"), Multiplicity((Repeat("block", 6),), "step")),
    (Multiplicity((Repeat("block"),), "step"), Multiplicity((Repeat("block", 6),), "step")),  # an unknown count may be large
    (Multiplicity((Repeat("block", 2),), "step"), Multiplicity()),
])
def test_which_reach_runs_a_line_more_often(heavier: Multiplicity, lighter: Multiplicity) -> None:
    assert heavier.outweighs(lighter) and not lighter.outweighs(heavier)
    assert not heavier.outweighs(heavier)


EVALS = '''import torch
import torch.nn.functional as F


def evaluate(model, val_x, val_y):
    model.eval()
    out = model(val_x)
    print(F.mse_loss(out, val_y).item())
    w = F.softmax(out @ out.transpose(-2, -1), dim=-1)
    model.train()
    return w @ out
'''
PERIODIC = '''import torch
from evals import evaluate

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(loader, val_x, val_y):
    for step, x in enumerate(loader):
        loss = model(x.cuda()).sum()
        loss.backward()
        opt.step()
        {guard}
            evaluate(model, val_x, val_y)
'''


@pytest.mark.parametrize("guard, every", [
    ("if step % 100 == 0:", "every 100 steps (`step % 100`)"),
    ("if step % args.eval_every == 0:", "every `args.eval_every` steps (`step % args.eval_every`)"),
    ("if step == 0:", None),  # the first step only: no work run again and again
    ("if step > 1000:", None),  # not rare: every step past the warm-up
])
def test_a_periodic_evaluation_in_another_file_runs_every_n_steps(tmp_path: Path, guard: str, every: str | None) -> None:
    """nanoGPT's `if iter_num % eval_interval == 0: estimate_loss()` with the evaluation in
    another file: what it runs is every N steps, low with the guard's words, as the same lines
    under the guard in the loop; not once (a training loop runs it again and again) and not
    every step; its read for a log line stays quiet (TL101, as under the guard in the loop)."""
    (tmp_path / "evals.py").write_text(EVALS)
    (tmp_path / "train.py").write_text(PERIODIC.replace("{guard}", guard))
    config = from_table({"select": ["TL101", "TL301", "TL405"], "min-impact": "low"}, tmp_path)
    found = {f.code: f for f in lint_paths([tmp_path], config).findings}
    if every is None:
        assert "TL101" in found or found["TL301"].impact_reason.endswith("once (not every step)"), found
        return
    assert set(found) == {"TL301", "TL405"}
    assert all(f.impact == "low" and f.impact_reason.endswith(every) for f in found.values())
    assert f"`evaluate()` (run {every} from a training loop at " in found["TL405"].message and "train.py:14)" in found["TL405"].message


def test_an_agent_that_trains_inside_its_call_trains_per_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # dreamerv3's `Dreamer.__call__`: `for _ in range(steps): self._train(next(self._dataset))`, the
    # environment loop calling the agent every step; its train step's reads are per training step
    root = checked_here("agenttrains", tmp_path, monkeypatch)
    found = project_findings(root, "TL102")
    assert_markers_hold(root, found)
    recon = next(f for f in found if f.path.endswith("agent.py") and "WorldModel._train()" in f.message)
    assert "training loop at line 48" in recon.message and "environment step" not in recon.impact_reason
    # the planner only acts: its read per candidate stays an environment loop's, no training step's
    planner = next(f for f in found if f.path.endswith("agent.py") and "action.max()" in f.message)
    assert "training" not in planner.message + planner.impact_reason
