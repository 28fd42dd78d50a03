"""``HiddenSyncs.condition_runs``: where a test of a parameter runs in no step, no caller's tensors
make ``condition_read`` true, so TL101 and TL104 ask no ``device_parameters`` there (issue 34)."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext, Options

_SAMPLER = """\
import torch

def sample(model, x, sigmas):
    for i in range(len(sigmas) - 1):
        x = model(x, sigmas[i])
        if sigmas[i + 1] == 0:
            x = x.clamp(-1, 1)
    return x
"""
_RARE = """\
import torch

def sample(model, x, sigmas):
    for i in range(len(sigmas) - 1):
        x = model(x, sigmas[i])
        if i % 100 == 0:
            if sigmas[i + 1] == 0:
                print("last")
    return x
"""
_MODULE = """\
import torch

sigmas = torch.linspace(1, 0, 10).cuda()
if sigmas[1] == 0:
    print("one step")
"""


def _asked(code: str) -> tuple[bool, bool, tuple[str, ...]]:
    ctx = FileContext(cst.parse_module(code), "sampler.py", Options())
    statement = next(s for s in ctx.tree.nodes(cst.If) if type(s.test) is cst.Comparison and "sigmas" in ctx.module.code_for_node(s.test))
    syncs = ctx.syncs
    return (syncs.condition_runs(statement, statement.test), syncs.condition_read(statement, statement.test),
            syncs.device_parameters(statement.test, lambda: syncs.condition_read(statement, statement.test)))


def test_a_parameter_tested_in_the_loop_waits_for_the_callers() -> None:
    # (the function runs where its callers call it: per step, maybe; what they pass decides)
    assert _asked(_SAMPLER) == (True, False, ("sigmas",))


@pytest.mark.parametrize("code", [_RARE, _MODULE], ids=["rare guard", "module level, no loop"])
def test_a_test_that_runs_in_no_step_has_no_device_parameters(code: str) -> None:
    runs, read, params = _asked(code)
    assert not runs and not read
    assert params == ()  # what the cut relies on: condition_runs False, and device_parameters finds none
