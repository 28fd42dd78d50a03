"""A value bound under one mode test never reaches a use under the contradicting test (issue 32,
descript-audio-codec's `n_quantizers`, dac1): `Bindings.other_mode`, as `values.kind` and the reads see it."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext
from torchlint.analysis.kinds import Kind

SOURCE = '''
import torch

class Q(torch.nn.Module):
    def forward(self, z, n=None, use_mask=False):
        if n is None:
            n = 8
        if {bound_test}:
            n = torch.ones(3).to(z.device)
        if {use_test}:
            return n
'''


def _kind_at_use(bound_test: str, use_test: str) -> Kind:
    ctx = FileContext(cst.parse_module(SOURCE.format(bound_test=bound_test, use_test=use_test)), "m.py")
    use = [n for n in ctx.tree.nodes(cst.Name) if n.value == "n"][-1]
    return ctx.values.kind(use, use)


@pytest.mark.parametrize(("bound_test", "use_test"), [
    ("self.training", "self.training is False"),
    ("self.training", "not self.training"),
    ("self.training", "self.training == False and z is not None"),
    ("not self.training", "self.training is not False"),
    ("use_mask", "not use_mask"),
])
def test_a_binding_in_the_other_mode_never_reaches_the_use(bound_test: str, use_test: str) -> None:
    assert _kind_at_use(bound_test, use_test) is Kind.HOST


@pytest.mark.parametrize(("bound_test", "use_test"), [
    ("self.training", "self.training"),
    ("self.training", "z is None"),  # no mode test at the use: either binding may reach it
    ("self.training and z is None", "not (self.training and z is None)"),  # a false `and` says nothing of one side
    ("self.mode", "not self.mode"),  # another attribute may change between the two
])
def test_a_binding_in_the_same_or_an_unknown_mode_still_reaches(bound_test: str, use_test: str) -> None:
    assert _kind_at_use(bound_test, use_test) is Kind.TENSOR
