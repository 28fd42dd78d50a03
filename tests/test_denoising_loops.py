"""Issue 32, item 4: denoising loops (diffusion samplers) are inference steps, one sample step per
iteration with no logits: what makes one (a denoiser given its state and the time step, the state made
again from its result), loops that carry a state but do not denoise, and what repeats within one."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import FIXTURES
from test_decode_loops import _ctx, _loops
from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.multiplicity import Multiplicity, Where
from torchlint.config import from_table
from torchlint.engine import lint_paths


# Issue 32, item 4: diffusion samplers produce one sample step per iteration with no logits.
DENOISES = [
    # improved/guided-diffusion: the model reached through a method given it, the state from its result
    "class D:\n    def loop(self, model, shape, device):\n        img = th.randn(*shape)\n        for i in self.indices:\n"
    "            t = th.tensor([i] * shape[0], device=device)\n            with th.no_grad():\n"
    "                out = self.p_sample(model, img, t)\n                img = out['sample']\n        return img\n",
    # ddim: an untyped parameter called, the state kept in a list grown from its result
    "def generalized_steps(x, seq, model):\n    xs = [x]\n    for i in reversed(seq):\n        t = (th.ones(4) * i).to(x.device)\n"
    "        xt = xs[-1].to('cuda')\n        et = model(xt, t)\n        xs.append((xt - et).to('cpu'))\n    return xs\n",
    # denoising-diffusion-pytorch: the state remade by arithmetic on the prediction
    "class D:\n    def ddim_sample(self, img, time_pairs):\n        for time, time_next in time_pairs:\n"
    "            time_cond = th.full((4,), time)\n            noise, x_start = self.model_predictions(img, time_cond)\n"
    "            img = x_start * 2 + noise\n        return img\n",
    # elucidated: the step's input is the state plus noise scaled by the step, then remade
    "class D:\n    def sample(self, images, sigmas):\n        for sigma, sigma_next in sigmas:\n            sigma_hat = sigma * 2\n"
    "            images_hat = images + sigma_hat * th.randn_like(images)\n            out = self.net_forward(images_hat, sigma_hat)\n"
    "            images = images_hat + (sigma_next - sigma_hat) * out\n        return images\n",
    # a sampler walking its schedule by index (k-diffusion): named for sampling
    "def sample_euler(model, x, sigmas):\n    for i in range(len(sigmas) - 1):\n        denoised = model(x, sigmas[i])\n"
    "        x = x + (x - denoised) * (sigmas[i + 1] - sigmas[i])\n    return x\n",
]
NOT_DENOISES = [
    # an RNN over a sequence inside the model's forward: within its step
    "class R:\n    def forward(self, xs, h):\n        for t in range(len(xs)):\n            h = self.model(xs[t], h, t)\n        return h\n",
    # the same outside forward: it walks the sequence, one element per iteration
    "def encode(model, xs, h):\n    for t in range(len(xs)):\n        h = model.cell(xs[t], h, t)\n    return h\n",
    # a loop over layers: one layer per iteration, whatever it is given
    "def run(model, x):\n    for i, layer in enumerate(model.layers):\n        x = layer(x, i)\n    return x\n",
    # an optimizer loop: the step trains, its state is the weights
    "def fit(model, x, opt):\n    for step in range(10):\n        x = model(x, step)\n        x.sum().backward()\n        opt.step()\n",
    # a likelihood sweep over time steps: the model's input is made afresh, nothing fed back
    "def bpd(model, x0, n):\n    total = 0\n    for i in range(n):\n        t = th.tensor([i])\n        x_t = x0 + t\n"
    "        total = total + model(x_t, t)\n    return total\n",
    # an attack loop: the state is fed back, but no time step conditions the model
    "def attack(model, x, y):\n    delta = 0\n    for _ in range(10):\n        delta = pgd_step(model, x + delta, y)\n    return delta\n",
    # one item of a container remade per iteration, in a function named for subsampling (fairseq)
    "def reshape_subsample(self, sample):\n    for key in sample:\n        sample[key] = self.flat_subsample(sample[key])\n    return sample\n",
    # the same in a generator: one channel's scores per iteration, not a step
    "def _generate(self, lprobs, tokens, step):\n    for i in range(self.n_channels):\n"
    "        lprobs[i] = self.ngram_blocker(tokens, lprobs[i], step)\n",
    # a generation loop over batches: its loop variable is a batch, no time step
    "def generate(generator, models, t):\n    num_feats = 0\n    for i, sample in enumerate(t):\n"
    "        hypos, num_feats = gen_hypos(generator, models, num_feats, sample)\n",
]


@pytest.mark.parametrize("code", DENOISES)
def test_a_loop_feeding_a_denoiser_its_own_output_is_one_sample_step_per_iteration(code: str) -> None:
    ctx = _ctx("import torch as th\n" + code)
    [loop] = _loops(ctx)
    assert ctx.loops.denoises(loop) and ctx.loops.is_hot(loop)
    assert ctx.loops.where(loop) is Where.INFER
    assert ctx.places.repeat_of(loop).kind == "denoising step" and ctx.places.step_unit(loop) == "denoising step"


@pytest.mark.parametrize("code", NOT_DENOISES)
def test_loops_that_carry_a_state_but_do_not_denoise(code: str) -> None:
    ctx = _ctx("import torch as th\n" + code)
    [loop] = _loops(ctx)
    assert not ctx.loops.denoises(loop)
    assert ctx.loops.where(loop) is not Where.INFER


def test_a_host_built_time_step_in_a_sampler_is_per_denoising_step_and_its_near_misses_are_not() -> None:
    root = FIXTURES / "projects" / "sampler"
    found = lint_paths([root], from_table({"select": ["TL110"], "min-impact": "low"}, root)).findings
    sampler = {f.line: f for f in found if f.path.endswith("diffusion.py")}
    assert sampler[19].impact == "medium" and "inference or sampling loop" in sampler[19].impact_reason
    near = {f.line: f.impact_reason for f in found if f.path.endswith("near_misses.py")}
    assert set(near) == {14, 21, 28, 35, 44}  # each loop's host-built tensor is reported...
    assert not any("sampling" in reason for reason in near.values())  # ...but none as a sample step


def test_a_loop_inside_a_denoising_step_runs_per_iteration_per_denoising_step() -> None:
    ctx = FileContext(cst.parse_module((FIXTURES / "projects" / "sampler" / "diffusion.py").read_text()), "diffusion.py", Options())
    outer, inner = [loop for loop in _loops(ctx) if ctx.tree.enclosing_function(loop).name.value == "guided_loop"]
    statement = inner.body.body[0]
    repeats = Multiplicity(tuple(r for _, r in ctx.places.repeats(statement, outer)), ctx.places.step_unit(outer))
    assert repeats.words() == "per iteration per denoising step"
