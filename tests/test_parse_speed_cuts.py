"""The cold check's cuts that must change nothing a user sees (issue 34): the parse without
libcst's per-node validation gives the same tree and leaves validation on for every node built
afterwards; the summary places only the calls the join can follow."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.engine.parse import parse_module
from torchlint.findings import Location

_FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "rules").glob("TL1*/*.py"))[:40]


@pytest.mark.parametrize("path", _FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_unvalidated_parse_gives_libcst_s_own_tree(path: Path) -> None:
    text = path.read_text()
    module = parse_module(text)
    assert module.deep_equals(cst.parse_module(text))
    assert module.code == text


def test_nodes_built_after_the_parse_are_validated_again() -> None:
    parse_module("x = (1 + 2)\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")  # an empty name is no identifier
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def (:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")  # (restored on the way out of a failed parse too)


def _summary(source: str):  # type: ignore[no-untyped-def]
    ctx = FileContext(cst.parse_module(source), "m.py")
    summarizer = StepSummarizer(ctx)
    summarizer.hot_call_nodes(located=True)
    return summarizer.summary("m.py", lambda node: Location("m.py", 1, 1))


def test_a_local_class_s_construction_is_not_placed_a_local_function_s_call_is() -> None:
    summary = _summary(
        "import torch\n\nclass Block(torch.nn.Module):\n    pass\n\ndef helper(x):\n    return x\n\n"
        "def run(xs):\n    for x in xs:\n        for i in range(3):\n            helper(x)\n            Block()\n        x.sum()\n")
    sites = {call.target: call for call in summary.calls if call.caller == "run"}
    # the join never follows `("local", "Block")` (no function of the file has that key): its place is never read
    assert (sites[("local", "Block")].repeats, sites[("local", "Block")].position) == ((), None)
    assert [key for key, _ in sites[("local", "helper")].repeats] == ["run#loop0", "run#loop1"]  # (which is the step: the join)
    assert sites[("local", "helper")].position is not None
