"""A name bound to one function in each branch, then called (VITS' ``spline_fn = rational_quadratic_spline``
under ``if tails is None:``, ``unconstrained_rational_quadratic_spline`` in its ``else``; ``fn = a if fused
else b``): the call runs each function so bound, and a function picked only in a branch no call of the
project takes is followed no further than low (analysis/branch_functions.py; fixtures/projects/spline_flows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.function_values import valued_functions
from torchlint.config import from_table
from torchlint.engine import lint_source
from torchlint.engine.parse import parse_module


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("spline_flows", tmp_path, monkeypatch)


def _by_line(project: Path) -> dict[int, object]:
    return {f.line: f for f in project_findings(project) if f.path.endswith("warps.py")}


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_range_check_runs_in_each_coupling_of_the_stack(project: Path) -> None:
    check = _by_line(project)[27]
    assert check.code == "TL101" and check.impact == "high"
    assert "once in each `SplineCoupling.forward()`" in check.message


def test_a_function_no_call_picks_is_low_and_says_why(project: Path) -> None:
    unpicked = _by_line(project)[43]
    assert unpicked.impact == "low"
    assert "only that branch picks the function it calls" in unpicked.impact_reason and "`fused`" in unpicked.impact_reason


def test_a_call_that_takes_the_other_branch_makes_it_run(project: Path) -> None:
    layers = project / "layers.py"
    layers.write_text(layers.read_text().replace("h.mean(1, keepdim=True))", "h.mean(1, keepdim=True), fused=False)"))
    unpicked = _by_line(project)[43]
    assert unpicked.impact == "high" and "once in each `SplineCoupling.forward()`" in unpicked.message


def test_the_else_of_an_identity_test_is_followed_only_where_a_call_passes_a_value(project: Path) -> None:
    # every call passes `tails`: the `is None` arm is off; the function it names is still reached through the other
    layers = project / "layers.py"
    warps = project / "warps.py"
    warps.write_text(warps.read_text().replace("inner = bounded_warp(inputs=inputs.clamp(-bound, bound), params=params, low=-bound, high=bound)",
                                               "inner = inputs.clamp(-bound, bound) * params.sum(1, keepdim=True)"))
    assert _by_line(project)[27].impact == "low"
    layers.write_text(layers.read_text().replace('warp(x1, h, tails="linear", bound=self.bound)', "warp(x1, h)"))
    assert _by_line(project)[27].impact == "high"


SINGLE = """import torch

def quick(x):
    return x * 2

def careful(x):
    if torch.isnan(x).any():  # careful
        raise ValueError("nan")
    return x

def train(model, loader, opt, strict):
    for x in loader:
        step_fn = careful if strict else quick
        loss = step_fn(model(x.cuda())).sum()
        loss.backward()
        opt.step()
"""


def test_a_conditional_expression_in_the_loop_s_own_file_runs_either() -> None:
    found = lint_source(SINGLE, "t.py", from_table({"select": ["TL101", "TL104"], "min-impact": "low"}, Path(".")))
    assert [f.line for f in found] == [7]


def test_a_function_bound_to_a_name_the_file_only_calls_is_no_value_handed_on() -> None:
    text = SINGLE + "\ndef hand_on(x, strict):\n    chosen = careful if strict else quick\n    return list(map(chosen, x))\n"
    assert "quick" not in valued_functions(FileContext(parse_module(SINGLE), "t.py"))
    assert {"quick", "careful"} <= set(valued_functions(FileContext(parse_module(text), "t.py")))


def test_a_mask_joined_from_two_comparisons_gathers_with_a_wait_per_member(project: Path) -> None:
    # (`inside = (inputs >= -bound) & (inputs <= bound)`, then `params[inside, :]`: a mask, though `inputs` is of no known kind)
    gather = _by_line(project)[19]
    assert gather.code == "TL101" and gather.impact == "high" and "`params[inside, :]`" in gather.message


def test_a_number_written_through_the_joined_mask_is_no_gather(project: Path) -> None:
    warps = project / "warps.py"
    warps.write_text(warps.read_text().replace("    weights = params[inside, :]  # expect: TL101 (high)\n", "    weights = params\n"))
    assert 19 not in _by_line(project) and 21 not in _by_line(project)
