"""A function that makes one whole training step is a step wherever its caller is (analysis/join.py
``_own_training_steps``): a plain class's method whose caller the join cannot resolve (drqv2's agent,
built by ``hydra.utils.instantiate`` from a config), the method that makes the step by calling its
class's critic and actor updates (``FileSummary.one_step`` a level up), and what they call in other
files; an every-N early exit before all of its optimizer steps gates the step, it does not make the
rest rare (``Guards.exit_gates_the_step``). A one-step function seen called once (a warm start) is
no step, and a delayed update after the critic's step stays rare."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths

WORKSPACE = '''import hydra


class Workspace:
    def __init__(self, cfg):
        self.agent = hydra.utils.instantiate(cfg.agent)

    def train(self, replay_iter, steps):
        for step in range(steps):
            metrics = self.agent.update(replay_iter, step)
'''

AGENT = '''import torch
import torch.nn.functional as F

import utils


class Agent:
    def __init__(self, critic, critic_target, actor, lr, update_every_steps, device):
        self.critic, self.critic_target, self.actor = critic, critic_target, actor
        self.device = device
        self.critic_opt = torch.optim.Adam(critic.parameters(), lr=lr)
        self.actor_opt = torch.optim.Adam(actor.parameters(), lr=lr)
        self.update_every_steps = update_every_steps

    def update_critic(self, obs, action, reward):
        q = self.critic(obs, action)
        loss = F.mse_loss(q, reward)
        metrics = {"critic_loss": loss.item()}
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        return metrics

    def update_actor(self, obs):
        loss = -self.critic(obs, self.actor(obs)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        return {"actor_loss": loss.item()}

    def update(self, replay_iter, step):
        metrics = dict()
        if step % self.update_every_steps != 0:
            return metrics
        obs, action, reward = [t.to(self.device, non_blocking=True) for t in next(replay_iter)]
        metrics["batch_reward"] = reward.mean().item()
        metrics.update(self.update_critic(obs, action, reward))
        metrics.update(self.update_actor(obs))
        utils.soft_update_params(self.critic, self.critic_target, 0.01)
        return metrics


class DelayedAgent:
    def __init__(self, critic, actor, lr):
        self.critic, self.actor = critic, actor
        self.critic_opt = torch.optim.Adam(critic.parameters(), lr=lr)
        self.actor_opt = torch.optim.Adam(actor.parameters(), lr=lr)
        self.total_it = 0

    def update(self, obs, target):
        self.total_it += 1
        loss = F.mse_loss(self.critic(obs), target)
        self.critic_opt.zero_grad()
        loss.backward()
        self.critic_opt.step()
        if self.total_it % 2 != 0:
            return
        actor_loss = -self.critic(self.actor(obs)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        print(actor_loss.item())


def warm_start(model, opt, x):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(loss.item())


def train_step(model, opt, x):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def main():
    model = torch.nn.Linear(4, 1).cuda()
    warm_start(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(8, 4))


if __name__ == "__main__":
    main()
'''

UTILS = '''import torch


def soft_update_params(net, target_net, tau):
    for param, target_param in zip(net.parameters(), target_net.parameters()):
        target_param.data.lerp_(param.data, tau)
'''


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[str, str, str]]:
    root = tmp_path_factory.mktemp("agent")
    for name, text in (("workspace.py", WORKSPACE), ("agent.py", AGENT), ("utils.py", UTILS)):
        (root / name).write_text(text)
    result = lint_paths([root], from_table({"min-impact": "low"}, root))
    assert not result.errors
    lines = {name: text.splitlines() for name, text in (("agent.py", AGENT), ("utils.py", UTILS))}
    return {(Path(f.path).name, lines[Path(f.path).name][f.line - 1].strip()): (f.code, f.impact, f.message)
            for f in result.findings if Path(f.path).name in lines}


def _at(found: dict[tuple[str, str], tuple[str, str, str]], path: str, text: str) -> tuple[str, str, str] | None:
    return next((v for (p, line), v in found.items() if p == path and text in line), None)


def test_an_agents_update_is_a_step_through_an_unresolved_caller(found: dict[tuple[str, str], tuple[str, str, str]]) -> None:
    critic = _at(found, "agent.py", 'metrics = {"critic_loss": loss.item()}')
    # its own file calls it from `update()`: reached from there, the step the caller makes
    assert critic is not None and critic[:2] == ("TL101", "medium") and "(run every step from the training step `Agent.update()`)" in critic[2]
    # after `if step % self.update_every_steps != 0: return metrics`: the update it lets pass is the step
    reward = _at(found, "agent.py", 'metrics["batch_reward"] = reward.mean().item()')
    assert reward is not None and reward[0] == "TL101" and reward[1] != "low" and "every step" in reward[2]
    ema = _at(found, "utils.py", "for param, target_param in zip(")
    assert ema is not None and ema[:2] == ("TL305", "medium") and "the training step `Agent.update()`" in ema[2]


def test_a_top_level_train_step_nobody_calls_is_a_step(found: dict[tuple[str, str], tuple[str, str, str]]) -> None:
    read = _at(found, "agent.py", "return loss.item()")
    assert read is not None and read[0] == "TL101" and "the training step `train_step()`" in read[2]


def test_a_warm_start_seen_called_once_and_a_delayed_update_are_no_step(found: dict[tuple[str, str], tuple[str, str, str]]) -> None:
    assert _at(found, "agent.py", "print(loss.item())") is None  # warm_start: main() calls it once
    delayed = _at(found, "agent.py", "print(actor_loss.item())")
    assert delayed is None or delayed[1] == "low"  # after the critic's step, every 2nd update: rare
