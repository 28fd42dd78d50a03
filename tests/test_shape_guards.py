"""A test of a tensor's rank or shape against a number picks a kind of input, not a step
(issue 32, kospeech's `if len(labels.shape) == 1:`); a step number or a fill level still does."""

import libcst as cst
import pytest

from torchlint.analysis.guard_shapes import is_counter, is_rare_test, shape_read
from torchlint.analysis.tree import Tree


def _test(code: str) -> tuple[cst.BaseExpression, Tree]:
    module = cst.parse_module(f"if {code}:\n    pass\n")
    return module.body[0].test, Tree(module)  # type: ignore[attr-defined]


@pytest.mark.parametrize("code", ["len(labels.shape) == 1", "len(x.size()) == 2", "x.dim() == 1", "x.ndim == 3",
                                  "x.ndimension() == 4", "x.shape[0] == 1", "x.size(0) == 1", "1 == x.dim()"])
def test_a_shape_against_a_number_is_no_rare_test(code: str) -> None:
    test, tree = _test(code)
    assert not is_rare_test(test, tree.descendants)


@pytest.mark.parametrize("code", ["step == 0", "len(buffer) == 1", "i == 3", "step % 100 == 0", "len(history) < 10"])
def test_a_step_or_a_fill_level_against_a_number_stays_rare(code: str) -> None:
    test, tree = _test(code)
    assert is_rare_test(test, tree.descendants)


def test_a_rank_is_no_counter_and_a_length_is() -> None:
    assert shape_read(cst.parse_expression("len(x.shape)")) and not is_counter(cst.parse_expression("len(x.shape)"))
    assert is_counter(cst.parse_expression("len(buffer)")) and not shape_read(cst.parse_expression("len(buffer)"))


def test_the_branch_a_rank_test_picks_reads_per_element_as_the_other_branch_does() -> None:
    """kospeech's `label_to_string`: the 1-D branch's first read per token is tiered as the 2-D branch's
    first read, and counted per element of the row it walks."""
    from pathlib import Path

    from torchlint.config import from_table
    from torchlint.engine import lint_source

    root = Path(__file__).resolve().parent.parent
    text = (root / "fixtures" / "rules" / "TL101" / "flagged_shape_branch.py").read_text()
    found = {f.line: f for f in lint_source(text, "train.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))}
    one_d, two_d = found[19], found[30]
    assert one_d.impact == two_d.impact == "high"
    assert "per element per iteration per step" in one_d.message
