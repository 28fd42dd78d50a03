"""Test code is not a training run: rules stay quiet in a test suite's files and in
unittest ``Test…`` classes, except the rules whose finding holds there too (TL502)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, LOOP_WITH_FINDINGS, expected_markers
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


# Where a fixture is moved: a test suite's folder, or a test module's name. Whether a file is
# test code (``FileContext.is_test_file``) is a question of its path alone, one answer for every
# rule (test_what_a_test_file_is below asks it of both shapes and their near misses): each
# fixture is moved to one of the two in turn, not linted twice to show the same answer.
PLACES = ["tests/{name}", "pkg/{stem}_test.py"]


@pytest.mark.parametrize(("path", "where"), [(p, PLACES[i % len(PLACES)]) for i, p in enumerate(FLAGGED)],
                         ids=lambda v: f"{v.parent.name}/{v.stem}" if isinstance(v, Path) else v.split("/")[0])
def test_a_flagged_fixture_moved_into_a_test_suite(path, where: str) -> None:
    code, text = path.parent.name, path.read_text(encoding="utf-8")
    as_written = fixture_findings(path)  # made once a session (test_rule_fixtures' too)
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


@pytest.mark.parametrize(("path", "is_test"), [
    ("tests/train.py", True), ("pkg/tests/unit/train.py", True), ("test/train.py", True),
    ("pkg/train_test.py", True), ("test_train.py", True), ("pkg/conftest.py", True),
    # near misses: a folder or a name that only contains the word
    ("testing/train.py", False), ("my_tests/train.py", False), ("pkg/latest.py", False),
    ("pkg/train_tests.py", False), ("pkg/contest.py", False), ("pkg/attest_train.py", False),
])
def test_what_a_test_file_is(path: str, is_test: bool) -> None:
    """The path alone decides: the same loop is flagged in a training file, quiet in a test
    suite's (it holds none of the rules that apply there, TL502's deprecated APIs)."""
    codes = {f.code for f in lint_source(LOOP_WITH_FINDINGS, path, _config("ALL", LOOP_WITH_FINDINGS))}
    assert (codes == set()) if is_test else ({"TL101", "TL303"} <= codes), codes
