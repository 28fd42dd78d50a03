"""A crash in a cross-file stage costs only the piece that raised.

Each file is checked under its own guard; the join, settling each file's waiting findings
and the findings at call sites run once for the whole project. A bug met there (a
dataset name bound to a function raised KeyError in settling and the whole check
reported nothing) costs the file it was met in its cross-file findings: that file is
named with the stage in one line on stderr (no traceback), the run exits 2 as for any
internal error, and every other file keeps its findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import run_check

from torchlint.cli import main
from torchlint.config import Config
from torchlint.engine import call_sites, isolate, lint_paths, settle

FILES = {
    "pyproject.toml": "[project]\nname = 'p'\n",
    # acc() runs every step only because train.py's loop calls it: a cross-file finding
    "helper.py": "def acc(x):\n    return x.item()\n",
    "train.py": (
        "import torch\nfrom helper import acc\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
        "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n    a = acc(out)\n"
    ),
    # a finding of its own loop: no join needed
    "other.py": (
        "import torch\nopt = torch.optim.SGD(params, lr=0.1)\nfor x, y in loader:\n    loss = model(x).sum()\n"
        "    loss.backward()\n    opt.zero_grad(set_to_none=False)\n    print(loss.item())\n    opt.step()\n"
    ),
    # a loader whose dataset is a class of another file: TL201 waits for the join's class
    "imagesets.py": (
        "import torch\nfrom PIL import Image\n\n\nclass Images(torch.utils.data.Dataset):\n"
        "    def __init__(self, paths):\n        self.paths = paths\n\n    def __len__(self):\n        return len(self.paths)\n\n"
        "    def __getitem__(self, i):\n        return Image.open(self.paths[i])\n"
    ),
    "data.py": (
        "import torch\nfrom torch.utils.data import DataLoader\nfrom imagesets import Images\n\n"
        "model = torch.nn.Linear(4, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\n"
        "def make(paths):\n    return DataLoader(Images(paths), batch_size=32)\n\n\n"
        "for x in make([]):\n    model(x.cuda()).sum().backward()\n    opt.step()\n"
    ),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _check(root: Path, *args: str) -> tuple[int, list[tuple[str, int, str]], str]:
    code, out, err = run_check(root, "--no-cache", "--output-format", "json", "--min-impact", "low", *args)
    return code, sorted((f["path"], f["line"], f["code"]) for f in json.loads(out)), err


def _of(found: list[tuple[str, int, str]], *paths: str) -> list[tuple[str, int, str]]:
    return [f for f in found if f[0] in paths]


def test_the_clean_run_has_a_cross_file_finding_in_every_stage(project: Path) -> None:
    code, found, err = _check(project, ".")
    assert code == 1 and "internal error" not in err
    assert ("helper.py", 2, "TL101") in found  # per-step only through train.py's loop
    assert ("data.py", 10, "TL201") in found  # settled by imagesets.py's class
    _, out, _ = run_check(project, "--no-cache", "--output-format", "json", "--select", "TL201", ".")
    assert "(`Images.__getitem__` decodes an image for each sample)" in json.loads(out)[0]["message"]
    assert ("other.py", 7, "TL101") in found


def _raising_for(real, name: str, error: Exception):  # type: ignore[no-untyped-def]
    def settle_file(file_result, *args):  # type: ignore[no-untyped-def]
        if file_result.summary is not None and file_result.summary.path.endswith(name):
            raise error
        return real(file_result, *args)
    return settle_file


def test_settling_one_file_raises_the_others_keep_their_findings(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, clean, _ = _check(project, ".")
    monkeypatch.setattr(settle, "_settle_file", _raising_for(settle._settle_file, "data.py", KeyError("Images")))
    code, found, err = _check(project, ".")
    assert code == 2  # an internal error, as ruff's exit status means it
    others = ("helper.py", "train.py", "other.py", "imagesets.py")
    assert _of(found, *others) == _of(clean, *others)  # the cross-file helper.py:2 included
    # data.py keeps what its own file shows; only the finding that waited for the join is gone
    assert _of(found, "data.py") == [f for f in _of(clean, "data.py") if f[2] != "TL201"] != []
    lines = [line for line in err.splitlines() if "internal error" in line]
    assert lines == ["torchlint: internal error in settle on data.py: KeyError: 'Images' "
                     "(its findings are those its own file shows, without the project's steps)"]
    assert "Traceback" not in err


def test_a_join_that_raises_on_two_files_together_leaves_out_one_of_them(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, clean, _ = _check(project, ".")
    real = isolate.join

    def join(summaries):  # type: ignore[no-untyped-def]
        summaries = list(summaries)
        names = {Path(s.path).name for s in summaries}
        if {"data.py", "imagesets.py"} <= names:  # a bug only their meeting triggers
            raise ValueError("the two met")
        return real(summaries)

    monkeypatch.setattr(isolate, "join", join)
    code, found, err = _check(project, ".")
    assert code == 2
    lines = [line for line in err.splitlines() if "internal error" in line]
    # the file whose addition made the join fail: the later of the two in the join's order
    assert len(lines) == 1 and "internal error in join on imagesets.py: ValueError: the two met" in lines[0], err
    assert "left out of the project's join" in lines[0] and "Traceback" not in err
    others = ("helper.py", "train.py", "other.py")
    assert _of(found, *others) == _of(clean, *others)  # the join of the rest still links helper.py to train.py's loop
    assert _of(found, "imagesets.py") == _of(clean, "imagesets.py")  # settled as its own project, its own findings kept
    assert ("data.py", 10, "TL201") in found  # still a loader without workers, what its samples cost unknown


def test_a_join_that_always_raises_keeps_every_files_own_findings(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def join(summaries):  # type: ignore[no-untyped-def]
        raise RuntimeError("broken join")

    monkeypatch.setattr(isolate, "join", join)
    code, found, err = _check(project, ".")
    assert code == 2 and "Traceback" not in err
    assert ("other.py", 7, "TL101") in found and ("other.py", 6, "TL303") in found  # its own loop's, no join needed
    assert ("helper.py", 2, "TL101") not in found  # that one needs the join
    named = sorted(line.split(" on ")[1].split(":")[0] for line in err.splitlines() if "internal error in join" in line)
    assert named == ["data.py", "helper.py", "imagesets.py", "other.py", "train.py"]  # each once


def test_settling_another_file_at_the_given_files_call_sites_raises(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, found, _ = _check(project, "train.py", "other.py")
    assert code == 1 and ("train.py", 10, "TL101") in found  # helper.py's read, at train.py's call
    real = call_sites._stepped

    def stepped(other, steps):  # type: ignore[no-untyped-def]
        if other.summary.path.endswith("helper.py"):
            raise IndexError("no such site")
        return real(other, steps)

    monkeypatch.setattr(call_sites, "_stepped", stepped)
    code, after, err = _check(project, "train.py", "other.py")
    assert code == 2
    assert after == [f for f in found if f != ("train.py", 10, "TL101")] != []
    lines = [line for line in err.splitlines() if "internal error" in line]
    assert lines == ["torchlint: internal error in call sites on helper.py: IndexError: no such site "
                     "(the given files' calls into it report none of its per-step findings)"]


def test_stdin_keeps_its_own_findings_when_settling_it_raises(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "_settle_file", _raising_for(settle._settle_file, "other.py", KeyError("x")))
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", "--stdin-filename", "other.py", "-"],
                                input=FILES["other.py"], catch_exceptions=False)
    assert result.exit_code == 2
    assert "other.py:7:11: TL101" in result.stdout
    assert "internal error in settle on other.py: KeyError: 'x'" in result.stderr and "Traceback" not in result.stderr


def test_debug_raises_what_a_stage_met(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "_settle_file", _raising_for(settle._settle_file, "data.py", KeyError("Images")))
    monkeypatch.chdir(project)
    with pytest.raises(KeyError, match="Images"):
        lint_paths([Path(".")], Config(), debug=True)
    # without --debug the run goes on and says so
    result = lint_paths([Path(".")], Config())
    assert [(e.path, e.code) for e in result.errors] == [("data.py", "settle")]
