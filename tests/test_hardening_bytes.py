"""A user's bytes are never lost or damaged (issue 33).

An edit saved while a fix is being written is kept (the file is checked again right
before the rename); `--diff` writes nothing and fails only on a diff; every output counts
and shows lines as Python does (a form feed or U+2028 does not end a line), so a diff
applies with `git apply` and GNU patch and the reports show the line they name."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_check
from torchlint.engine import fixes

BEFORE = "import torch\nx = torch.zeros(3).cuda()\n"  # TL110, a safe fix
AFTER = 'import torch\nx = torch.zeros(3, device="cuda")\n'
EDIT = "import torch\ny = 1  # the user's edit, saved meanwhile\n"


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    code, out, err = run_check(cwd, "--min-impact", "low", "--no-cache", *args)
    assert "Traceback" not in err, err
    return code, out, err


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".torchlint")]


# -- an edit saved between the temporary and the rename ------------------------------


def _in_place(target: Path, text: str, keep_time: bool) -> None:
    """Write ``text`` into ``target``'s own inode; with ``keep_time``, put its mtime back
    (a save within the timestamp's granularity): only the content hash can tell."""
    before = os.stat(target)
    with open(target, "r+b") as stream:
        stream.write(text.encode())
        stream.truncate()
    if keep_time:
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


def _renamed_over(target: Path, text: str, keep_time: bool) -> None:
    """An editor's own atomic save: a new inode renamed over the name."""
    before = os.stat(target)
    other = target.with_name("editor.tmp")
    other.write_text(text)
    if keep_time:
        os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, target)


def _edit_while_writing(monkeypatch: pytest.MonkeyPatch, target: Path, save) -> list[bool]:  # type: ignore[no-untyped-def]
    """Save the user's edit once the temporary is written and fsynced (its mode copied,
    the last step before the rename)."""
    copy_mode, saved = fixes._copy_owner_and_mode, []

    def then_the_user_saves(temporary: str, info: os.stat_result) -> None:
        copy_mode(temporary, info)
        assert Path(temporary).read_bytes(), "the temporary is written before the user saves"
        save(target)
        saved.append(True)

    monkeypatch.setattr(fixes, "_copy_owner_and_mode", then_the_user_saves)
    return saved


@pytest.mark.parametrize("save", [_in_place, _renamed_over], ids=["in-place", "renamed-over"])
@pytest.mark.parametrize("keep_time", [False, True], ids=["new-mtime", "same-mtime"])
@pytest.mark.parametrize("same_size", [False, True], ids=["other-size", "same-size"])
def test_fix_keeps_an_edit_saved_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save, keep_time: bool, same_size: bool) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "a.py"
    target.write_text(BEFORE)
    edit = BEFORE.replace("x = torch.zeros(3).cuda()", "x = torch.zeros(4).cuda()") if same_size else EDIT
    assert (len(edit) == len(BEFORE)) == same_size
    saved = _edit_while_writing(monkeypatch, target, lambda t: save(t, edit, keep_time))
    code, _, err = run(tmp_path, "--fix", "a.py")
    assert saved == [True]
    assert code == 2
    assert "a.py changed on disk while it was being checked; not fixed" in err
    assert target.read_text() == edit
    assert temporaries(tmp_path) == []


def test_add_noqa_keeps_an_edit_saved_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a.py"
    target.write_text(BEFORE)
    saved = _edit_while_writing(monkeypatch, target, lambda t: _in_place(t, EDIT, keep_time=False))
    code, _, err = run(tmp_path, "--add-noqa", "a.py")
    assert saved == [True] and code == 2
    assert "a.py changed on disk while it was being checked" in err
    assert target.read_text() == EDIT and temporaries(tmp_path) == []


def test_notebook_fix_keeps_an_edit_saved_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [], "source": BEFORE}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    target = tmp_path / "nb.ipynb"
    target.write_text(json.dumps(notebook, indent=1))
    edited = json.dumps({**notebook, "cells": [{**cell, "source": EDIT}]}, indent=1)
    saved = _edit_while_writing(monkeypatch, target, lambda t: _in_place(t, edited, keep_time=False))
    code, _, err = run(tmp_path, "--fix", "nb.ipynb")
    assert saved == [True] and code == 2
    assert "nb.ipynb changed on disk while it was being checked; not fixed" in err
    assert target.read_text() == edited and temporaries(tmp_path) == []


