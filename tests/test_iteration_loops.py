"""An RL iteration around its rollout and its update epochs (cleanrl's PPO, review 22): what the iteration loop does
itself, beside the rollout and the epochs (the explained variance after the update, `b_values.cpu()`), runs once per
iteration of many minibatch steps, as an epoch loop's own statements do; the minibatch step's reads keep their
place, and a loop that trains in its own body stays the step."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source

_PPO = '''import numpy as np
import torch
import torch.nn as nn

device = torch.device("cuda")
agent = nn.Linear(4, 2).to(device)
optimizer = torch.optim.Adam(agent.parameters())
obs = torch.zeros((128, 4), device=device)
values = torch.zeros(128, device=device)
b_inds = np.arange(128)
for iteration in range(1, 100):
    for step in range(128):
        with torch.no_grad():
            values[step] = agent(obs[step]).sum()
        reward = env.step(values[step].cpu().numpy())
    with torch.no_grad():
        next_value = agent(obs[-1]).sum()
    for epoch in range(4):
        np.random.shuffle(b_inds)
        for start in range(0, 128, 32):
            loss = agent(obs[start:start + 32]).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            clipfrac = loss.detach().abs().mean().item()
    y_pred = values.cpu().numpy()
'''


def _findings(text: str) -> dict[int, tuple[str, str]]:
    config = from_table({"select": ["TL101", "TL102"], "min-impact": "low"}, Path("."))
    return {f.line: (str(getattr(f.impact, "value", f.impact)), f.impact_reason) for f in lint_source(text, "ppo.py", config)}


def test_what_the_iteration_does_itself_runs_once_per_many_steps() -> None:
    found = _findings(_PPO)
    impact, reason = found[26]
    assert impact == "low" and "once per epoch" in reason and "every step of" not in reason


def test_the_minibatch_step_keeps_its_place() -> None:
    found = _findings(_PPO)
    assert "every step of a training loop" in found[25][1]  # the minibatch step's own read
    assert 15 not in found  # (the rollout's read for the environment is its input: not reported at all)


def test_an_iteration_that_trains_itself_stays_the_step() -> None:
    # (a GAN's generator step in the outer loop around its critic's epochs: the outer loop is the training step)
    text = _PPO.replace("    y_pred = values.cpu().numpy()\n",
                        "    agent(obs).mean().backward()\n    optimizer.step()\n    y_pred = values.cpu().numpy()\n")
    found = _findings(text)
    assert "once per epoch" not in found[28][1] and "every step of" in found[28][1]
