"""A read of what another file's function returns, reached through a tuple element, an attribute a
sampler class sets (or registers with its own `register_buffer`) and a ternary's branch: held where
that element may be a device tensor, dropped where every `return` makes it on the host (a NumPy
array of host data). ControlNet's DDIM and PLMS samplers: `alphas_prev[index]` of
`make_ddim_sampling_parameters`'s `np.asarray(...)`, beside `alphas[index]`, a device tensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths

UTIL = '''import numpy as np
import torch


def make_parameters(alphacums, steps, eta):
    alphas = alphacums[steps]
    alphas_prev = {prev}
    sigmas = eta * np.sqrt((1 - alphas_prev) / (1 - alphas))
    return sigmas, alphas, alphas_prev
'''
SAMPLER = '''import numpy as np
import torch
from util import make_parameters


class Sampler(object):
    def __init__(self, model):
        self.model = model

    def register_buffer(self, name, attr):
        if type(attr) == torch.Tensor:
            attr = attr.to(torch.device("cuda"))
        setattr(self, name, attr)

    def make_schedule(self, steps, eta=0.0):
        sigmas, alphas, alphas_prev = make_parameters(self.model.alphas_cumprod.cpu(), steps, eta)
        self.register_buffer("ddim_sigmas", sigmas)
        self.register_buffer("ddim_alphas", alphas)
        self.register_buffer("ddim_alphas_prev", alphas_prev)

    @torch.no_grad()
    def sample(self, x, steps):
        self.make_schedule(steps)
        for i, step in enumerate(steps):
            x = self.p_sample(x, step, i)
        return x

    def p_sample(self, x, t, index, use_original_steps=False):
        out = self.model(x, t)
        alphas = self.model.alphas_cumprod if use_original_steps else self.ddim_alphas
        alphas_prev = self.model.alphas_cumprod_prev if use_original_steps else self.ddim_alphas_prev
        a_t = torch.full((x.shape[0], 1, 1, 1), alphas[index], device=x.device)
        a_prev = torch.full((x.shape[0], 1, 1, 1), alphas_prev[index], device=x.device)
        return x - out * (a_t - a_prev)
'''


@pytest.mark.parametrize("prev, host", [
    ("np.asarray([alphacums[0]] + alphacums[steps[:-1]].tolist())", True),  # a new host array of host numbers
    ("np.array([0.5] * len(steps))", True),
    ("np.sqrt(alphacums[steps])", False),  # NumPy hands a tensor back as a tensor: may be on the device
    ("alphacums[steps]", False),
])
def test_a_numpy_array_another_file_returns_is_read_on_the_host(tmp_path: Path, prev: str, host: bool) -> None:
    (tmp_path / "util.py").write_text(UTIL.format(prev=prev))
    (tmp_path / "sampler.py").write_text(SAMPLER)
    found = lint_paths([tmp_path], from_table({"select": ["TL105"], "min-impact": "low"}, tmp_path)).findings
    lines = {f.line for f in found if f.path.endswith("sampler.py")}
    line_of = {text.strip().split(" =")[0]: number for number, text in enumerate(SAMPLER.splitlines(), start=1)}
    assert line_of["a_t"] in lines  # `alphas[index]`: an element the function may return as a tensor, moved to the device
    assert (line_of["a_prev"] in lines) is not host
