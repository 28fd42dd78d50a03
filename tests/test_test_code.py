"""Test code is not a training run: rules stay quiet in a test suite's files and in
unittest ``Test…`` classes, except the rules whose finding holds there too (TL502)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, expected_markers
from test_rule_fixtures import _config, fixture_findings
from torchlint.checks import all_checks
from torchlint.engine import lint_source

FLAGGED = sorted(
    p for p in (FIXTURES / "rules").glob("TL*/flagged*.py") if expected_markers(p.read_text(encoding="utf-8"))
)
APPLIES_TO_TESTS = {c.code for c in all_checks() if c.applies_to_tests}
# TL001, a `# noqa` code that suppresses nothing, is the engine's, and as true in a test.
ENGINE_RULES_IN_TESTS = {"TL001"}


def test_only_deprecated_apis_are_reported_in_tests() -> None:
    assert APPLIES_TO_TESTS == {"TL502"}


@pytest.mark.parametrize("path", FLAGGED, ids=lambda p: f"{p.parent.name}/{p.stem}")
@pytest.mark.parametrize("where", ["tests/{name}", "pkg/{stem}_test.py"])
def test_a_flagged_fixture_moved_into_a_test_suite(path, where: str) -> None:
    code, text = path.parent.name, path.read_text(encoding="utf-8")
    as_written = fixture_findings(path)  # the same for both places: made once
    assert as_written, "the fixture fires where it is"
    moved = lint_source(text, where.format(name=path.name, stem=path.stem), _config(code, text))
    if code in APPLIES_TO_TESTS | ENGINE_RULES_IN_TESTS:
        assert [(f.line, f.code) for f in moved if f.code == code] == [(f.line, f.code) for f in as_written if f.code == code]
    else:
        assert moved == []


EVALUATION = '''
import torch
import unittest


class {cls}(unittest.TestCase):
    def test_forward(self):
        model = torch.nn.Linear(4, 4).cuda()
        model.eval()
        out = model(torch.zeros(2, 4).cuda())
        self.assertEqual(out.shape, (2, 4))
'''


def test_a_unittest_class_in_any_file_is_test_code() -> None:
    config = _config("ALL", "")
    flagged = {f.code for f in lint_source(EVALUATION.format(cls="Checker"), "pkg/check.py", config)}
    assert {"TL110", "TL301"} <= flagged  # the same code outside a Test class
    assert lint_source(EVALUATION.format(cls="TestLinear"), "pkg/check.py", config) == []
