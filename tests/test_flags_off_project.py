"""A finding behind a flag on by default (a parameter, or a constructor's parameter an attribute
holds) is low where every call in the project passes it a literal false, a test function's calls
aside, and keeps its tier where a call leaves it on or passes a value the run chooses
(fixtures/projects/flags_off: encodec's `build_stable_quantized_cdf(..., check=False)`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, copied_project, findings_by_line, project_findings

SELECT = ("TL101", "TL110")


def _copy(tmp_path: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    return copied_project("flags_off", tmp_path, edits)


def test_flags_off_project_markers_and_impacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("flags_off", tmp_path, monkeypatch)
    findings = project_findings(root, SELECT)
    assert_markers_hold(root, findings)
    found = {(Path(f.path).as_posix(), f.line): f for f in findings}
    assert "every call of `stable_cdf()` in the project leaves it off" in found[("coder/cdf.py", 13)].impact_reason  # type: ignore[attr-defined]
    assert "every call of `Padder()` in the project leaves it off" in found[("coder/cdf.py", 44)].impact_reason  # type: ignore[attr-defined]
    assert "only when `schedule == 'linear'`, and no call of `Solver()` in the project passes such a value" in found[("coder/solver.py", 15)].impact_reason  # type: ignore[attr-defined]
    assert "only when `method == 'singlestep'`, and no call of `Solver.sample()`" in found[("coder/solver.py", 31)].impact_reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(("edit", "line", "impact"), [
    (("sample.py", ('schedule="discrete"', 'schedule="linear"')), 15, "medium"),
    (("sample.py", ('Solver(model, schedule="discrete")', 'Solver(model)')), 15, "medium"),  # its default takes the branch
    (("sample.py", ('method="multistep"', 'method="singlestep"')), 31, "medium"),
    (("sample.py", ('method="multistep"', "method=method")), 31, "medium"),
    # a subclass in the project may pass another value up, or call it itself
    (("coder/solver.py", ("class Chosen:", "class Chosen(Solver):")), 31, "medium"),
])
def test_strings_every_call_passes_decide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    found = findings_by_line(_copy(tmp_path, {name: change}), monkeypatch, SELECT)
    assert found[("coder/solver.py", line)].impact == impact, found[("coder/solver.py", line)].impact_reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(("edit", "line", "impact"), [
    # a call of the run that turns the check on (a literal true, or its default)
    (("compress.py", ("stable_cdf(probs[k], 24, check=False)", "stable_cdf(probs[k], 24, check=True)")), 13, "high"),
    (("compress.py", ("stable_cdf(probs[k], 24, check=False)", "stable_cdf(probs[k], 24)")), 13, "high"),
    (("compress.py", ("stable_cdf(probs[k], 24, check=False)", "stable_cdf(probs[k], 24, careful)")), 13, "high"),
    (("compress.py", ("Padder(add_zero=False)", "Padder()")), 44, "medium"),
    # off by default: left out is off, a literal true turns it on
    (("compress.py", ("ZeroAttention()", "ZeroAttention(add_zero_attn=True)")), 58, "medium"),
    (("compress.py", ("ZeroAttention()", "ZeroAttention(add_zero_attn=True)")), 60, "medium"),  # (TL110: placed in its file, raised by the join)
    # the check off by position
    (("compress.py", ("stable_cdf(probs[k], 24, check=False)", "stable_cdf(probs[k], 24, False)")), 13, "low"),
    # a test function by another name is a caller of the run: its default turns the check on
    (("coder/cdf.py", ("def test():", "def smoke():")), 13, "high"),
    (("coder/cdf.py", ("def test():", "def test_cdf():")), 13, "low"),
    # a `test()` the run calls (an evaluation after each epoch, MNIST's) is no test
    (("coder/cdf.py", ('if __name__ == "__main__":\n    test()', "def evaluate():\n    for _ in range(3):\n        test()")), 13, "high"),
    # set on an object after it is built (in its class's file, as Guards.switch_of sees it): no longer only what the construction passed
    (("coder/cdf.py", ("def test():", "def make_careful(pad):\n    pad.add_zero = True\n\n\ndef test():")), 44, "medium"),
])
def test_what_every_call_passes_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    found = findings_by_line(_copy(tmp_path, {name: change}), monkeypatch, SELECT)
    assert found[("coder/cdf.py", line)].impact == impact, found[("coder/cdf.py", line)].impact_reason  # type: ignore[attr-defined]

