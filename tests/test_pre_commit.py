"""The real pre-commit framework runs the hook from this repository.

`pre-commit run` against this repository's HEAD shows the hook's verdicts and keeps its
environment in PRE_COMMIT_HOME, where the test checks that no torch was installed; the
commits through the installed git hook use that environment."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, ahead, session_env

pytestmark = pytest.mark.slow

BAD = "import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    print(loss.item())\n"
CLEAN = "import torch\nx = torch.zeros(3)\n"


def _pre_commit_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    home = tmp_path_factory.mktemp("pre-commit-home")
    env = dict(session_env(), PRE_COMMIT_HOME=str(home), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    env.pop("PYTHONPATH", None)
    return env


def _repo(path: Path, content: str, env: dict[str, str]) -> Path:
    path.mkdir()
    (path / "train.py").write_text(content)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True, env=env)
    subprocess.run(["git", "add", "train.py"], cwd=path, check=True, env=env)
    return path


def _run(repo: Path, env: dict[str, str], name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--files", name, "--verbose"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )


@ahead()
def hook_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """(the environment, with its PRE_COMMIT_HOME; `pre-commit run` on a bad file; on a clean
    one), the hook installed from HEAD once, by the first run (mostly a wait on pip, made ahead
    of the tests). `pre-commit try-repo` of the working tree showed the same verdicts from a
    second environment of its own (tens of seconds, and a second pip beside the first): in CI
    the working tree is HEAD, and the hook's verdicts through git's own hook are
    test_a_commit_that_touches_only_the_helper_is_stopped's."""
    pre_commit_env = _pre_commit_env(tmp_path_factory)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    repo = _repo(tmp_path_factory.mktemp("hooks") / "installed", BAD, pre_commit_env)
    (repo / "clean.py").write_text(CLEAN)
    subprocess.run(["git", "add", "clean.py"], cwd=repo, check=True, env=pre_commit_env)
    (repo / ".pre-commit-config.yaml").write_text(f"repos:\n  - repo: {ROOT}\n    rev: {head}\n    hooks:\n      - id: torchlint\n")
    clean = _run(repo, pre_commit_env, "clean.py")  # installs the hook's environment
    return pre_commit_env, _run(repo, pre_commit_env, "train.py"), clean


@pytest.fixture(scope="module")
def pre_commit_env(hook_runs) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The environment whose PRE_COMMIT_HOME holds the hook installed from HEAD."""
    return hook_runs[0]


def test_hook_fails_on_bad_file_and_passes_on_clean(hook_runs) -> None:  # type: ignore[no-untyped-def]
    # the hook's environment has torchlint but no torch
    pre_commit_env, bad, run = hook_runs
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "train.py:5:11: TL101" in bad.stdout
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Passed" in run.stdout
    envs = list(Path(pre_commit_env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*"))
    assert envs
    for env_dir in envs:
        assert not list(env_dir.glob("lib/python*/site-packages/torch")), "the hook installed torch"
        assert list(env_dir.glob("lib/python*/site-packages/torchlint*"))


PACKAGE = {
    "pyproject.toml": "[project]\nname = 'mytrain'\n",
    "mytrain/__init__.py": "",
    "mytrain/utils.py": "def accuracy(logits, labels):\n    return (logits.argmax(dim=1) == labels).float().mean()\n",
    "mytrain/train.py": (
        "import torch\nfrom mytrain.utils import accuracy\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
        "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n    acc = accuracy(out, y)\n"
    ),
}


def _git(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def test_a_commit_that_touches_only_the_helper_is_stopped(tmp_path: Path, pre_commit_env: dict[str, str]) -> None:
    """pre-commit passes only the changed file: the helper is still checked in its project's
    context, so `.item()` added to a helper the training loop in another file calls every
    step stops the commit, and the commit that takes it out again goes through."""
    repo = tmp_path / "project"
    for name, text in PACKAGE.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    (repo / ".pre-commit-config.yaml").write_text(f"repos:\n  - repo: {ROOT}\n    rev: {head}\n    hooks:\n      - id: torchlint\n")
    _git(repo, pre_commit_env, "init", "-q")
    _git(repo, pre_commit_env, "add", ".")
    assert _git(repo, pre_commit_env, "commit", "-qm", "start").returncode == 0
    installed = subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, env=pre_commit_env, capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    helper = repo / "mytrain" / "utils.py"
    helper.write_text(PACKAGE["mytrain/utils.py"].replace(".mean()\n", ".mean().item()\n"))
    _git(repo, pre_commit_env, "add", "mytrain/utils.py")
    stopped = _git(repo, pre_commit_env, "commit", "-m", "report accuracy as a number")
    said = stopped.stdout + stopped.stderr  # git shows the hook's output on stderr
    assert stopped.returncode != 0, said
    assert "mytrain/utils.py:2:12: TL101" in said and "mytrain/train.py:10" in said, said
    assert "Found 1 problem" in said  # the helper's finding only: train.py is context, not checked

    helper.write_text(PACKAGE["mytrain/utils.py"].replace(".mean()\n", ".mean()  # stays on the device\n"))
    _git(repo, pre_commit_env, "add", "mytrain/utils.py")
    passed = _git(repo, pre_commit_env, "commit", "-m", "keep accuracy on the device")
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_a_commit_that_touches_only_the_caller_is_stopped(tmp_path: Path, pre_commit_env: dict[str, str]) -> None:
    """The other way round: the helper's `.item()` was committed when nothing called it
    every step; a commit that changes only train.py, to call it in the training loop, is
    stopped on train.py's call, naming the helper's line."""
    repo = tmp_path / "project"
    files = dict(PACKAGE)
    files["mytrain/utils.py"] = PACKAGE["mytrain/utils.py"].replace(".mean()\n", ".mean().item()\n")
    files["mytrain/train.py"] = PACKAGE["mytrain/train.py"].replace("    acc = accuracy(out, y)\n", "")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    (repo / ".pre-commit-config.yaml").write_text(f"repos:\n  - repo: {ROOT}\n    rev: {head}\n    hooks:\n      - id: torchlint\n")
    _git(repo, pre_commit_env, "init", "-q")
    _git(repo, pre_commit_env, "add", ".")
    assert _git(repo, pre_commit_env, "commit", "-qm", "start").returncode == 0
    installed = subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, env=pre_commit_env, capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    (repo / "mytrain" / "train.py").write_text(PACKAGE["mytrain/train.py"])
    _git(repo, pre_commit_env, "add", "mytrain/train.py")
    stopped = _git(repo, pre_commit_env, "commit", "-m", "log the accuracy every step")
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0, said
    assert "mytrain/train.py:10:11: TL101" in said and "mytrain/utils.py:2" in said, said
    assert "Found 1 problem" in said
