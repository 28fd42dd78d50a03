"""The device of a tensor on the host (issue 32, stylegan2's `get_padding`, sty7): `G.device` is the CPU
where every path of the file's calls gives `G` a tensor a helper built at its CPU-default `device`, or None."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext

HELPER = '''
import torch

def sample_affine(size, device="cpu"):
    return torch.eye(3, device=device).unsqueeze(0).repeat(size, 1, 1)

def get_padding(G):
    device = G.device
    return torch.tensor([0, 0], device=device)

def pad(img, G=None):
    G_try = G
    if G is None:
        G_try = torch.inverse(sample_affine(img.shape[0]{passed}))
    return get_padding(G_try)
'''


def _device_of_padding(source: str) -> str | None:
    ctx = FileContext(cst.parse_module(source), "m.py")
    factory = next(c for c in ctx.tree.nodes(cst.Call) if ctx.qname(c.func) == "torch.tensor")
    return ctx.devices.device_value(ctx.keyword(factory, "device").value, factory)


def test_the_device_of_a_matrix_built_at_a_helpers_cpu_default_is_the_host() -> None:
    assert _device_of_padding(HELPER.format(passed="")) == "host"


def test_a_caller_passing_the_batchs_device_puts_it_on_the_device() -> None:
    assert _device_of_padding(HELPER.format(passed=", device=img.device")) == "device"


def test_a_parameter_that_is_only_none_by_default_says_nothing() -> None:
    source = '''
import torch

def forward(x, mask=None):
    return torch.tensor([0, 0], device=mask.device)
'''
    assert _device_of_padding(source) == "device"


def test_a_helper_that_only_hands_its_device_on_is_not_taken_for_the_host() -> None:
    source = HELPER.replace('return torch.eye(3, device=device)', 'return model_of(device).weight  #').format(passed="")
    assert _device_of_padding(source) == "device"
