"""TL201 tiers a loader by what its dataset does per sample (issue 32): heavy work (audio,
a spectrogram, an image decode) with one worker is still a serial producer; a dataset that
only indexes tensors it holds gives workers nothing, in this file or another (the join
reads the class's summary); an IterableDataset's hint says each worker needs its own share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

PROJECT = FIXTURES / "projects" / "loaders"


def _lint(root: Path, cache: Path | None = None):  # type: ignore[no-untyped-def]
    result = lint_paths([root], from_table({"select": ["TL201"], "min-impact": "low"}, root), cache=cache)
    assert not result.errors
    return {f.line: f for f in result.findings}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "loaders"
    shutil.copytree(PROJECT, root)
    return root


def test_a_dataset_of_another_file_sets_the_loaders_finding(project: Path) -> None:
    found = _lint(project)
    text = (project / "train.py").read_text()
    assert {(line, "TL201") for line in found} == expected_markers(text)
    assert {(line, "TL201"): f.impact for line, f in found.items()} == expected_impacts(text)
    one_worker = found[19]
    assert "`num_workers=1`" in one_worker.message
    assert "(`SpeechSet.__getitem__` loads audio and computes a spectrogram for each sample)" in one_worker.message
    assert one_worker.fix_hint.startswith("Raise `num_workers`")
    assert "loads audio and computes a spectrogram" in found[20].message
    given = found[22]  # CachedSet only indexes the tensors it was given: low, wherever they were loaded
    assert given.impact == "low" and "what its constructor was given" in given.impact_reason


def test_streams_get_the_hint_a_stream_needs(project: Path) -> None:
    found = _lint(project)
    unsharded, sharded, map_style = found[23].fix_hint, found[24].fix_hint, found[20].fix_hint
    assert "`Stream` is an `IterableDataset`" in unsharded and "get_worker_info()" in unsharded
    assert "every sample N times" in unsharded
    assert "already gives each worker its own part" in sharded and "N times" not in sharded
    assert map_style.startswith("Pass `num_workers` > 0 (about 4 per GPU")


def test_the_cached_results_settle_the_same(project: Path, tmp_path: Path) -> None:
    first = _lint(project, tmp_path / "cache")
    again = _lint(project, tmp_path / "cache")
    assert {(line, f.impact, f.message, f.fix_hint) for line, f in first.items()} == \
        {(line, f.impact, f.message, f.fix_hint) for line, f in again.items()}


def test_checking_one_file_reads_its_datasets_from_the_project(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.torchlint]\n")
    result = lint_paths([project / "train.py"], from_table({"select": ["TL201"], "min-impact": "low"}, project), project=True)
    assert {f.line for f in result.findings} == {19, 20, 22, 23, 24}


def test_a_dataset_the_project_does_not_hold_stays_as_it_was() -> None:
    source = (
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "from elsewhere import Clips\n"
        "train_loader = DataLoader(Clips('x'), batch_size=8)\n"
        "one = DataLoader(Clips('x'), batch_size=8, num_workers=1)\n"
        "for loader in (train_loader, one):\n"
        "    for x in loader:\n"
        "        x.cuda()\n"
    )
    found = lint_source(source, "train.py", from_table({"select": ["TL201"], "min-impact": "low"}, Path(".")))
    assert [(f.line, f.message.endswith("while the model waits")) for f in found] == [(4, True)]


STREAM = '''
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        {split}
        for path in paths:
            yield torch.load(path)


train_loader = DataLoader(Shards(["a.pt"]), batch_size=None)
for batch in train_loader:
    batch.cuda()
'''


@pytest.mark.parametrize(("split", "says"), [
    ("paths = self.paths", "yield every sample N times"),
    ("info = get_worker_info(); paths = self.paths[info.id::info.num_workers]", "already gives each worker its own part"),
])
def test_a_stream_of_the_same_file_gets_the_streams_hint(split: str, says: str) -> None:
    config = from_table({"select": ["TL201"], "min-impact": "low"}, Path("."))
    [found] = lint_source(STREAM.format(split=split), "train.py", config)
    assert says in found.fix_hint
    assert "(`Shards.__iter__` reads a file for each item it yields)" in found.message


def test_a_noqa_silences_a_finding_its_dataset_settles(project: Path) -> None:
    train = project / "train.py"
    lines = train.read_text().splitlines()
    lines[18] = lines[18].split("  # expect")[0] + "  # noqa: TL201"
    train.write_text("\n".join(lines) + "\n")
    result = lint_paths([project], from_table({"select": ["TL201", "TL001"], "min-impact": "low"}, project))
    assert [(f.line, f.code) for f in result.findings if Path(f.path).name == "train.py"] == \
        [(20, "TL201"), (22, "TL201"), (23, "TL201"), (24, "TL201")]



def test_a_dataset_made_by_a_function_keeps_the_findings(tmp_path: Path) -> None:
    """``data = dataset(); DataLoader(data, ...)`` with ``dataset`` a function (ddp_train.py):
    the name resolves to no class, so nothing is known of its samples and the finding stands as
    it would without the join. Settling once raised a KeyError there and the whole check lost
    every finding of every file: ddp_no_sampler.py's TL602 went with it."""
    for name in ("ddp_train.py", "ddp_no_sampler.py"):
        shutil.copy(FIXTURES / "scripts" / name, tmp_path / name)
    result = lint_paths([tmp_path], from_table({"select": ["TL201", "TL602"], "min-impact": "low"}, tmp_path))
    assert not result.errors
    assert ("ddp_no_sampler.py", 14, "TL602") in {(Path(f.path).name, f.line, f.code) for f in result.findings}


def test_a_loader_drawn_through_a_generator_takes_the_drawing_loops_tier() -> None:
    """stylegan2's `loader = sample_data(loader)` then `next(loader)` in its training loop (sty11):
    the batches feed that loop (high), and the words name the decode and the transform both."""
    path = FIXTURES / "rules" / "TL201" / "flagged_generator_draws.py"
    found = {f.line: f for f in lint_source(path.read_text(), str(path), from_table({"select": ["TL201"], "min-impact": "low"}, FIXTURES))}
    assert found[46].impact == "high" and "training loop" in found[46].impact_reason
    assert "(`Records.__getitem__` decodes an image and applies its transform for each sample)" in found[46].message
    assert found[49].impact == "medium"  # the same generator, drawn by a loop that trains nothing
