"""The command line as a user meets it: exit codes, formats, bad input, configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.cli import main

BAD = """import torch
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    print(loss.item())
"""
CLEAN = "import torch\nx = torch.zeros(3)\n"


def run(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_findings_exit_1_with_location_code_message_and_hint(project: Path) -> None:
    code, out, _ = run("check", ".", cwd=project)
    assert code == 1
    assert "bad.py:5:11: TL101 `loss.item()`" in out
    assert "help: Accumulate" in out
    # a logged loss after the backward: one sync at the step's end, medium (issue 32)
    assert "Found 1 problem (1 medium) in 1 file (2 checked)." in out
    assert "= impact: medium (a host-device sync that stalls the GPU pipeline, every step of a training loop: one sync per step, at its end" in out


def test_clean_exit_0(project: Path) -> None:
    code, out, _ = run("check", "clean.py", cwd=project)
    assert code == 0
    assert "No problems found in 1 file." in out


def test_json_output_is_1_based_with_required_fields(project: Path) -> None:
    code, out, _ = run("check", "bad.py", "--output-format", "json", cwd=project)
    assert code == 1
    (finding,) = json.loads(out)
    assert {k: finding[k] for k in ("path", "line", "column", "end_line", "code", "name")} == {
        "path": "bad.py", "line": 5, "column": 11, "end_line": 5, "code": "TL101", "name": "scalar-sync-in-loop",
    }
    assert finding["end_column"] == 22  # just after `loss.item()`
    assert finding["message"] and finding["fix_hint"]


def test_missing_path_is_exit_2_naming_it(project: Path) -> None:
    code, out, err = run("check", "nope.py", "bad.py", cwd=project)
    assert code == 2
    assert "nope.py" in err


def test_unknown_rule_code_is_exit_2_with_suggestion(project: Path) -> None:
    code, _, err = run("check", "--select", "TL1011", cwd=project)
    assert code == 2 and "TL1011" in err
    code, _, err = run("check", "--ignore", "TL999", cwd=project)
    assert code == 2 and "TL999" in err


def test_unknown_config_key_is_exit_2(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.torchlint]\nselcet = ['TL1']\n")
    code, _, err = run("check", ".", cwd=project)
    assert code == 2
    assert "selcet" in err and "select" in err


def test_config_select_ignore_and_cli_wins(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.torchlint]\nignore = ['TL101']\n")
    assert run("check", ".", cwd=project)[0] == 0
    # The CLI's --select replaces the config's selection, but the config's ignore still holds.
    assert run("check", ".", "--select", "TL1", cwd=project)[0] == 0
    (project / "pyproject.toml").write_text("[tool.torchlint]\nselect = ['TL2']\n")
    assert run("check", ".", cwd=project)[0] == 0
    assert run("check", ".", "--select", "TL101", cwd=project)[0] == 1


def test_a_repeated_rule_option_adds_to_it_as_a_comma_does(project: Path) -> None:
    # `bad.py` has a TL101 finding: selecting another rule alone finds nothing
    assert run("check", ".", "--select", "TL2", cwd=project)[0] == 0
    assert run("check", ".", "--select", "TL101", "--select", "TL2", cwd=project)[0] == 1
    assert run("check", ".", "--select", "TL1", "--ignore", "TL101", "--ignore", "TL2", cwd=project)[0] == 0


def test_per_file_ignores(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.torchlint.per-file-ignores]\n'bad.py' = ['TL1']\n")
    assert run("check", ".", cwd=project)[0] == 0


def test_exclude_and_gitignore_skip_walked_files(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.torchlint]\nexclude = ['bad.py']\n")
    assert run("check", ".", cwd=project)[0] == 0
    # A file named on the command line is still checked, unless --force-exclude.
    assert run("check", "bad.py", cwd=project)[0] == 1
    assert run("check", "bad.py", "--force-exclude", cwd=project)[0] == 0
    (project / "pyproject.toml").unlink()
    (project / "sub").mkdir()
    (project / "sub" / "gen.py").write_text(BAD)
    (project / ".gitignore").write_text("sub/\nbad.py\n")
    (project / ".git").mkdir()
    code, out, _ = run("check", ".", cwd=project)
    assert code == 0, out


def test_noqa_specific_and_bare(project: Path) -> None:
    (project / "bad.py").write_text(BAD.replace("print(loss.item())", "print(loss.item())  # noqa: TL101"))
    assert run("check", "bad.py", cwd=project)[0] == 0
    (project / "bad.py").write_text(BAD.replace("print(loss.item())", "print(loss.item())  # noqa"))
    assert run("check", "bad.py", cwd=project)[0] == 0
    (project / "bad.py").write_text(BAD.replace("print(loss.item())", "print(loss.item())  # noqa: TL102"))
    assert run("check", "bad.py", cwd=project)[0] == 1


def test_syntax_error_is_tl000_and_other_files_still_checked(project: Path) -> None:
    (project / "broken.py").write_text("import torch\ndef f(:\n    pass\n")
    code, out, _ = run("check", ".", cwd=project)
    assert code == 1
    assert "broken.py:2:" in out and "TL000" in out
    assert "bad.py:5:11: TL101" in out


def test_syntax_error_in_a_file_without_torch_is_reported(project: Path) -> None:
    (project / "plain.py").write_text("x = (1,\n")
    code, out, _ = run("check", "plain.py", cwd=project)
    assert code == 1 and "plain.py:1:" in out and "TL000" in out


def test_non_utf8_file_is_tl000_at_the_bad_byte(project: Path) -> None:
    (project / "latin.py").write_bytes(b"import torch\nname = 'caf\xe9'\n")
    code, out, _ = run("check", ".", "--output-format", "json", cwd=project)
    findings = json.loads(out)
    bad = [f for f in findings if f["path"] == "latin.py"]
    assert [(f["code"], f["line"]) for f in bad] == [("TL000", 2)]
    assert any(f["code"] == "TL101" for f in findings)


def test_declared_encoding_is_honoured(project: Path) -> None:
    (project / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\n")
    assert run("check", "latin.py", cwd=project)[0] == 0


def test_empty_files_and_directories_are_fine(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.py").write_text("")
    code, out, _ = run("check", ".", cwd=tmp_path)
    assert code == 0 and "No problems found in 1 file." in out


def test_notebook_cells_are_checked_with_cell_positions(tmp_path: Path) -> None:
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": ["# Training"]},
            {"cell_type": "code", "source": ["%matplotlib inline\n", "import torch\n"]},
            {"cell_type": "code", "source": BAD.splitlines(keepends=True)[1:]},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "broken.ipynb").write_text("{ not json")
    code, out, _ = run("check", ".", cwd=tmp_path)
    assert code == 1
    assert "train.ipynb:cell 3:4:11: TL101" in out
    assert "broken.ipynb:1:3: TL000" in out


def test_a_shell_escape_continued_over_lines_is_not_a_syntax_error(tmp_path: Path) -> None:
    """`!python train.py \\` and its continuation lines are one IPython line: masked
    whole, whatever their indentation (the continuation used to read as a bad indent)."""
    cell = ["!python train.py \\\n", "    --epochs 3 \\\n", "    --lr 0.1\n", "import torch\n",
            "x = torch.zeros(3).cuda()\n"]
    notebook = {"cells": [{"cell_type": "code", "source": cell}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "run.ipynb").write_text(json.dumps(notebook))
    code, out, _ = run("check", "--min-impact", "low", "--output-format", "concise", "run.ipynb", cwd=tmp_path)
    assert code == 1 and "TL000" not in out
    assert "run.ipynb:cell 1:5:5: TL110" in out


def test_internal_error_names_file_and_check_and_run_goes_on(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchlint.checks.sync.scalar_sync_in_loop import ScalarSyncInLoop

    def boom(self, node):  # type: ignore[no-untyped-def]
        if "bad" in self.ctx.path:
            raise ValueError("kaboom")

    monkeypatch.setattr(ScalarSyncInLoop, "visit_Call", boom)
    (project / "other.py").write_text(BAD)
    code, out, err = run("check", ".", "--select", "TL101", cwd=project)
    assert code == 2
    assert "internal error in TL101 on bad.py" in err and "kaboom" in err
    assert "Traceback" not in err  # one line per error on the user's terminal
    assert "3 checked" in out or "No problems" in out or "other.py" in out


def test_rules_table_lists_every_rule() -> None:
    code, out, _ = run("rules")
    assert code == 0
    assert "TL000" in out and "TL101" in out and "scalar-sync-in-loop" in out


def test_rule_prints_the_page() -> None:
    code, out, _ = run("rule", "TL101")
    assert code == 0
    assert out.startswith("# TL101 scalar-sync-in-loop")
    assert run("rule", "TL999")[0] == 2


def test_python_dash_m_and_no_torch_import(project: Path) -> None:
    """`python -m torchlint check` works with torch made unimportable."""
    blocker = project / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.') or name == 'snakeviz':\n"
        "            raise ImportError('torch is blocked in this test')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(blocker))
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", ".", "--select", "ALL"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "TL101" in proc.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode != 0  # the blocker really blocks


def test_notebook_with_a_broken_cell_still_checks_the_others(tmp_path: Path) -> None:
    notebook = {
        "cells": [
            {"cell_type": "code", "source": ["import torch\n", "if use_tb:\n", "    %load_ext tensorboard\n"]},
            {"cell_type": "code", "source": ["criterion = # TODO: define the loss\n"]},
            {"cell_type": "code", "source": ["%%bash\n", "ls -l data/\n"]},
            {"cell_type": "code", "source": ["torch.*Tensor?\n"]},
            {"cell_type": "code", "source": BAD.splitlines(keepends=True)[1:]},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    (tmp_path / "exercise.ipynb").write_text(json.dumps(notebook))
    code, out, _ = run("check", ".", "--output-format", "concise", cwd=tmp_path)
    assert code == 1
    assert "exercise.ipynb:cell 2:1:13: TL000" in out
    assert "exercise.ipynb:cell 5:4:11: TL101" in out
    assert out.count("TL000") == 1


def test_an_empty_selection_says_so_and_exits_0(tmp_path: Path) -> None:
    """As ruff: a tree that `exclude` empties, named with --force-exclude, or a folder
    with no Python in it, is a warning on stderr, not a silent "0 files"."""
    from conftest import run_check

    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nexclude = ["pkg"]\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")
    code, _, err = run_check(tmp_path, "--force-exclude", "pkg")
    assert code == 0 and "no Python files or notebooks found" in err
    code, _, err = run_check(tmp_path, "--min-impact", "low", "pkg")  # named explicitly: checked, as ruff does
    assert code == 1 and "no Python files" not in err
