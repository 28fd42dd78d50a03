"""The result cache never unpickles an entry it did not write: entries are signed with a
per-user secret (mode 0600, in the user's cache directory), and a planted cache (a
cloned repository's `.torchlint_cache`, another user's) is a miss, never run."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.cli import main
from torchlint.config import Config
from torchlint.engine import cache as result_cache
from torchlint.engine import lint_paths

TRAIN = """import torch

for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    print(loss.item())
"""


class Payload:
    """What an attacker plants: unpickling it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.marker,))


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv(result_cache.CACHE_DIR_ENV, raising=False)
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "cloned"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "train.py").write_text(TRAIN)
    return root


def plant(cache: Path, marker: Path) -> int:
    """Replace every entry's body with a payload, keeping its header (the key is guessable)."""
    planted = 0
    for entry in (cache / "entries-v1").iterdir():
        data = entry.read_bytes()
        header = data[: data.index(b"\n", len(b"torchlint-cache 3\n")) + 1]
        entry.write_bytes(header + b"\0" * 32 + pickle.dumps(Payload(marker)))  # a made-up signature
        planted += 1
    return planted


def test_the_secret_is_the_users_own(user_cache: Path) -> None:
    secret = result_cache.user_secret()
    key = user_cache / "torchlint" / "key"
    assert secret is not None and key.read_bytes() == secret and len(secret) == result_cache.SECRET_SIZE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_planted_cache_is_never_unpickled_by_check(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    first = CliRunner().invoke(main, ["check", "--output-format", "concise", "."])
    assert first.exit_code == 1 and "TL101" in first.stdout
    marker = tmp_path / "pwned"
    assert plant(project / ".torchlint_cache", marker) == 1
    again = CliRunner().invoke(main, ["check", "--output-format", "concise", "."])
    assert not marker.exists(), "a pickle torchlint did not write was loaded"
    assert again.exit_code == 1 and again.stdout == first.stdout  # a miss: checked again, same report
    assert Payload.__name__.encode() not in next((project / ".torchlint_cache" / "entries-v1").iterdir()).read_bytes()  # rewritten


def test_another_users_entries_are_misses(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "shared-cache"
    lint_paths([project], Config(root=project), cache=cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-user"))
    result = lint_paths([project], Config(root=project), cache=cache)
    assert result.cached == 0 and [f.code for f in result.findings] == ["TL101"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    assert lint_paths([project], Config(root=project), cache=cache).cached == 0  # the other user's rewrite is theirs


def test_a_secret_others_can_read_disables_the_cache(project: Path, user_cache: Path, tmp_path: Path) -> None:
    key = user_cache / "torchlint" / "key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(result_cache.SECRET_SIZE))
    key.chmod(0o644)
    cache = tmp_path / "cache"
    result = lint_paths([project], Config(root=project), cache=cache)
    assert [f.code for f in result.findings] == ["TL101"]
    assert not (cache / "entries-v1").exists() or not list((cache / "entries-v1").iterdir())


def test_pruning_removes_only_entries(tmp_path: Path) -> None:
    """A cache directory planted as a link to the user's files: pruning never deletes them."""
    from torchlint.engine.results import FileResult

    store = result_cache.Cache(tmp_path, max_entries=2)
    (tmp_path / "entries-v1").mkdir()
    keep = [tmp_path / "entries-v1" / name for name in ("notes.txt", "F" * 64, "a" * 63)]
    for path in keep:
        path.write_text("mine")
        os.utime(path, (1, 1))
    for i in range(5):
        store.store(f"{i:064x}", FileResult(None))
    store.prune()
    assert all(path.exists() for path in keep)
    assert len([p for p in (tmp_path / "entries-v1").iterdir() if p not in keep]) == 1
