"""A file given alone (as pre-commit and editors give them) is checked in its project's
context: the other files' summaries join with its own, only its findings are reported,
and the summaries come from the cache once made."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import run_check
from torchlint.cli import main
from torchlint.config import Resolver
from torchlint.engine import lint_paths
from torchlint.engine import project_files
from torchlint.engine.cache import Cache

UTILS = "import torch\n\n\ndef accuracy(logits, labels):\n    correct = (logits.argmax(dim=1) == labels).float().mean()\n    return correct.item()\n"
TRAIN = (
    "import torch\nfrom mytrain.utils import accuracy\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
    "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n    acc = accuracy(out, y)\n"
    "    print(loss.item())\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mytrain").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mytrain'\n")
    (tmp_path / "mytrain" / "__init__.py").write_text("")
    (tmp_path / "mytrain" / "utils.py").write_text(UTILS)
    (tmp_path / "mytrain" / "train.py").write_text(TRAIN)
    return tmp_path


def test_a_given_helper_is_flagged_and_only_its_findings_are_reported(project: Path) -> None:
    code, out, _ = run_check(project, "--output-format", "concise", "mytrain/utils.py")
    assert code == 1
    assert out.splitlines()[0].startswith("mytrain/utils.py:6:12: TL101 `correct.item()` in `accuracy()` (run every step from a training loop at mytrain/train.py:10)")
    assert "mytrain/train.py:11" not in out and "in 1 file (1 checked)" in out  # train.py's own TL101 is not reported
    # (train.py's `loss.item()` right after `accuracy(...)`, whose run ends in a read, is low: shown with `--min-impact low`)
    code, out, _ = run_check(project, "--output-format", "concise", "--min-impact", "low", ".")
    assert "mytrain/utils.py:6:12: TL101" in out and "mytrain/train.py:11" in out  # the same finding as the whole run's


def test_stdin_is_checked_in_the_project_of_its_filename(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "mytrain" / "utils.py").write_text(UTILS.replace("correct.item()", "correct"))  # on disk: clean
    monkeypatch.chdir(project)  # stdin's text in this process (test_stdin.py's way), from the project as the editor runs it
    result = CliRunner().invoke(main, ["check", "-", "--stdin-filename", "mytrain/utils.py", "--output-format", "concise"],
                                input=UTILS, catch_exceptions=False)
    assert result.exit_code == 1 and result.stdout.startswith("mytrain/utils.py:6:12: TL101"), result.stdout + result.stderr


def test_the_context_comes_from_the_cache_once_made(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = tmp_path_factory.mktemp("cache")
    helper = project / "mytrain" / "utils.py"
    first = lint_paths([helper], Resolver(cwd=project), cache=cache, project=True)
    assert [f.code for f in first.findings] == ["TL101"]
    context = project_files.Context.around([helper], [helper], Resolver(cwd=project), Cache(cache))
    assert context.todo == [] and len(context.summaries) == 2  # train.py and __init__.py, summaries stored
    (project / "mytrain" / "train.py").write_text(TRAIN.replace("    acc = accuracy(out, y)\n", ""))
    assert lint_paths([helper], Resolver(cwd=project), cache=cache, project=True).findings == []  # a changed file is read again


def test_a_file_outside_any_project_stands_alone(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "train.py").write_text(TRAIN.replace("from mytrain.utils", "from utils"))
    assert project_files.project_root(tmp_path / "utils.py", Resolver(cwd=tmp_path)) is None
    code, out, _ = run_check(tmp_path, "utils.py")
    assert code == 0 and "No problems found" in out


def test_a_project_too_large_to_join_is_said(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(project_files, "MAX_PROJECT_FILES", 1)
    code, out, err = run_check(project, "mytrain/utils.py")
    assert code == 0 and "No problems found" in out
    assert "holds more than 1 source files: the given files were checked without the rest of their project" in err


def test_a_broken_config_elsewhere_in_the_project_is_said_not_fatal(project: Path) -> None:
    (project / "other").mkdir()
    (project / "other" / "torchlint.toml").write_text("select = [\n")
    (project / "other" / "x.py").write_text("import torch\n")
    code, out, err = run_check(project, "--output-format", "concise", "mytrain/utils.py")
    # said, not fatal: the rest of the project still joins (utils.py's per-step finding is kept)
    assert code == 1 and "left out of the project's join" in err and "cannot read" in err
    assert "mytrain/utils.py" in out
