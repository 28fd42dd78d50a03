"""A finding behind a constructor's flag that a call sets from the run's options
(`PairLoss(contrastive_weight=args.contrastive_weight)` in `create_loss(args)`) is low where the
options' parser, in another file, gives a default that fails the test (a float 1.0 against the
`else` of `if self.contrastive_weight:`, argparse's None, a `store_true` flag's False), and keeps its tier
where the default passes it or a file of the project sets the option itself (fixtures/projects/setting_flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, copied_project, project_findings

SELECT = ("TL113",)
LOSSES = "weights/losses.py"


def _impacts(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    monkeypatch.chdir(root)
    return {f.line: f.impact for f in project_findings(root, SELECT) if Path(f.path).as_posix() == LOSSES}


def test_setting_flags_markers_and_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("setting_flags", tmp_path, monkeypatch)
    findings = project_findings(root, SELECT)
    assert_markers_hold(root, findings)
    found = {f.line: f for f in findings if Path(f.path).as_posix() == LOSSES}
    assert "only when `contrastive_weight` is false, and every call of `PairLoss()` in the project leaves it true" in found[19].impact_reason


@pytest.mark.parametrize(("edit", "line", "impact"), [
    # the parser's default passes the test: the branch runs at the defaults
    (("options.py", ('"--contrastive-weight", type=float, default=1.0', '"--contrastive-weight", type=float, default=0.0')), 19, "medium"),
    (("options.py", ('"--hard-negatives", action="store_true"', '"--hard-negatives", type=float, default=0.5')), 22, "medium"),
    (("options.py", ('"--hard-negatives", action="store_true"', '"--hard-negatives", action="store_false"')), 22, "medium"),
    # no default given: argparse's None, which fails a truth test and passes `not`
    (("options.py", ('"--hard-negatives", action="store_true"', '"--hard-negatives", type=float')), 22, "low"),
    (("options.py", ('"--contrastive-weight", type=float, default=1.0', '"--contrastive-weight", type=float')), 19, "medium"),
    # a number that fails the truth test: a term weighted off
    (("options.py", ('"--hard-negatives", action="store_true"', '"--hard-negatives", type=float, default=0.0')), 22, "low"),
    # a file of the project sets the option: no longer the parser's default
    (("train.py", ("    model = torch.nn", "    args.contrastive_weight = args.lr > 0.1\n    model = torch.nn")), 19, "medium"),
    # the option no file sets (the near-miss's edit undone): low
    (("train.py", ("    args.aux_weight = 0.0 if args.lr > 1e-2 else args.aux_weight\n", "")), 28, "low"),
    # a value the caller chooses, not the namespace's setting
    (("weights/build.py", ("contrastive_weight=args.contrastive_weight", "contrastive_weight=args.contrastive_weight * 0.5")), 19, "medium"),
    # a keyword named beside a `**` splat of a local dict: the splat cannot hold it too (open_clip's `CoCaTask(..., **shared)`)
    (("weights/build.py", ("    return PairLoss(", "    shared = {}\n    return PairLoss(**shared,")), 19, "low"),
    # the loss built where torch is imported too (the libcst summary, not the light one): the same answer
    (("weights/build.py", ('"""The loss built', 'import torch\n"""The loss built')), 19, "low"),
])
def test_setting_defaults_decide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    assert _impacts(copied_project("setting_flags", tmp_path, {name: change}), monkeypatch)[line] == impact
