"""A plain class's ``__call__`` whose every call the join resolves sits behind a switch of the run
off by default runs only on that opt-in path, and so does what it calls: ConvNeXt's
``get_grad_norm_``, reached through ``NativeScalerWithGradNormCount.__call__`` only ``if use_amp:``
(``--use_amp`` a ``str2bool`` option, default False), is low (issue 32;
fixtures/projects/calledoff). Not where the run's default turns it on, a call of the object is made
outside the switch, an object of the class is handed to a call of the project the join cannot resolve,
or the class has a base that may call it. (A library's call records no arguments, ``StepSummarizer._call_site``:
an object handed only to one is not seen; a class with such a use has most often no resolved call at all.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, copied_project, findings_by_line, project_findings

SELECT = ("TL311",)


def test_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("calledoff", tmp_path, monkeypatch)
    findings = project_findings(root, SELECT)
    assert_markers_hold(root, findings)
    assert "`train_one_epoch()` runs it only with `use_amp=True`, off by default" in findings[0].impact_reason


@pytest.mark.parametrize("edit", [
    # the run's default turns the switch on
    ("train.py", ('"--use_amp", type=str2bool, default=False', '"--use_amp", type=str2bool, default=True')),
    # the scaler is also called where its switch is not tested
    ("train.py", ("        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n        scaler(loss, optimizer)\n")),
    # an object of the class handed to a function the join cannot follow, which may call it (`keep = _KEPT.append`)
    ("train.py", ("    scaler = GradScalerWithNorm()\n", "    scaler = GradScalerWithNorm()\n    hooks.keep(scaler)\n")),
    # a base that may call it by its own design
    ("scaler.py", ("class GradScalerWithNorm:", "class GradScalerWithNorm(abc.ABC):")),
])
def test_the_opt_in_path_needs_every_call_behind_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit) -> None:  # type: ignore[no-untyped-def]
    name, (old, new) = edit
    root = copied_project("calledoff", tmp_path, {name: (old, new)})
    for file, module in (("train.py", "hooks"), ("scaler.py", "abc")):
        (root / file).write_text(f"import {module}\n" + (root / file).read_text())
    (root / "hooks.py").write_text("_KEPT = []\nkeep = _KEPT.append\n\n\ndef run_all():\n    for f in _KEPT:\n        f()\n")
    assert findings_by_line(root, monkeypatch, SELECT)[("scaler.py", 25)].impact == "medium"
