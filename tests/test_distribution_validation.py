"""TL107 (review 5, PPO-PyTorch): a distribution built on every step checks its arguments on
the device. `Distribution.set_default_validate_args(False)` in any file of the project turns
the checks off for the whole run: a process-wide switch each summary carries
(`FileSummary.switches`), which the join gathers and settling reads."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths

_AGENT = '''import torch
import torch.nn as nn
from torch.distributions import Categorical

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=-1))

    def evaluate(self, state, action):
        dist = Categorical(self.actor(state))
        return dist.log_prob(action)
'''

_TRAIN = '''import torch
{setup}
from agent import ActorCritic, device

policy = ActorCritic().to(device)
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
for states, actions in batches:
    logp = policy.evaluate(states.to(device), actions.to(device))
    for _ in range(4):
        again = torch.distributions.Normal(logp, 1.0)
        loss = -(logp + again.mean).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''

_SETUP = '''import torch


def configure():
    torch.distributions.Distribution.set_default_validate_args(False)
'''


def _project(root: Path, setup: str = "") -> Path:
    root.mkdir()
    (root / "agent.py").write_text(_AGENT)
    (root / "train.py").write_text(_TRAIN.format(setup=setup))
    return root


def _findings(root: Path) -> dict[tuple[str, int], str]:
    result = lint_paths([root], from_table({"select": ["TL107"], "min-impact": "low"}, root))
    assert not result.errors
    return {(Path(f.location.path).name, f.line): f.impact for f in result.findings}


def test_distributions_built_every_step_are_tiered_as_syncs(tmp_path: Path) -> None:
    found = _findings(_project(tmp_path / "p"))
    # once per step, but two checks each time (its parameter, then the sample `log_prob` scores) mid-step: high;
    # four times per step: high
    assert found == {("agent.py", 14): "high", ("train.py", 10): "high"}


def test_a_distribution_only_sampled_waits_once(tmp_path: Path) -> None:
    # (no `log_prob` in its function: one check, of its one parameter, once per step first in the step: medium)
    root = _project(tmp_path / "p")
    (root / "agent.py").write_text(_AGENT.replace("return dist.log_prob(action)", "return dist.sample()"))
    assert _findings(root)[("agent.py", 14)] == "medium"


def test_turning_validation_off_in_another_file_quiets_every_file(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", setup="import setup_run")
    (root / "setup_run.py").write_text(_SETUP)
    assert _findings(root) == {}


def test_a_project_method_of_that_name_is_no_switch(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    (root / "setup_run.py").write_text("import torch\n\n\nclass Sampler:\n    def set_default_validate_args(self, value):\n        self.value = value\n\n\nSampler().set_default_validate_args(False)\n")
    assert set(_findings(root)) == {("agent.py", 14), ("train.py", 10)}


_DISTRIBUTIONS = '''import torch


class FixedNormal(torch.distributions.Normal):
    def log_probs(self, actions):
        return super().log_prob(actions).sum(-1, keepdim=True)


class SquashedNormal(FixedNormal):
    pass


class TruncatedNormal(torch.distributions.Normal):  # drqv2's: its base is built with no checks
    def __init__(self, loc, scale, low=-1.0, high=1.0):
        super().__init__(loc, scale, validate_args=False)
        self.low, self.high = low, high


class ClippedNormal(TruncatedNormal):
    pass


class Table:  # shares nothing with a distribution
    def __init__(self, mean, std):
        self.mean, self.std = mean, std
'''

_POLICY = '''import torch
import torch.nn as nn
from dists import ClippedNormal, SquashedNormal, Table

device = torch.device("cuda")


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = nn.Linear(8, 2)

    def forward(self, state):
        mu = self.mean(state)
        table = Table(mu, mu.exp())
        return SquashedNormal(mu, torch.ones_like(mu))


policy = Policy().to(device)
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
for states, actions in batches:
    dist = policy(states.to(device))
    again = SquashedNormal(dist.mean, 1.0)
    other = Table(dist.mean, 1.0)
    clipped = ClippedNormal(dist.mean, 1.0)
    loss = -(dist.log_probs(actions.to(device)) + again.mean + other.mean).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def test_a_subclass_of_a_distribution_in_another_file_checks_its_arguments(tmp_path: Path) -> None:
    # a2c's `FixedNormal(torch.distributions.Normal)`, here a subclass of it defined in another
    # file: built in the model's forward (the join's step) and in the loop (this file's step)
    root = tmp_path / "p"
    root.mkdir()
    (root / "dists.py").write_text(_DISTRIBUTIONS)
    (root / "train.py").write_text(_POLICY)
    result = lint_paths([root], from_table({"select": ["TL107"], "min-impact": "low"}, root))
    assert not result.errors
    found = {(Path(f.location.path).name, f.line) for f in result.findings}
    # `Table(...)`, a class of no distribution, and `ClippedNormal(...)`, whose base passes `validate_args=False` up, are quiet
    assert found == {("train.py", 16), ("train.py", 23)}
    assert all("(a distribution, by its bases)" in f.message for f in result.findings)
