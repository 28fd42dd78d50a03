"""Every --output-format on the same findings: full, concise, json, json-lines, SARIF
(validated against the official 2.1.0 schema), github (parsed back), gitlab, junit; and
-o, --color, NO_COLOR and FORCE_COLOR."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, LOOP_WITH_FINDINGS, run_check
from torchlint import catalogue
from torchlint.cli import main
from torchlint.report.color import use_color

BAD = LOOP_WITH_FINDINGS
NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training, 100% of it: a,b"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": ["import torch\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": BAD.splitlines(keepends=True)[2:]},
    ],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
}


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", *args], catch_exceptions=False, env=env)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(BAD)
    (tmp_path / "notebook.ipynb").write_text(json.dumps(NOTEBOOK, indent=1))
    return tmp_path


def test_full_is_the_default_with_source_carets_impact_and_help(project: Path) -> None:
    code, out, _ = run(project, "src/train.py")
    assert code == 1
    block = out.split("\n\n")[0]  # TL101, medium (one wait per step): TL303 (a memset per step) is low, not shown
    assert block.splitlines() == [
        "src/train.py:7:11: TL101 `loss.item()` in a training loop makes the host wait for the device on every step",
        "  |",
        "5 |     loss.backward()",
        "6 |     opt.zero_grad(set_to_none=False)",
        "7 |     print(loss.item())",
        "  |           ^^^^^^^^^^^ TL101",
        "8 |     opt.step()",
        "  |",
        "  = impact: medium (a host-device sync that stalls the GPU pipeline, every step of a training loop, once per step, mid-step: the kernels after it wait for the host, one pipeline refill per step)",
        "  = help: Accumulate with `.detach()` on the device and read the value once after the loop (or every N steps)",
    ]
    assert out.rstrip().splitlines()[-2:] == [
        "Found 1 problem (1 medium) in 1 file (1 checked).",
        "1 low-impact finding not shown (`--min-impact low` shows it).",
    ]


def test_min_impact_low_shows_every_finding_highest_first(project: Path) -> None:
    code, out, _ = run(project, "src/train.py", "--min-impact", "low")
    assert code == 1
    blocks = out.split("\n\n")
    assert blocks[0].startswith("src/train.py:7:11: TL101") and blocks[1].startswith("src/train.py:6:5: TL303 [*]")
    assert "  = impact: low (a little extra work (a memset, a bias add, autograd bookkeeping), every step of a training loop)" in blocks[1]
    assert out.rstrip().endswith("Found 2 problems (1 medium, 1 low) in 1 file (1 checked).\n1 fixable with `--fix` (marked [*]).")


def test_only_low_impact_findings_exit_0_and_say_so(project: Path) -> None:
    (project / "cheap.py").write_text("import torch\nopt = torch.optim.SGD(params, lr=0.1)\nopt.zero_grad(set_to_none=False)\n")
    code, out, _ = run(project, "cheap.py")
    assert code == 0  # the exit status follows what is shown: pre-commit and CI pass
    assert out.splitlines() == ["No high- or medium-impact problems found in 1 file.",
                                "1 low-impact finding not shown (`--min-impact low` shows it)."]
    # What was left out says which tiers are empty: no medium one was hidden, so none is there.
    assert run(project, "cheap.py", "--min-impact", "high")[1].splitlines()[0] == "No high- or medium-impact problems found in 1 file."
    (project / "pyproject.toml").write_text('[tool.torchlint]\nmin-impact = "low"\n')
    assert run(project, "cheap.py")[0] == 1  # the config key does what the option does
    assert run(project, "cheap.py", "--min-impact", "high")[0] == 0


def test_full_shows_notebook_cells_lines(project: Path) -> None:
    _, out, _ = run(project, "notebook.ipynb", "--select", "TL101")
    assert "notebook.ipynb:cell 3:5:11: TL101" in out
    assert "5 |     print(loss.item())" in out and "  |           ^^^^^^^^^^^ TL101" in out


def test_concise_is_one_line_per_finding(project: Path) -> None:
    code, out, _ = run(project, "src/train.py", "--output-format", "concise", "--min-impact", "low")
    assert code == 1
    lines = out.splitlines()
    assert lines[:2] == [  # by impact, then by place
        "src/train.py:7:11: TL101 `loss.item()` in a training loop makes the host wait for the device on every step",
        "src/train.py:6:5: TL303 [*] `opt.zero_grad(set_to_none=False)` writes zeros into every gradient instead of releasing it",
    ]
    assert lines[2] == "" and lines[3].startswith("Found 2 problems (1 medium, 1 low)")


def test_json_keeps_its_fields_and_adds_url_schema_version_and_impact(project: Path) -> None:
    _, out, _ = run(project, "src/train.py", "--output-format", "json", "--min-impact", "low")
    findings = json.loads(out)
    assert [f["code"] for f in findings] == ["TL303", "TL101"]  # machine formats keep the file order
    first = findings[0]
    assert {"path", "line", "column", "end_line", "end_column", "cell", "code", "name", "message", "fix_hint", "fixable", "fix_safety", "related", "impact", "impact_reason"} <= set(first)
    assert first["schema_version"] == 2
    assert first["url"].endswith("/rules/TL303-zero-grad-memset.md")
    assert first["url"].startswith("https://")
    assert [(f["impact"], ", every step of a training loop" in f["impact_reason"]) for f in findings] == [("low", True), ("medium", True)]
    assert [f["code"] for f in json.loads(run(project, "src/train.py", "--output-format", "json")[1])] == ["TL101"]


def test_json_lines_is_one_object_per_line(project: Path) -> None:
    _, out, _ = run(project, "src/train.py", "--output-format", "json-lines", "--min-impact", "low")
    lines = out.splitlines()
    assert len(lines) == 2
    assert [(json.loads(line)["line"], json.loads(line)["impact"]) for line in lines] == [(6, "low"), (7, "medium")]


def _sarif(project: Path, *paths: str) -> dict:
    code, out, _ = run(project, *paths, "--output-format", "sarif")
    assert code == 1
    return json.loads(out)


def test_sarif_validates_against_the_official_schema(project: Path) -> None:
    log = _sarif(project, "src/train.py", "notebook.ipynb")
    schema = json.loads((FIXTURES / "schemas" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(log)
    assert log["version"] == "2.1.0"


def test_sarif_describes_every_rule_and_points_at_repo_relative_regions(project: Path) -> None:
    run_ = _sarif(project, "src/train.py", "notebook.ipynb")["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in catalogue.rules()]
    for rule in rules:
        assert rule["name"] and rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["helpUri"].endswith(f"{rule['id']}-{rule['name']}.md")
        assert rule["defaultConfiguration"]["level"] in ("warning", "error")
    tl101 = next(r for r in rules if r["id"] == "TL101")
    assert tl101["fullDescription"]["text"].startswith("Flags `.item()` and `.tolist()` on a tensor inside a hot loop.")
    results = {(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]): r for r in run_["results"]}
    script = results[("TL101", "src/train.py")]
    assert script["locations"][0]["physicalLocation"]["region"] == {"startLine": 7, "startColumn": 11, "endLine": 7, "endColumn": 22}
    assert rules[script["ruleIndex"]]["id"] == "TL101"
    notebook = results[("TL101", "notebook.ipynb")]
    assert notebook["message"]["text"].startswith("cell 3, line 5, column 11: `loss.item()`")


def test_sarif_uris_are_relative_to_the_cwd_from_a_subfolder_too(project: Path) -> None:
    run_ = _sarif(project / "src", "train.py")["runs"][0]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run_["results"]} == {"train.py"}


_COMMAND = re.compile(r"^::(?P<level>warning|error) (?P<props>[^:]*)::(?P<message>.*)$")


def _unescape(value: str) -> str:
    return value.replace("%0A", "\n").replace("%0D", "\r").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def test_github_annotations_parse_back(project: Path) -> None:
    (project / "odd, name: 100%.py").write_text(BAD)
    _, out, _ = run(project, "odd, name: 100%.py", "notebook.ipynb", "--output-format", "github", "--select", "TL101")
    parsed = []
    for line in out.splitlines():
        match = _COMMAND.match(line)
        assert match, line
        props = dict(pair.split("=", 1) for pair in match.group("props").split(","))
        parsed.append(({k: _unescape(v) for k, v in props.items()}, _unescape(match.group("message"))))
    by_file = {props["file"]: (props, message) for props, message in parsed}
    props, message = by_file["odd, name: 100%.py"]
    assert props == {"file": "odd, name: 100%.py", "line": "7", "col": "11", "endLine": "7", "endColumn": "22", "title": "TL101 scalar-sync-in-loop"}
    assert message.splitlines() == [
        "`loss.item()` in a training loop makes the host wait for the device on every step",
        "help: Accumulate with `.detach()` on the device and read the value once after the loop (or every N steps)",
    ]
    props, message = by_file["notebook.ipynb"]
    assert message.startswith("cell 3, line 5, column 11: ")
    assert "print(loss.item())" in (project / "notebook.ipynb").read_text().splitlines()[int(props["line"]) - 1]


def test_a_notebook_finding_is_placed_one_way_in_every_format(project: Path) -> None:
    """cell 3, line 5, column 11 in the message (or JSON's fields), and where a format has a
    line of the file, the line of the .ipynb that holds that source line."""
    file_lines = (project / "notebook.ipynb").read_text().splitlines()
    holding = next(i for i, line in enumerate(file_lines, start=1) if "print(loss.item())" in line)
    args = ("notebook.ipynb", "--select", "TL101", "--output-format")
    place = "cell 3, line 5, column 11: "
    (finding,) = json.loads(run(project, *args, "json")[1])
    assert (finding["cell"], finding["line"], finding["column"]) == (3, 5, 11)
    assert "notebook.ipynb:cell 3:5:11: TL101" in run(project, *args, "concise")[1]
    (result,) = json.loads(run(project, *args, "sarif")[1])["runs"][0]["results"]
    assert result["message"]["text"].startswith(place)
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": holding}
    (issue,) = json.loads(run(project, *args, "gitlab")[1])
    assert issue["description"].startswith(place) and issue["location"]["lines"] == {"begin": holding, "end": holding}
    github = run(project, *args, "github")[1]
    assert f"line={holding}," in github and f"::{place}" in github.replace("%3A", ":").replace("%2C", ",")
    case = ET.fromstring(run(project, *args, "junit")[1]).find(".//testcase")
    assert case is not None and case.get("line") == str(holding)
    failure = case.find("failure")
    assert failure is not None and failure.get("message", "").startswith(place) and (failure.text or "").startswith(place)


def test_gitlab_fingerprints_survive_lines_moving(project: Path) -> None:
    _, out, _ = run(project, "src/train.py", "--output-format", "gitlab", "--min-impact", "low")
    before = json.loads(out)
    assert {(i["check_name"], i["severity"]) for i in before} == {("TL101 scalar-sync-in-loop", "minor"), ("TL303 zero-grad-memset", "info")}
    assert all(i["location"]["path"] == "src/train.py" for i in before)
    assert [i["location"]["lines"]["begin"] for i in before] == [6, 7]
    (project / "src" / "train.py").write_text("# a comment\n\n" + BAD)
    after = json.loads(run(project, "src/train.py", "--output-format", "gitlab", "--min-impact", "low")[1])
    assert [i["location"]["lines"]["begin"] for i in after] == [8, 9]
    assert [i["fingerprint"] for i in after] == [i["fingerprint"] for i in before]
    # Two identical lines are two issues with two fingerprints.
    (project / "src" / "train.py").write_text(BAD + "    print(loss.item())\n")
    twice = json.loads(run(project, "src/train.py", "--output-format", "gitlab", "--select", "TL101")[1])
    assert len({i["fingerprint"] for i in twice}) == 2


def test_junit_has_a_failure_per_finding(project: Path) -> None:
    _, out, _ = run(project, "src/train.py", "--output-format", "junit", "--min-impact", "low")
    root = ET.fromstring(out.encode())
    assert root.tag == "testsuites" and root.get("failures") == "2"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["torchlint.TL303", "torchlint.TL101"]
    assert cases[1].find("failure").text == (
        "line 7, col 11, `loss.item()` in a training loop makes the host wait for the device on every step "
        "(impact: medium: a host-device sync that stalls the GPU pipeline, every step of a training loop, once per step, mid-step: the kernels after it wait for the host, one pipeline refill per step)"
    )


def test_each_format_maps_impact_to_its_own_severity(project: Path) -> None:
    # a read per parameter repeats within the step: high, beside the medium one-per-step read and the low memset
    (project / "src" / "train.py").write_text(BAD.replace("    opt.step()\n", "    opt.step()\n    for p in model.parameters():\n        print(p.norm().item())\n"))
    sarif = json.loads(run(project, "src/train.py", "--output-format", "sarif", "--min-impact", "low")[1])
    assert {(r["ruleId"], r["level"], r["properties"]["impact"]) for r in sarif["runs"][0]["results"]} == {
        ("TL101", "error", "high"), ("TL101", "warning", "medium"), ("TL303", "note", "low")}
    github = run(project, "src/train.py", "--output-format", "github", "--min-impact", "low")[1].splitlines()
    assert sorted(line.split(" ", 1)[0] for line in github) == ["::error", "::notice", "::warning"]


def test_clean_run_in_machine_formats(project: Path) -> None:
    (project / "clean.py").write_text("import torch\nx = torch.zeros(3)\n")
    for fmt, empty in (("json", []), ("gitlab", []), ("json-lines", None)):
        code, out, _ = run(project, "clean.py", "--output-format", fmt)
        assert code == 0
        # JSON Lines with no findings is no line at all: an empty line is not a JSON document
        assert (json.loads(out) if empty is not None else out) == (empty if empty is not None else "")
    code, out, _ = run(project, "clean.py", "--output-format", "junit")
    assert code == 0 and ET.fromstring(out.encode()).get("failures") == "0"
    assert _sarif_clean(project)["runs"][0]["results"] == []


def _sarif_clean(project: Path) -> dict:
    return json.loads(run(project, "clean.py", "--output-format", "sarif")[1])


def test_output_file_takes_the_report(project: Path) -> None:
    code, out, _ = run(project, "src/train.py", "--output-format", "sarif", "-o", "reports/torchlint.sarif")
    assert code == 1 and out == ""
    assert json.loads((project / "reports" / "torchlint.sarif").read_text())["version"] == "2.1.0"


def test_help_lists_the_formats() -> None:
    result = CliRunner().invoke(main, ["check", "--help"], terminal_width=200)
    for name in ("full", "concise", "json-lines", "sarif", "github", "gitlab", "junit"):
        assert name in result.output


@pytest.mark.parametrize(
    ("choice", "tty", "env", "expected"),
    [
        ("auto", True, {}, True), ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False), ("auto", True, {"NO_COLOR": ""}, True),
        ("auto", False, {"FORCE_COLOR": "1"}, True), ("auto", False, {"FORCE_COLOR": ""}, False),
        ("always", False, {"NO_COLOR": "1"}, True), ("never", True, {"FORCE_COLOR": "1"}, False),
    ],
)
def test_colour_choice(choice: str, tty: bool, env: dict[str, str], expected: bool) -> None:
    assert use_color(choice, tty, env) is expected


def test_colour_reaches_the_output_only_when_asked(project: Path) -> None:
    plain = run(project, "src/train.py", env={"NO_COLOR": "", "FORCE_COLOR": ""})[1]
    assert "\x1b[" not in plain
    forced = run(project, "src/train.py", env={"FORCE_COLOR": "1", "NO_COLOR": ""})[1]
    assert "\x1b[" in forced and re.sub(r"\x1b\[[0-9;]*m", "", forced) == plain
    assert "\x1b[" not in run(project, "src/train.py", "--color", "never", env={"FORCE_COLOR": "1"})[1]
    assert "\x1b[" in run(project, "src/train.py", "--color", "always", env={"NO_COLOR": "1"})[1]
    assert "\x1b[" not in run(project, "src/train.py", "--output-format", "json", "--color", "always")[1]


def test_unwritable_output_file_is_exit_2_without_traceback(project: Path) -> None:
    (project / "taken").write_text("a file, not a folder")
    code, out, err = run(project, "src/train.py", "-o", "taken/report.txt")
    assert code == 2
    assert "cannot write the report to taken/report.txt" in err and "Traceback" not in err + out


def test_full_report_never_reads_a_fifo_for_its_lines(tmp_path: Path) -> None:
    from torchlint.cli.check_output import SourceLines

    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    lines = SourceLines()
    assert lines(str(fifo), None, 1) is None  # returns at once instead of blocking on open()
    (tmp_path / "ok.py").write_text("a = 1\nb = 2\n")
    assert lines(str(tmp_path / "ok.py"), None, 2) == "b = 2"


def test_full_format_counts_lines_as_python_after_a_form_feed(tmp_path: Path) -> None:
    """str.splitlines breaks at a form feed: the snippet showed an empty line and the
    carets under the wrong code."""
    (tmp_path / "ff.py").write_bytes(b"import torch\n\x0cy = 1\n\x0cx = torch.zeros(3).cuda()\n")
    code, out, _ = run_check(tmp_path, "ff.py", "--min-impact", "low", "--output-format", "full")
    assert code == 1 and "ff.py:3:6: TL110" in out
    assert "3 |  x = torch.zeros(3).cuda()\n  |      ^^^^^^^^^^^^^^ TL110" in out
