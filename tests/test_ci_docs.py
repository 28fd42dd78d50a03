"""docs/ci.md stays true: every `torchlint` command in it runs on a small project with
sane exit codes and outputs, and its YAML files fit what they feed (the hook manifest,
the SARIF upload, the Code Quality artifact)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from conftest import FIXTURES, LOOP_WITH_FINDINGS, ROOT
from torchlint.cli import main

DOC = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", DOC, re.DOTALL)
TRAIN = LOOP_WITH_FINDINGS


def commands() -> list[list[str]]:
    found = []
    for _, body in BLOCKS:
        for line in body.splitlines():
            line = re.sub(r"^\s*(- run:|-)\s*", "", line).strip()
            if line.startswith("torchlint "):
                found.append(shlex.split(line)[1:])
    return found


def yaml_blocks() -> list[dict]:
    return [yaml.safe_load(body) for lang, body in BLOCKS if lang == "yaml"]


def test_the_doc_has_the_commands_it_promises() -> None:
    formats = {args[args.index("--output-format") + 1] for args in commands() if "--output-format" in args}
    assert {"sarif", "github", "gitlab", "concise"} <= formats
    assert len(commands()) >= 6


@pytest.mark.parametrize("args", commands(), ids=lambda a: " ".join(a))
def test_each_command_runs(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        os.chdir(old)
    assert result.exit_code == (0 if "--exit-zero" in args else 1), result.output
    assert "Traceback" not in result.stdout + result.stderr
    if "--fix" in args:  # TL303 (a memset per step) is low impact: fixed only where it is shown
        fixed = "set_to_none=True" in (tmp_path / "train.py").read_text()
        assert fixed == ("low" in args)
    output_format = args[args.index("--output-format") + 1] if "--output-format" in args else "full"
    report = (tmp_path / args[args.index("--output-file") + 1]).read_text() if "--output-file" in args else result.stdout
    if output_format == "sarif":
        schema = json.loads((FIXTURES / "schemas" / "sarif-schema-2.1.0.json").read_text())
        log = json.loads(report)
        jsonschema.Draft4Validator(schema).validate(log)
        # TL303 (a memset per step) is low impact: left out by default, as in every format
        assert {(r["ruleId"], r["level"]) for r in log["runs"][0]["results"]} == {("TL101", "warning")}  # one read per step: medium (issue 32)
    elif output_format == "gitlab":
        issues = json.loads(report)
        assert {i["location"]["path"] for i in issues} == {"train.py"} and all(i["fingerprint"] for i in issues)
    elif output_format == "github":
        assert [line.split(" ", 1)[0] for line in report.splitlines()] == ["::warning"]  # TL101, medium: one read per step
    else:
        assert "train.py:7:11: TL101" in report


def test_github_workflow_uploads_what_torchlint_wrote() -> None:
    workflow = next(b for b in yaml_blocks() if "jobs" in b)
    steps = workflow["jobs"]["torchlint"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))
    sarif_run = next(s["run"] for s in steps if "sarif" in s.get("run", ""))
    args = shlex.split(sarif_run)
    assert args[args.index("--output-file") + 1] == upload["with"]["sarif_file"]
    assert workflow["permissions"]["security-events"] == "write"


def test_gitlab_job_reports_what_torchlint_wrote() -> None:
    job = next(b for b in yaml_blocks() if "torchlint" in b and "script" in b["torchlint"])["torchlint"]
    line = next(s for s in job["script"] if "--output-format gitlab" in s)
    args = shlex.split(line)
    assert args[args.index("--output-file") + 1] == job["artifacts"]["reports"]["codequality"]


def test_pre_commit_configs_name_the_shipped_hook() -> None:
    manifest = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = manifest
    assert hook["require_serial"] is True and hook["minimum_pre_commit_version"]
    assert hook["entry"] == "torchlint check --force-exclude"
    configs = [b for b in yaml_blocks() if "repos" in b]
    readme = re.search(r"```yaml\n(# \.pre-commit-config\.yaml.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert readme is not None
    configs.append(yaml.safe_load(readme.group(1)))
    for config in configs:
        (repo,) = config["repos"]
        assert repo["repo"].startswith("https://") and "<" not in repo["repo"] and repo["rev"]
        assert [h["id"] for h in repo["hooks"]] == [hook["id"]]


def test_readme_sample_output_is_what_torchlint_prints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, update_snapshots: bool) -> None:
    """The README's sample is what the quick start's check prints (the default rules, the
    default impact floor): its first finding whole, `...`, and the summary that closes the
    report. `pytest tests/test_ci_docs.py --update-snapshots` rewrites it from the real
    output. The script is copied out under the same relative name: in the checkout, its
    project's context is torchlint's own source (which the script never calls), and
    summarising it would cost the test seconds without changing what it prints."""
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    sample = re.search(r"Sample output.*?```text\n(.*?)```", readme, re.DOTALL)
    assert sample is not None
    (tmp_path / "fixtures" / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "scripts" / "cifar_train.py", tmp_path / "fixtures" / "scripts")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--exit-zero", "fixtures/scripts/cifar_train.py"], catch_exceptions=False)
    printed = result.stdout
    expected = printed.split("\n\n", 1)[0] + "\n...\n" + printed[printed.index("\nFound ") + 1:]
    if update_snapshots and sample.group(1) != expected:
        readme_path.write_text(readme[:sample.start(1)] + expected + readme[sample.end(1):], encoding="utf-8")
        return
    assert sample.group(1) == expected  # regenerate: pytest tests/test_ci_docs.py -k sample --update-snapshots


def _quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start.*?```sh\n(.*?)```", readme, re.DOTALL)
    assert block is not None
    return block.group(1).splitlines()


def test_the_quick_start_is_two_commands_that_make_their_own_environment() -> None:
    first, second = _quick_start()
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install . && ")
    assert second.startswith(". .venv/bin/activate && ")  # whole by itself, in a new shell too
    torch_at, extra_at = second.index("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"), second.index("[profile,test]")
    assert torch_at < extra_at  # torch pinned first: the extra would otherwise let pip pick one
    assert "torchlint check" in first and second.endswith("python -m pytest")


def test_ci_runs_the_readme_quick_start() -> None:
    """.ci/run runs the README's commands as they are, in its own environment (.ci-venv:
    never the developer's .venv), so CI fails when the quick start does."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in _quick_start():
        assert command.replace(".venv", ".ci-venv") in ci, command
    assert ".ci-venv/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()