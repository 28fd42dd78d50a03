"""Training loops are not named sampling or decode loops (review 15, both readers): a loop's own
variables carry nothing into a "denoising step" (Swin's `samples, targets = mixup_fn(samples,
targets)`), a store's draw (`self.schedule_sampler.sample(n)`) samples no model (consistency_models'
micro-batch loop, whose step was then "after its decode"), and a list of environments stepped in a
comprehension (dreamerv3's `[e.step(a) for e, a in zip(envs, action)]`) makes an environment rollout,
not a loop "per decoded token"."""

from __future__ import annotations

from conftest import FIXTURES
from torchlint.config import from_table
from torchlint.engine import lint_source

_MIXUP = '''
import torch


def train_one_epoch(model, criterion, data_loader, mixup_fn, loss_scaler, optimizer):
    for idx, (samples, targets) in enumerate(data_loader):
        samples = samples.cuda(non_blocking=True)
        targets = targets.cuda(non_blocking=True)
        if mixup_fn is not None:
            samples, targets = mixup_fn(samples, targets)
        outputs = model(samples)
        loss = criterion(outputs, targets)
        loss_scaler(loss, optimizer, parameters=model.parameters())
        torch.cuda.synchronize()
'''

_DENOISER = '''
import torch


@torch.no_grad()
def p_sample_loop(model, shape, timesteps):
    img = torch.randn(shape, device="cuda")
    for i in reversed(range(timesteps)):
        t = torch.full((shape[0],), i, device="cuda")
        img = model(img, t)
        torch.cuda.synchronize()
    return img
'''

_SCHEDULE_SAMPLER = '''
import torch


class TrainLoop:
    def run_loop(self):
        while True:
            batch, cond = next(self.data)
            self.run_step(batch, cond)

    def run_step(self, batch, cond):
        self.forward_backward(batch, cond)
        self.opt.step()
        self._update_ema()

    def forward_backward(self, batch, cond):
        for i in range(0, batch.shape[0], self.microbatch):
            micro = batch[i : i + self.microbatch].cuda()
            t, weights = self.schedule_sampler.sample(micro.shape[0], "cuda")
            losses = self.diffusion.training_losses(self.model, micro, t)
            loss = (losses["loss"] * weights).mean()
            self.mp_trainer.backward(loss)

    def _update_ema(self):
        for targ, src in zip(self.ema_params, self.model.parameters()):
            targ.detach().mul_(0.99).add_(src, alpha=0.01)
'''

_ENVIRONMENTS = '''
import numpy as np
import torch
import torch.nn as nn


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def forward(self, obs, state):
        logits = self.net(obs) + state
        return torch.distributions.Categorical(logits=logits).sample(), logits


def simulate(envs, steps):
    agent = Policy().cuda()
    step, state = 0, torch.zeros(len(envs), 2, device="cuda")
    obs = np.stack([env.reset() for env in envs])
    while step < steps:
        action, state = agent(torch.as_tensor(obs, device="cuda"), state)
        action = action.cpu().numpy()
        results = [e.step(a) for e, a in zip(envs, action)]
        obs = np.stack([r[0] for r in results])
        step += len(envs)
        torch.cuda.synchronize()
'''


def _messages(code: str, source: str) -> list[str]:
    return [f.message for f in lint_source(source, "m.py", from_table({"select": [code], "min-impact": "low"}, FIXTURES))]


def test_a_loop_over_batches_that_rebinds_its_own_variables_trains() -> None:
    messages = _messages("TL103", _MIXUP)
    assert len(messages) == 1 and "in a training loop" in messages[0], messages
    assert "sampling" not in messages[0] and "denoising" not in messages[0]


def test_a_denoiser_fed_its_own_output_still_denoises() -> None:
    messages = _messages("TL103", _DENOISER)
    assert len(messages) == 1 and "in a sampling loop" in messages[0] and "denoising step" in messages[0], messages


def test_a_schedule_samplers_draw_is_no_generation() -> None:
    messages = _messages("TL305", _SCHEDULE_SAMPLER)
    assert len(messages) == 1, messages
    assert "run every step from a training loop" in messages[0] and "decode" not in messages[0], messages


def test_a_list_of_environments_stepped_in_a_comprehension_is_a_rollout() -> None:
    messages = _messages("TL103", _ENVIRONMENTS)
    assert len(messages) == 1 and "in an environment rollout loop" in messages[0], messages
    assert "decoded token" not in messages[0] and "sampling loop" not in messages[0]
