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

from conftest import run_check
from torchlint.engine import fixes

BEFORE = "import torch\nx = torch.zeros(3).cuda()\n"  # TL110, safe fix
AFTER = 'import torch\nx = torch.zeros(3, device="cuda")\n'


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    code, out, err = run_check(cwd, "--min-impact", "low", *args)  # every finding: the fixes are the subject
    assert "Traceback" not in err, err
    return code, out, err


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


def test_a_file_not_written_keeps_its_per_step_findings_from_other_files(tmp_path: Path, monkeypatch) -> None:
    # `accuracy` syncs every step only because train.py calls it from its loop: a finding
    # that re-checking helpers.py alone would lose
    (tmp_path / "helpers.py").write_text(
        "import torch\nBIAS = torch.zeros(3).cuda()\n\n\ndef accuracy(logits):\n    return logits.sum().item()\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom helpers import accuracy\n\n\ndef train(model, loader, opt):\n"
        "    for x, y in loader:\n        loss = model(x).sum()\n        loss.backward()\n"
        "        opt.step()\n        print(accuracy(model(x)))\n"
    )
    before = findings(tmp_path, ".")[1]
    assert ("helpers.py", "TL101", 6) in before and ("helpers.py", "TL110", 2) in before
    monkeypatch.setattr(fixes, "_target", lambda edit, roots: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system")))
    code, found, err = findings(tmp_path, "--fix", ".")
    assert code == 2 and "cannot write helpers.py: Read-only file system" in err
    assert found == before


def test_a_directory_that_refuses_the_write_keeps_the_findings(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a.py").write_text(BEFORE)

    def no_space(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fixes, "make_temporary", no_space)
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


def test_a_hard_linked_file_is_replaced_whole_and_its_other_links_keep_the_old_text(tmp_path: Path) -> None:
    """Writing through a shared inode is never atomic (a kill between the write and the
    truncate left fixed text followed by the old tail): the name is replaced in one rename."""
    (tmp_path / "a.py").write_text(BEFORE)
    os.link(tmp_path / "a.py", tmp_path / "other_name.txt")
    code, _, err = findings(tmp_path, "--fix", "a.py")
    assert code == 0 and (tmp_path / "a.py").read_text() == AFTER
    assert (tmp_path / "other_name.txt").read_text() == BEFORE
    assert "a.py had 1 other hard link" in err


def test_a_killed_write_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """Whatever stops the write (here an exception in fsync) leaves the old bytes whole
    and no temporary behind."""
    target = tmp_path / "a.py"
    target.write_text(BEFORE + "# " + "x" * 5000 + "\n")
    os.link(target, tmp_path / "b.py")
    edit = fixes.Edit(target, "a.py", target.read_text(), AFTER, "utf-8", fixes.hashlib.sha256(target.read_bytes()).hexdigest(), 1)

    def killed(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fixes.os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        fixes.write_atomically(edit)
    assert target.read_text() == edit.before and (tmp_path / "b.py").read_text() == edit.before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"]


@pytest.mark.parametrize(
    "before, after",
    [
        ("import torch\n\x0cx = 1\ndef f():\n    a = 1\n\x0c    y = torch.zeros(3).cuda()\n\x0c    return y\n",
         'import torch\n\x0cx = 1\ndef f():\n    a = 1\n\x0c    y = torch.zeros(3, device="cuda")\n\x0c    return y\n'),
        ("import torch\rx = torch.zeros(3).cuda()\ry = 2\r",
         'import torch\rx = torch.zeros(3, device="cuda")\ry = 2\r'),
        ("import torch\rx = 1\ry = torch.zeros(3).cuda()\r",
         'import torch\rx = 1\ry = torch.zeros(3, device="cuda")\r'),
    ],
    ids=["form-feeds", "cr-only", "cr-only-last-line-fixed"],
)
def test_fix_changes_only_the_lines_it_fixes(tmp_path: Path, before: str, after: str) -> None:
    """libcst drops a form feed before a statement and a CR-only file's last CR."""
    (tmp_path / "a.py").write_bytes(before.encode())
    code, _, _ = findings(tmp_path, "--fix", "a.py")
    assert code == 0 and (tmp_path / "a.py").read_bytes() == after.encode()


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


def _stale_temporary(directory: Path, name: str) -> Path:
    """A temporary as a killed `--fix` of ``name`` would have left it."""
    from torchlint.engine import tempfiles

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    monkey_pid = os.getpid
    try:
        tempfiles.os.getpid = lambda: dead.pid  # type: ignore[assignment]
        fd, path = tempfiles.make_temporary(directory / name)
    finally:
        tempfiles.os.getpid = monkey_pid  # type: ignore[assignment]
    os.write(fd, b"half a file")
    os.close(fd)
    return Path(path)


def test_temporary_files_of_a_killed_run_are_cleaned(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    stale = _stale_temporary(tmp_path, "a.py")
    fd, live_name = fixes.make_temporary(tmp_path / "a.py")  # a run still going: left alone
    os.close(fd)
    live = Path(live_name)
    code, _, _ = findings(tmp_path, "--fix", "a.py")
    assert code == 0 and not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.py", live.name])


def test_a_plain_check_also_cleans_what_a_killed_fix_left(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(BEFORE)
    stale = _stale_temporary(tmp_path / "pkg", "a.py")
    code, found, _ = findings(tmp_path, ".")
    assert code == 1 and found == [("pkg/a.py", "TL110", 2)]
    assert not stale.exists() and (tmp_path / "pkg" / "a.py").read_text() == BEFORE


def test_a_users_file_named_like_a_temporary_is_never_removed(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BEFORE)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lookalikes = [f".a.py.{dead.pid}.x1y2z3.torchlint", f".a.py.{dead.pid}.x1y2z3.0123456789abcdef.torchlint", ".notes.1.2.3.torchlint"]
    for name in lookalikes:
        (tmp_path / name).write_text("the user's")
    for args in ([".", ], ["--fix", "a.py"]):
        findings(tmp_path, *args)
    assert all((tmp_path / name).read_text() == "the user's" for name in lookalikes)


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


# -- fixes keep every comment, each with its own element ---------------------------------

import re  # noqa: E402

import libcst as cst  # noqa: E402

from torchlint.analysis.context import FileContext  # noqa: E402

_COMMENT = re.compile(r"#[^\n]*")


def fixed_text(tmp_path: Path, source: str, *args: str) -> str:
    (tmp_path / "f.py").write_text(source)
    code, _, err = run(tmp_path, "--fix", "--unsafe-fixes", "--select", "ALL", *args, "f.py")
    assert code in (0, 1), err
    return (tmp_path / "f.py").read_text()


COMMENTED = {
    "TL110": (
        "import torch\n"
        "a = torch.zeros(  # size\n    3,  # three\n).cuda(  # move\n)\n"
        "b = (torch.zeros(3)  # made\n     .cuda())  # moved\n"
        "for i in range(3):\n    w = torch.zeros(\n        3,  # count\n    ).to(device)\n",
        ['device="cuda"', 'device="cuda"', "device=device"],
    ),
    "TL204": (
        "import torch\nfrom torch.autograd import Variable\nx = torch.randn(3)\n"
        "a = Variable(  # wrap\n    x,  # the data\n)\n"
        "b = Variable(x,  # keep\n             requires_grad=True)  # grad\n"
        "d = torch.FloatTensor(  # legacy\n    [1.0, 2.0],  # data\n)\n",
        ["a = x.detach(", ".detach().requires_grad_(", "torch.tensor("],
    ),
    "TL401": (
        "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, 3,  # conv\n                              bias=True)  # with bias\n"
        "        self.bn = nn.BatchNorm2d(8)\n\n    def forward(self, x):\n        return self.bn(self.conv(x))\n",
        ["bias=False"],
    ),
    "TL502": (
        "import torch\nwith torch.cuda.amp.autocast(  # amp\n    enabled=True,  # on\n    dtype=torch.float16,  # half\n):\n    pass\n",
        ['torch.amp.autocast(  # amp\n    "cuda",\n    enabled=True,  # on'],
    ),
}


@pytest.mark.parametrize("code", sorted(COMMENTED))
def test_fixes_keep_every_comment_once(tmp_path: Path, code: str) -> None:
    source, expected = COMMENTED[code]
    after = fixed_text(tmp_path, source, "--select", code)
    assert after != source, "the fix did not apply"
    for text in expected:
        assert text in after, after
    assert sorted(_COMMENT.findall(after)) == sorted(_COMMENT.findall(source)), after
    compile(after, "f.py", "exec", dont_inherit=True)
    # the comments stay with their elements: each line that held `x,  # c` still does
    for line in source.splitlines():
        element = line.split("#")[0].strip()
        if "#" in line and element.endswith(",") and code != "TL204":
            assert any(l.strip().startswith(element) and l.strip().endswith(line.split("#", 1)[1].strip()) for l in after.splitlines()), (line, after)
    assert fixed_text(tmp_path, after, "--select", code) == after  # a second --fix changes nothing


@pytest.mark.parametrize("argument", ["out=buffer", "pin_memory=True", "layout=torch.sparse_coo"])
def test_create_then_move_is_not_fixed_when_an_argument_places_the_result(tmp_path: Path, argument: str) -> None:
    source = f"import torch\nbuffer = torch.empty(3)\nx = torch.zeros(3, {argument}).cuda()\n"
    (tmp_path / "f.py").write_text(source)
    code, found, _ = findings(tmp_path, "--fix", "--select", "TL110", "f.py")
    assert code == 1 and found == [("f.py", "TL110", 3)]
    assert (tmp_path / "f.py").read_text() == source


def test_autocast_rewrite_still_uses_an_accelerator(tmp_path: Path) -> None:
    source = "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n"
    after = fixed_text(tmp_path, source, "--select", "TL502")
    assert 'torch.amp.autocast("cuda")' in after
    for text in (source, after, after.replace('autocast("cuda")', 'autocast(device_type="cuda")')):
        assert FileContext(cst.parse_module(text), "f.py").devices.uses_accelerator(), text
    assert not FileContext(cst.parse_module(after.replace('"cuda"', '"cpu"')), "f.py").devices.uses_accelerator()
