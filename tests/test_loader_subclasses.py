"""A `DataLoader` subclass of another file is a `DataLoader` (review 5, Speech-Transformer's
`AudioDataLoader(data.DataLoader)`): built without `pin_memory` in a file that trains on the
GPU, TL202 holds. The join confirms the class's bases (`ClassSummary.bases`) and what its
`__init__` passes up itself (`ClassSummary.loader_sets`)."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths

_DATA = '''from torch.utils import data


class AudioDataLoader(data.DataLoader):
    def __init__(self, *args, LFR_m=1, **kwargs):
        super(AudioDataLoader, self).__init__(*args, **kwargs)
        self.lfr = LFR_m


class PinnedLoader(data.DataLoader):
    def __init__(self, dataset, **kwargs):
        super().__init__(dataset, pin_memory=True, **kwargs)


class ShardLoader:
    """Named like a loader, batches of its own: no DataLoader."""

    def __init__(self, rows, batch_size=1):
        self.rows, self.batch_size = rows, batch_size

    def __iter__(self):
        return iter(self.rows)
'''

_DERIVED = '''from data import AudioDataLoader, PinnedLoader


class BucketLoader(AudioDataLoader):
    pass


class PinnedBuckets(PinnedLoader):
    pass
'''

_TRAIN = '''import torch

from data import AudioDataLoader, ShardLoader
from derived import BucketLoader, PinnedBuckets


def main(ds):
    model = torch.nn.Linear(4, 1).cuda()
    tr_loader = AudioDataLoader(ds, batch_size=1, num_workers=4, shuffle=True)
    buckets = BucketLoader(ds, batch_size=1, num_workers=4, shuffle=True)
    pinned = PinnedBuckets(ds, batch_size=1, num_workers=4, shuffle=True)
    given = AudioDataLoader(ds, batch_size=1, num_workers=4, shuffle=True, pin_memory=True)
    shards = ShardLoader(ds, batch_size=1)
    for loader in (tr_loader, buckets, pinned, given, shards):
        for x in loader:
            model(x.cuda()).sum().backward()
'''


def _project(root: Path) -> Path:
    root.mkdir()
    for name, text in (("data.py", _DATA), ("derived.py", _DERIVED), ("train.py", _TRAIN)):
        (root / name).write_text(text)
    return root


def _lines(root: Path, paths: list[Path] | None = None, **options: object) -> set[tuple[str, int]]:
    result = lint_paths(paths or [root], from_table({"select": ["TL202"], "min-impact": "low"}, root), **options)  # type: ignore[arg-type]
    assert not result.errors
    return {(Path(f.location.path).name, f.line) for f in result.findings}


def test_a_subclass_of_another_file_is_a_dataloader(tmp_path: Path) -> None:
    assert _lines(_project(tmp_path / "p")) == {("train.py", 9), ("train.py", 10)}


def test_checking_the_training_file_alone_reads_the_classes_from_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    (root / "pyproject.toml").write_text("[tool.torchlint]\n")
    assert _lines(root, [root / "train.py"], project=True) == {("train.py", 9), ("train.py", 10)}
