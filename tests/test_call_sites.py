"""A change that makes an unchanged file slow is reported where the change is.

helper.py's `acc()` reads `.item()` and was committed long ago; train.py now calls it every
step. pre-commit (`check train.py`), stdin (`--stdin-filename train.py`) and the editor see
only train.py: the helper's per-step finding is reported on train.py's call, the helper's
line its related location. `check .` reports the helper's line alone (no duplicate)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from conftest import run_check

from torchlint.cli import main

HELPER = "def acc(x):\n    return x.item()\n\n\ndef twice(x):\n    return x.item() + x.sum().item()\n"
TRAIN = (
    "import torch\nfrom helper import acc\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
    "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n    a = acc(out){noqa}\n"
)
CALL_LINE = 10


def _project(root: Path, train: str = TRAIN.format(noqa=""), helper: str = HELPER) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "helper.py").write_text(helper)
    (root / "train.py").write_text(train)
    return root


def _json(root: Path, *args: str) -> tuple[int, list[dict]]:
    code, out, err = run_check(root, "--output-format", "json", *args)
    assert code in (0, 1), err
    return code, json.loads(out)


def test_the_callers_file_alone_reports_the_helper_line_at_its_call(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, found = _json(root, "train.py")
    assert code == 1
    (finding,) = found
    assert (finding["path"], finding["line"], finding["column"], finding["code"]) == ("train.py", CALL_LINE, 9, "TL101")
    # one read at the step's end (after opt.step()): medium, as the helper's own line would be
    assert "helper.py:2" in finding["message"] and finding["impact"] == "medium"
    assert [(r["path"], r["line"]) for r in finding["related"]] == [("helper.py", 2)]


def test_sarif_carries_the_helper_line_as_a_related_location(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, out, _ = run_check(root, "--output-format", "sarif", "train.py")
    (result,) = json.loads(out)["runs"][0]["results"]
    assert code == 1 and result["ruleId"] == "TL101"
    related = result["relatedLocations"]
    assert any(r["physicalLocation"]["artifactLocation"]["uri"].endswith("helper.py") and r["physicalLocation"]["region"]["startLine"] == 2
               for r in related), related


def test_no_duplicate_when_the_helper_is_given_too(tmp_path: Path) -> None:
    root = _project(tmp_path)
    for args in ((".",), ("train.py", "helper.py")):
        _, found = _json(root, *args)
        assert [(f["path"], f["line"]) for f in found] == [("helper.py", 2)], args


def test_near_misses_report_nothing_at_the_call(tmp_path: Path) -> None:
    once, quiet, ignored = (tmp_path / name for name in ("once", "quiet", "ignored"))
    for root in (once, quiet, ignored):
        root.mkdir()
    # Called once, after the loop: the helper runs once, in no step.
    after_loop = TRAIN.format(noqa="").replace("    a = acc(out)\n", "") + "a = acc(out)\n"
    assert _json(_project(once, after_loop), "train.py") == (0, [])
    # The helper's own line says its sync is wanted: the call site agrees.
    wanted = HELPER.replace("return x.item()\n", "return x.item()  # noqa: TL101\n", 1)
    assert _json(_project(quiet, helper=wanted), "train.py") == (0, [])
    # The caller's selection applies to what is reported in its file.
    assert _json(_project(ignored), "--ignore", "TL101", "train.py") == (0, [])


def test_one_finding_per_rule_and_call_naming_every_helper_line(tmp_path: Path) -> None:
    root = _project(tmp_path, TRAIN.format(noqa="").replace("from helper import acc", "from helper import twice as acc"))
    _, found = _json(root, "train.py")
    (finding,) = found
    assert finding["line"] == CALL_LINE and "helper.py:6" in finding["message"]
    assert [(r["path"], r["line"]) for r in finding["related"]] == [("helper.py", 6)]


def test_a_noqa_at_the_call_suppresses_it_and_is_no_unused_noqa(tmp_path: Path) -> None:
    root = _project(tmp_path, TRAIN.format(noqa="  # noqa: TL101"))
    assert _json(root, "--select", "TL101,TL001", "train.py") == (0, [])
    # Near miss: a code that suppresses nothing at the call is still TL001.
    (root / "train.py").write_text(TRAIN.format(noqa="  # noqa: TL101, TL102"))
    code, found = _json(root, "--select", "TL101,TL102,TL001", "--min-impact", "low", "train.py")
    assert code == 1 and [(f["code"], f["line"]) for f in found] == [("TL001", CALL_LINE)]
    assert "TL102" in found[0]["message"] and "TL101" not in found[0]["message"]


def test_stdin_under_the_callers_name_reports_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    old = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(main, ["check", "-", "--stdin-filename", "train.py", "--output-format", "json"],
                                    input=TRAIN.format(noqa=""), catch_exceptions=False)
    finally:
        os.chdir(old)
    assert result.exit_code == 1, result.stderr
    (finding,) = json.loads(result.stdout)
    assert (finding["path"], finding["line"], finding["code"]) == ("train.py", CALL_LINE, "TL101")
    assert [(r["path"], r["line"]) for r in finding["related"]] == [("helper.py", 2)]


def test_the_editor_reports_it_on_the_callers_document(tmp_path: Path) -> None:
    from torchlint.server.lint import Projects, lint_text

    root = _project(tmp_path)
    train = root / "train.py"
    projects = Projects()
    others = projects.summaries(train, [], [root.resolve()])  # the workspace folder: the project is read inside it
    linted = lint_text(train.read_text(), train, others, elsewhere=projects.elsewhere(train))
    assert [(f.code, f.line) for f in linted.findings] == [("TL101", CALL_LINE)]
    assert linted.findings[0].related[0].line == 2
