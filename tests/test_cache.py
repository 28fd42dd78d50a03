"""The result cache: warm runs agree with cold ones, the join re-runs on cached summaries,
bad entries are misses, writes are atomic, the directory is bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchlint.config import Config
from torchlint.engine import cache as result_cache
from torchlint.engine import lint_paths
from torchlint.engine.results import FileResult
from torchlint.findings import Finding, Location

HELPER = "def accuracy(logits, y):\n    return (logits.argmax(1) == y).float().mean().item()\n"
TRAIN = """import torch
from helpers import accuracy

for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    print(accuracy(model(x), y))
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "helpers.py").write_text(HELPER)
    (root / "train.py").write_text(TRAIN)
    (root / "other.py").write_text("import torch\nx = torch.zeros(3)\n")
    return root


def lint(root: Path, cache: Path | None, **config: object) -> object:
    return lint_paths([root], Config(root=root, **config), cache=cache)  # type: ignore[arg-type]


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "entries-v1").iterdir())


def test_a_warm_run_reads_every_file_from_the_cache_and_agrees(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = lint(project, cache)
    warm = lint(project, cache)
    assert cold.cached == 0 and warm.cached == 3
    assert [f.code for f in cold.findings] == ["TL101"]  # the helper, reached from the loop
    assert warm.findings == cold.findings and warm.errors == []
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    assert not [p for p in (cache / "entries-v1").iterdir() if p.name.startswith(".tmp-")]


def test_one_changed_file_is_checked_again_and_the_join_runs_on_cached_summaries(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert [Path(f.path).name for f in lint(project, cache).findings] == ["helpers.py"]
    (project / "train.py").write_text(TRAIN.replace("print(accuracy(model(x), y))", "pass"))
    warm = lint(project, cache)
    assert warm.cached == 2  # helpers.py came from the cache ...
    assert warm.findings == []  # ... and its finding went with the loop that called it


def test_the_configuration_is_part_of_the_key(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lint(project, cache)
    ignored = lint(project, cache, ignore=("TL101",))
    assert ignored.cached == 0 and ignored.findings == []
    per_file = lint(project, cache, per_file_ignores={"helpers.py": ("TL101",)})
    assert per_file.cached == 2 and per_file.findings == []  # only helpers.py's key changed


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign", "empty", "bad pickle"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(project: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    cold = lint(project, cache)
    for entry in entries(cache):
        data = entry.read_bytes()
        entry.write_bytes({
            "truncate": data[: len(data) // 2],
            "garbage": os.urandom(200),
            "foreign": data.replace(entry.name.encode(), b"0" * len(entry.name), 1),
            "empty": b"",
            "bad pickle": data[: data.index(b"\n", 20) + 1] + b"\x80\x05not a pickle",
        }[damage])
    again = lint(project, cache)
    assert again.cached == 0 and again.findings == cold.findings and again.errors == []
    assert lint(project, cache).cached == 3  # rewritten


def test_an_entry_of_another_shape_is_a_miss(tmp_path: Path) -> None:
    import pickle

    store = result_cache.Cache(tmp_path)
    store.store("k" * 64, FileResult(None, [Finding("TL101", "x", "m", Location("a.py", 1))]))
    path = tmp_path / "entries-v1" / ("k" * 64)
    header = path.read_bytes().split(b"\n", 2)
    path.write_bytes(b"\n".join(header[:2]) + b"\n" + pickle.dumps((["not a finding"], [], None)))
    assert store.load("k" * 64) is None


def test_an_unwritable_cache_never_stops_the_run(project: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = lint(project, blocker)
    assert [f.code for f in result.findings] == ["TL101"] and result.errors == []


def test_the_cache_is_pruned_to_its_bound(tmp_path: Path) -> None:
    store = result_cache.Cache(tmp_path, max_entries=10)
    for i in range(15):
        store.store(f"{i:064d}", FileResult(None))
        os.utime(tmp_path / "entries-v1" / f"{i:064d}", (1000 + i, 1000 + i))
    removed = store.prune()
    kept = sorted(p.name for p in (tmp_path / "entries-v1").iterdir())
    assert removed == 7 and kept == [f"{i:064d}" for i in range(7, 15)]  # the newest 8


def test_where_the_cache_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "given"
    assert result_cache.cache_dir(tmp_path, given) == given
    monkeypatch.setenv(result_cache.CACHE_DIR_ENV, str(tmp_path / "env"))
    assert result_cache.cache_dir(tmp_path) == tmp_path / "env"
    monkeypatch.delenv(result_cache.CACHE_DIR_ENV)
    assert result_cache.cache_dir(tmp_path) == tmp_path / ".torchlint_cache"


def test_the_cli_caches_by_default_and_not_with_no_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from torchlint.cli import main

    monkeypatch.delenv(result_cache.CACHE_DIR_ENV)
    monkeypatch.chdir(project)
    assert CliRunner().invoke(main, ["check", "--no-cache", "."]).exit_code == 1
    assert not (project / ".torchlint_cache").exists()
    assert CliRunner().invoke(main, ["check", "."]).exit_code == 1
    assert len(entries(project / ".torchlint_cache")) == 3
    assert (project / ".torchlint_cache" / ".gitignore").is_file()


def test_the_fix_path_works_from_cached_results(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "amp.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    cache = tmp_path / "cache"
    lint(root, cache)
    planned = lint_paths([root], Config(root=root), cache=cache, fix="safe")
    assert planned.cached == 1 and len(planned.edits) == 1
    assert 'torch.amp.GradScaler("cuda")' in planned.edits[0].after