def test_the_fix_is_written_when_nothing_changed(tmp_path: Path) -> None:
    """The control: the same run with no edit in the gap writes the fix (exit 0)."""
    (tmp_path / "a.py").write_text(BEFORE)
    code, _, err = run(tmp_path, "--fix", "a.py")
    assert code == 0, err
    assert (tmp_path / "a.py").read_text() == AFTER and temporaries(tmp_path) == []


# -- --diff writes nothing, and fails only on a diff ------------------------------------


def test_diff_with_add_noqa_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    code, out, err = run(tmp_path, "--diff", "--add-noqa", "a.py")
    assert code == 2
    assert "--diff and --add-noqa cannot be combined" in err and len(err.strip().splitlines()) <= 2
    assert (tmp_path / "a.py").read_text() == BEFORE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


@pytest.mark.parametrize("extra", [[], ["--fix"], ["--unsafe-fixes"], ["--show-fixes"], ["--statistics"], ["--exit-non-zero-on-fix"]])
def test_diff_writes_nothing_whatever_it_is_combined_with(tmp_path: Path, extra: list[str]) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    code, out, _ = run(tmp_path, "--diff", *extra, "a.py")
    assert code == 1 and '+x = torch.zeros(3, device="cuda")' in out
    assert (tmp_path / "a.py").read_text() == BEFORE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


def test_diff_exits_0_when_nothing_can_be_fixed(tmp_path: Path) -> None:
    """As ruff: `--diff` fails on a diff, not on findings that no fix removes."""
    unfixable = ("import torch\nopt = torch.optim.SGD(params, lr=0.1)\nfor xb in loader:\n"
                 "    loss = model(xb).sum()\n    loss.backward()\n    opt.step()\n    print(loss.item())\n")  # TL101: no fix
    (tmp_path / "a.py").write_text(unfixable)
    assert run(tmp_path, "a.py")[0] == 1  # findings, without --diff
    code, out, err = run(tmp_path, "--diff", "a.py")
    assert (code, out) == (0, "") and "Would fix 0 problems in 0 files." in err
    (tmp_path / "clean.py").write_text("x = 1\n")
    assert run(tmp_path, "--diff", "clean.py")[:2] == (0, "")
    assert run(tmp_path, "--diff", "--exit-zero", "a.py")[0] == 0


def test_diff_on_stdin_exits_0_without_a_diff(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from torchlint.cli import main

    os.chdir(tmp_path)
    try:
        unchanged = CliRunner().invoke(main, ["check", "--no-cache", "-", "--diff", "--stdin-filename", "a.py"], input="x = 1\n")
        changed = CliRunner().invoke(main, ["check", "--no-cache", "--min-impact", "low", "-", "--diff", "--stdin-filename", "a.py"], input=BEFORE)
    finally:
        os.chdir(ROOT)
    assert unchanged.exit_code == 0 and unchanged.stdout == ""
    assert changed.exit_code == 1 and '+x = torch.zeros(3, device="cuda")' in changed.stdout
    # stdout carries the diff alone (patch reads it); the count goes to stderr
    assert changed.stdout.startswith("--- a/a.py") and "problem" not in changed.stdout
    assert "Would fix 1 problem in 1 file." in changed.stderr


# -- one line model: the diff applies, the reports show the line they name ---------------

TRICKY = (
    "import torch\r\n"
    "# a form feed \x0c inside a comment\r\n"
    's = "a line separator \u2028 inside a string"\r\n'
    "\x0c\r\n"
    "x = torch.zeros(3).cuda()\r\n"
    "t = 'next \u2029 \x85 \x1c'\r\n"
    "y = 2\r\n"
)


def _diff_of(tmp_path: Path, name: str, text: str) -> str:
    """The diff as the bytes torchlint writes (CliRunner's ``stdout`` turns CRLF into LF)."""
    from click.testing import CliRunner

    from torchlint.cli import main

    (tmp_path / name).write_bytes(text.encode("utf-8"))
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, ["check", "--no-cache", "--min-impact", "low", "--diff", name])
    finally:
        os.chdir(ROOT)
    out = result.stdout_bytes.decode("utf-8")
    assert result.exit_code == 1 and out.startswith("--- "), result.output
    return out


