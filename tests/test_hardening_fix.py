"""`check --fix` never loses a fix and never writes where it must not.

A fix that cannot be written leaves its findings reported (exit 2); read-only files
are refused; mode, owner and hard links are kept; a symlink is followed only into
the checked tree; stale temporary files are cleaned; `--diff` applies with GNU patch.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.cli import main
from torchlint.engine import fixes

BEFORE = "import torch\nx = torch.zeros(3).cuda()\n"  # TL110, safe fix
AFTER = 'import torch\nx = torch.zeros(3, device="cuda")\n'


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def findings(cwd: Path, *args: str) -> tuple[int, list[tuple[str, str, int]], str]:
    code, out, err = run(cwd, "--output-format", "json", *args)
    return code, [(f["path"], f["code"], f["line"]) for f in json.loads(out)], err


def test_the_fix_is_written(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    code, found, _ = findings(tmp_path, "--fix", "a.py")
    assert (code, found) == (0, [])
    assert (tmp_path / "a.py").read_text() == AFTER


def test_a_file_changed_on_disk_keeps_its_findings_and_exit_is_2(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    (tmp_path / "b.py").write_text(BEFORE)
    real_target = fixes._target

    def edited_meanwhile(edit, roots):  # type: ignore[no-untyped-def]
        if edit.path.name == "a.py":  # someone saves the file while torchlint works
            edit.path.write_text(BEFORE + "y = 1\n")
        return real_target(edit, roots)

    monkeypatch.setattr(fixes, "_target", edited_meanwhile)
    code, found, err = findings(tmp_path, "--fix", "a.py", "b.py")
    assert code == 2
    assert "a.py changed on disk while it was being checked; not fixed" in err
    assert found == [("a.py", "TL110", 2)]  # reported as it still is; b.py was fixed
    assert (tmp_path / "a.py").read_text() == BEFORE + "y = 1\n"
    assert (tmp_path / "b.py").read_text() == AFTER


def test_a_directory_that_refuses_the_write_keeps_the_findings(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a.py").write_text(BEFORE)

    def no_space(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fixes.tempfile, "mkstemp", no_space)
    code, out, err = run(tmp_path, "--fix", "a.py")
    assert code == 2
    assert "cannot write a.py: Permission denied; not fixed" in err
    assert "No problems found" not in out and "TL110" in out
    assert (tmp_path / "a.py").read_text() == BEFORE
    assert not list(tmp_path.glob(".*torchlint"))


def test_read_only_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    os.chmod(tmp_path / "a.py", 0o444)
    code, found, err = findings(tmp_path, "--fix", "a.py")
    assert code == 2 and found == [("a.py", "TL110", 2)]
    assert "a.py is read-only; not fixed" in err
    assert (tmp_path / "a.py").read_text() == BEFORE


def test_mode_and_owner_are_kept(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_text(BEFORE)
    os.chmod(target, 0o751)
    owner = (os.getuid(), os.getgid())
    if os.geteuid() == 0:
        owner = (65534, 65534)
        os.chown(target, *owner)
    code, _, _ = findings(tmp_path, "--fix", "a.py")
    info = os.stat(target)
    assert code == 0 and target.read_text() == AFTER
    assert stat.S_IMODE(info.st_mode) == 0o751
    assert (info.st_uid, info.st_gid) == owner


def test_hard_links_are_not_split(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    os.link(tmp_path / "a.py", tmp_path / "other_name.txt")
    inode = os.stat(tmp_path / "a.py").st_ino
    code, _, _ = findings(tmp_path, "--fix", "a.py")
    assert code == 0
    assert os.stat(tmp_path / "a.py").st_ino == inode and os.stat(tmp_path / "a.py").st_nlink == 2
    assert (tmp_path / "other_name.txt").read_text() == AFTER


def test_symlinks_are_fixed_at_their_target_only_inside_the_checked_tree(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "shared.py").write_text(BEFORE)
    (tree / "real.py").write_text(BEFORE)
    (tree / "out_link.py").symlink_to(outside / "shared.py")
    (tree / "in_link.py").symlink_to("real.py")
    code, found, err = findings(tree, "--fix", "out_link.py", "in_link.py")
    assert code == 2
    assert "out_link.py is a symlink to" in err and "outside the checked tree; not fixed" in err
    assert found == [("out_link.py", "TL110", 2)]
    assert (outside / "shared.py").read_text() == BEFORE
    assert (tree / "real.py").read_text() == AFTER and (tree / "in_link.py").is_symlink()


def test_temporary_files_of_a_killed_run_are_cleaned(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f".a.py.{dead.pid}.x1y2z3.torchlint"
    stale.write_text("half a file")
    live = tmp_path / f".a.py.{os.getpid()}.abcdef.torchlint"  # a run still going: left alone
    live.write_text("being written")
    code, _, _ = findings(tmp_path, "--fix", "a.py")
    assert code == 0 and not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.py", live.name])


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
@pytest.mark.parametrize("folder", ["with space", "tab\there", 'quote"d', "plain"])
def test_diff_applies_with_gnu_patch(tmp_path: Path, folder: str) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "my file.py").write_text(BEFORE)
    code, out, _ = run(tmp_path, "--diff", f"{folder}/my file.py")
    assert code == 1 and out.startswith("--- ")
    applied = subprocess.run(["patch", "-p1", "--batch"], input=out, text=True, cwd=tmp_path, capture_output=True, timeout=30)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / folder / "my file.py").read_text() == AFTER
