"""Tiers that follow how many times per step the host waits, whatever the file's shape
around the call (issue 32, review 9): a distribution's validation reached mid-step, a
module wrapped by an initialising helper, one host index copied several times a step (one
fix for all), a dict of device scalars read one by one, an RL rollout named per environment
step, and hand-written attention in a model no step is seen to run."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source


def _lint(code: str, *rules: str):  # type: ignore[no-untyped-def]
    return lint_source(code, "train.py", from_table({"select": list(rules), "min-impact": "low"}, Path(".")))


_AGENT = """
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

device = torch.device("cuda")


def layer_init(layer, std=1.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.ReLU())
        self.actor = {actor}
        self.critic = {critic}

    def get_action_and_value(self, x, action=None):
        hidden = self.network(x)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


agent = Agent().to(device)
optimizer = torch.optim.Adam(agent.parameters())
b_obs = torch.zeros(256, 4, device=device)
b_actions = torch.zeros(256, device=device)
b_inds = np.arange(256)
for epoch in range(4):
    np.random.shuffle(b_inds)
    for start in range(0, 256, 64):
        mb_inds = b_inds[start:start + 64]
        _, logprob, entropy, value = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
        loss = -(logprob * value.squeeze(-1)).mean() - entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_module_returned_by_an_initialising_helper_is_a_module() -> None:
    # cleanrl's ppo.py wraps its heads in `nn.Sequential(...)`, ppo_atari.py returns them from
    # `layer_init(nn.Linear(...))`: the critic's forward after the distribution is work either way
    wrapped = _lint(_AGENT.format(actor="layer_init(nn.Linear(64, 2))", critic="layer_init(nn.Linear(64, 1))"), "TL107")
    sequential = _lint(_AGENT.format(actor="nn.Sequential(nn.Linear(64, 2))", critic="nn.Sequential(nn.Linear(64, 1))"), "TL107")
    # mid-step, once per step, but two waits each time: the parameter's check, then the sampled action's in `log_prob`
    # (review 22: both readers high for cleanrl's PPO)
    assert [f.impact for f in wrapped] == [f.impact for f in sequential] == ["high"]


_SAC = """
import torch
import torch.nn as nn

device = torch.device("cuda")


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def get_action(self, x):
        mean = self.fc(x)
        normal = torch.distributions.Normal(mean, mean.exp())
        x_t = normal.rsample()
        return torch.tanh(x_t), normal.log_prob(x_t).sum(1)


actor = Actor().to(device)
qf = nn.Linear(4, 1).to(device)
optimizer = torch.optim.Adam(actor.parameters())
obs = torch.zeros(8, 4)
for global_step in range(1000):
    action, _ = actor.get_action(torch.Tensor(obs).to(device))
    {update}
"""


def test_a_helper_also_called_mid_step_waits_twice() -> None:
    # called first on a freshly uploaded observation (its reads at the call's end), and again in
    # the update after the critic's forward, with the backward after it: its waits are mid-step
    update = "q = qf(torch.zeros(8, 4, device=device))\n    pi, log_pi = actor.get_action(q.repeat(1, 4))\n    (log_pi - q).mean().backward()\n    optimizer.step()"
    once = _lint(_SAC.format(update="optimizer.step()"), "TL107")
    twice = _lint(_SAC.format(update=update), "TL107")
    # the parameters' checks, then the sample's in `log_prob`: two waits a call
    assert [f.impact for f in once] == ["high"] and "(2 times per step)" in once[0].message
    # called twice a step: the message says so, each call's two waits counted (analysis/join_counts.py)
    assert [f.impact for f in twice] == ["high"] and "(4 times per step: from 2 calls in the loop)" in twice[0].message


def test_one_host_index_copied_several_times_a_step_is_one_group() -> None:
    found = _lint(_AGENT.format(actor="nn.Linear(64, 2)", critic="nn.Linear(64, 1)"), "TL114")
    # both on one line, before the forward: the second finds the queue drained by the first, one finding for the line
    assert [f.impact for f in found] == ["medium"]
    assert "2 indexings with `mb_inds` in this step, each a copy" in found[0].message  # (no other line to name)
    assert "Build `mb_inds` on the device once" in found[0].fix_hint
    grouped = _lint(_AGENT.format(actor="nn.Linear(64, 2)", critic="nn.Linear(64, 1)").replace(
        "        loss = -(logprob", "        scale = b_obs.mean()\n        advantages = b_actions[mb_inds]\n        loss = -(advantages * scale * logprob"), "TL114")
    # one finding for the three (one fix), at the first, placed where the costliest waits (mid-step, after the forward)
    assert [f.impact for f in grouped] == ["medium"]  # (a few waits: one real wait per step, issue 32)
    assert "3 indexings with `mb_inds` in this step, here and at line " in grouped[0].message
    assert [r.line for r in grouped[0].related] == [grouped[0].line, grouped[0].line + 2]  # (the second on the first's line, the third two below)


def test_a_host_index_used_once_at_the_step_start_stays_medium() -> None:
    code = _AGENT.format(actor="nn.Linear(64, 2)", critic="nn.Linear(64, 1)").replace(
        "agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])", "agent.get_action_and_value(b_obs[mb_inds])")
    found = _lint(code, "TL114")
    assert [f.impact for f in found] == ["medium"]
    assert "indexings with" not in found[0].message


_LOGGED = """
import torch

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for x in loader:
    out = model(x.cuda())
    loss_dict = criterion(out)  # a dict of losses, as many as the configuration asks for
    sum(loss_dict.values()).backward()
    optimizer.step()
    {read}
"""


def test_a_dict_of_device_scalars_read_one_by_one_is_one_wait() -> None:
    found = _lint(_LOGGED.format(read="history.append({k: v.item() for k, v in loss_dict.items()})"), "TL101")
    assert [f.impact for f in found] == ["medium"]
    assert "one real wait per step" in found[0].impact_reason


def test_a_loop_over_a_dict_that_computes_on_the_device_still_waits_each_time() -> None:
    # each read waits for the kernel its own item queued (`v * 2`): no longer copies only
    found = _lint(_LOGGED.format(read="history.append({k: (v * 2).item() for k, v in loss_dict.items()})"), "TL101")
    assert [f.impact for f in found] == ["high"]


_ROLLOUT = """
import torch

device = torch.device("cuda")
policy = torch.nn.Linear(4, 2).to(device)
for iteration in range(100):
    obs = envs.reset()
    for step in range(0, num_steps):
        with torch.no_grad():
            action = policy(obs)
        obs, reward, done, info = envs.step(action)
        for idx, d in enumerate(done):
            if d:
                print(info["r"][idx].item())
"""


def test_an_environment_rollout_is_named_per_environment_step() -> None:
    found = _lint(_ROLLOUT, "TL101")
    assert found and all("environment rollout loop" in f.message and "per environment step" in f.message for f in found)
    assert not any("decoded token" in f.message + f.impact_reason for f in found)


def test_a_decode_loop_still_decodes_tokens() -> None:
    code = _ROLLOUT.replace("obs, reward, done, info = envs.step(action)", "obs = torch.cat([obs, action], -1)[:, -4:]")
    found = _lint(code.replace("print(info[\"r\"][idx].item())", "print(obs[idx].sum().item())"), "TL101")
    assert not any("environment" in f.message for f in found)