def _fixed_copy(tmp_path: Path, name: str, text: str) -> bytes:
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / name).write_bytes(text.encode("utf-8"))
    assert run(fixed, "--fix", name)[0] == 0
    return (fixed / name).read_bytes()


@pytest.mark.parametrize("text", [TRICKY, TRICKY.replace("\r\n", "\n"), TRICKY.replace("\r\n", "\n").rstrip("\n").replace("y = 2", "x = torch.ones(2).cuda()")],
                         ids=["crlf", "lf", "no-final-newline"])
def test_the_diff_applies_with_git_and_patch(tmp_path: Path, text: str) -> None:
    out = _diff_of(tmp_path, "m.py", text)
    hunks = re.findall(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", out, re.M)
    # Python's lines: the fix is on line 5, whatever \f, U+2028, U+2029, U+0085 and \x1c hold.
    assert hunks and hunks[0][0] == "2", out
    assert out.count("\n-x = torch.zeros(3).cuda()") == 1
    expected = _fixed_copy(tmp_path, "m.py", text)
    patch = tmp_path / "fix.patch"
    patch.write_bytes(out.encode("utf-8"))
    assert ("\r\n" in out) == ("\r\n" in text)
    if shutil.which("git"):
        checked = subprocess.run(["git", "apply", "--check", "-v", str(patch)], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stderr
    if shutil.which("patch"):
        dry = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        applied = subprocess.run(["patch", "-p1", "--batch", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert (tmp_path / "m.py").read_bytes() == expected  # the diff says what --fix writes
    if not shutil.which("git") and not shutil.which("patch"):
        pytest.skip("neither git nor GNU patch is installed")


def test_profile_reports_show_the_line_they_name(tmp_path: Path) -> None:
    from torchlint.correlate.model import source_line
    from torchlint.report.profile_html import source_excerpt

    path = tmp_path / "train.py"
    path.write_bytes(TRICKY.encode("utf-8"))
    assert source_line(str(path), 5) == "x = torch.zeros(3).cuda()"
    assert source_line(str(path), 7) == "y = 2"
    excerpt = source_excerpt("train.py", 5, str(tmp_path))
    assert '<span class="hit">    5  x = torch.zeros(3).cuda()</span>' in excerpt
    latin = tmp_path / "latin.py"  # the file's own encoding, as Python reads it
    latin.write_bytes("# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n".encode("latin-1"))
    assert source_line(str(latin), 2) == "name = 'caf\xe9'"


def test_the_full_report_shows_the_line_it_names(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_bytes(TRICKY.encode("utf-8"))
    code, out, _ = run(tmp_path, "--output-format", "full", "m.py")
    assert code == 1
    assert re.search(r"m\.py:5:\d+: TL110", out), out
    assert "5 | x = torch.zeros(3).cuda()" in out


# Where `str.splitlines()` may still be used: text that is not a user's source file.
SPLITLINES_ALLOWED = {
    "engine/discover.py",  # a .gitignore's patterns
    "report/profile_ranks.py",  # a rank's traceback
    "report/rule_info.py",  # a rule page of torchlint's own
    "correlate/compiled.py", "correlate/guards.py",  # torch.compile's reasons
    "analysis/costs.py",  # torchlint's own table
    "checks/base.py",  # a check's docstring
}


def test_no_other_splitlines_on_user_source() -> None:
    """Every line split of a user's source goes through torchlint/textlines.py."""
    package = ROOT / "torchlint"
    texts = {path: path.read_text(encoding="utf-8") for path in package.rglob("*.py")}
    users = {
        path.relative_to(package).as_posix()
        for path, text in texts.items()
        if "splitlines" in text  # an attribute of that name is spelt out: the other files need no parse
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute) and node.attr == "splitlines"
    }
    assert users <= SPLITLINES_ALLOWED, users - SPLITLINES_ALLOWED
