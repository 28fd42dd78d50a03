"""A loop over a function's own ``**kwargs`` runs once per keyword its callers pass it by no name:
the join counts them (the largest over the calls it resolves; ``CallSite.given``). One or two keywords
read right after the step's synchronize are a few reads, low; five are five copies per step, medium;
a call passing ``**metrics`` may pass any number, and the loop stays "per iteration" (ConvNeXt's
``MetricLogger.update(**kwargs)`` after ``torch.cuda.synchronize()``, issue 32;
fixtures/projects/keywordloops)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, copied_project, findings_by_line, project_findings

from torchlint.analysis.multiplicity import Repeat, keywords_counted

SELECT = ("TL101", "TL103")


def test_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("keywordloops", tmp_path, monkeypatch)
    assert_markers_hold(root, project_findings(root, SELECT))


def test_the_counts_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = findings_by_line(copied_project("keywordloops", tmp_path), monkeypatch, SELECT)
    assert "right after a sync" in found[("meters.py", 12)].impact_reason
    assert found[("meters.py", 24)].message.endswith("on every step")  # one keyword: once per call, no loop
    assert "5 times per step" in found[("meters.py", 36)].message
    assert "per iteration per step" in found[("meters.py", 48)].message


@pytest.mark.parametrize(("edit", "line", "impact"), [
    # a third keyword: past a few, each a copy of its own
    (("train.py", ("logger.update(acc=acc, loss=loss)", "logger.update(acc=acc, loss=loss, err=1 - acc)")), 12, "medium"),
    # one more call anywhere in the project passing `**` may pass any number
    (("train.py", ("logger.update(acc=acc, loss=loss)", "logger.update(acc=acc, loss=loss)\n        logger.update(**{'a': acc})")), 12, "medium"),
    # `head` no longer taken by name: two keywords reach `kwargs`, still a few
    (("meters.py", ('def update(self, head="scalar", **kwargs):', "def update(self, **kwargs):\n        head = kwargs.pop('head', 'scalar')")), 25, "low"),
    # `**metrics` of a dict whose two keys the file shows (splat_keys): a few reads right after the synchronize
    (("train.py", ("{name: fn(out, y) for name, fn in metric_fns.items()}", '{"loss": loss, "acc": (out.argmax(-1) == y).float().mean()}')), 48, "low"),
])
def test_what_the_calls_pass_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    found = findings_by_line(copied_project("keywordloops", tmp_path, {name: change}), monkeypatch, "TL101")
    assert found[("meters.py", line)].impact == impact, found[("meters.py", line)].impact_reason


def test_a_kwargs_rebound_is_no_longer_counted_by_the_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kwargs = dict(kwargs, ...)`` before the loop: what it holds is not only what the calls passed."""
    root = copied_project("keywordloops", tmp_path, {"meters.py": (
        '        """Its one call passes two keywords: a few reads right after the step\'s synchronize."""\n',
        "        kwargs = dict(kwargs, epoch=torch.zeros(()))\n")})
    found = findings_by_line(root, monkeypatch, "TL101")
    assert found[("meters.py", 12)].impact == "medium" and "per iteration per step" in found[("meters.py", 12)].message


def test_keywords_counted() -> None:
    loop = ("f#loop0", Repeat("iteration", copies=True, keywords=True))
    other = ("f#loop1", Repeat("batch row", copies=True))
    assert keywords_counted((loop, other), None) == (loop, other)
    assert keywords_counted((loop, other), 1) == (other,)
    assert keywords_counted((loop,), 0) == ()
    assert keywords_counted((loop,), 2) == (("f#loop0", Repeat("iteration", 2, few=True, keywords=True)),)
    assert keywords_counted((loop,), 3) == (("f#loop0", Repeat("iteration", 3, copies=True, keywords=True)),)
    heavy = ("f#loop0", Repeat("iteration", keywords=True))  # a body that queues work: each keyword waits again
    assert keywords_counted((heavy,), 2) == (("f#loop0", Repeat("iteration", 2, keywords=True)),)
