"""An RL rollout loop (one environment step per pass) is named as one in messages, not as a
sampling loop "per decoded token" (review 9's cleanrl): its findings say "environment rollout
loop", and a loop inside it repeats "per ... per environment step" where the step is around it."""

from __future__ import annotations

from conftest import FIXTURES
from torchlint.config import from_table
from torchlint.engine import lint_source

_ROLLOUT = '''
import torch
import torch.nn as nn


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Linear(8, 2)

    def get_action_and_value(self, x):
        probs = torch.distributions.Normal(self.actor(x), 1.0)
        action = probs.sample()
        return action, probs.log_prob(action).sum(1)


def rollout(envs, num_steps, device, writer, make_stats):
    agent = Agent().to(device)
    obs_rms = make_stats()
    next_obs = torch.zeros(4, 8, device=device)
    for step in range(num_steps):
        with torch.no_grad():
            action, logprob = agent.get_action_and_value(next_obs - torch.from_numpy(obs_rms.mean).to(device))
        next_obs, reward, next_done, info = envs.step(action)
        for idx, d in enumerate(next_done):
            if d:
                writer.add_scalar("charts/episodic_return", info["r"][idx], step)
'''


def _messages(code: str, source: str) -> list[str]:
    return [f.message for f in lint_source(source, "rollout.py", from_table({"select": [code]}, FIXTURES))]


def test_a_rollout_loop_is_named_for_its_environment_steps() -> None:
    messages = _messages("TL101", _ROLLOUT)
    assert len(messages) == 1, messages
    assert "in an environment rollout loop" in messages[0] and "(per element per environment step)" in messages[0]
    assert "decoded token" not in messages[0] and "sampling loop" not in messages[0]


def test_a_helper_the_rollout_calls_says_rollout() -> None:
    messages = _messages("TL107", _ROLLOUT)
    assert len(messages) == 1 and "run every step from an environment rollout loop" in messages[0], messages


def test_a_constant_upload_in_a_rollout_says_rollout() -> None:
    messages = _messages("TL113", _ROLLOUT)
    assert len(messages) == 1 and "obs_rms.mean" in messages[0], messages
    assert "environment rollout loop" in messages[0]


def test_a_decode_loop_keeps_its_words() -> None:
    # the same loop shape with no environment: a sampling loop, per decoded token
    decode = _ROLLOUT.replace("next_obs, reward, next_done, info = envs.step(action)",
                              "next_obs, next_done = torch.cat((next_obs, action), 0), action.sum(-1)")
    messages = _messages("TL101", decode)
    assert all("environment" not in m for m in messages), messages


def test_a_list_of_device_tensors_made_a_tensor_is_one_read_per_element() -> None:
    """decision-transformer's trainer_atari.py (review 13): `actions += [sampled_action]` each environment step,
    then `torch.tensor(actions)`: every element is read back, j reads at step j: high, in those words; a list of
    host numbers is the plain upload."""
    path = FIXTURES / "rules" / "TL113" / "flagged_device_list.py"
    source = path.read_text(encoding="utf-8")
    found = lint_source(source, "rollout.py", from_table({"select": ["TL113"], "min-impact": "low"}, path.parent))
    [actions] = [f for f in found if "torch.tensor(actions" in f.message]
    assert actions.impact == "high" and "one read per element of a list of device tensors" in actions.message
    assert "per element per environment step" in actions.impact_reason
    clean = (FIXTURES / "rules" / "TL113" / "clean_host_list.py").read_text(encoding="utf-8")
    assert not lint_source(clean, "rollout.py", from_table({"select": ["TL113"], "min-impact": "low"}, path.parent))
