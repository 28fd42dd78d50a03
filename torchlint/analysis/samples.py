"""What a dataset class does for each sample, as plain data: the work a DataLoader's
workers would take over (analysis/dataset_work.py finds it; the summary carries it to the
join, so a loader in one file learns what its dataset in another does). No libcst here:
settling reads it from cached results."""

from __future__ import annotations

from dataclasses import dataclass, replace

from torchlint.analysis.impact import Cost, assess
from torchlint.analysis.multiplicity import Where
from torchlint.findings import Finding, pickled_by_fields


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class SampleWork:
    """One dataset class: what its ``__getitem__`` (or ``__iter__``) does per sample."""

    method: str  # "TextMelLoader.__getitem__": where the work is
    work: str = ""  # in words, "loads audio and computes a spectrogram"; "" when nothing known
    heavy: bool = False  # decodes or computes (audio, a spectrogram, an image, augmentation): one process falls behind a step
    cheap: bool = False  # only indexes data it holds in memory: nothing for workers to do
    iterable: bool = False  # an IterableDataset: each worker iterates its own copy of the stream
    sharded: bool = False  # its `__iter__` splits the stream by `get_worker_info()` (or webdataset's `split_by_worker`)
    given: bool = False  # cheap, but indexes a list or tensor its constructor was given: in memory, or read lazily (low)

    def words(self) -> str:
        """" (`TextMelLoader.__getitem__` loads audio and computes a spectrogram for each
        sample)", or "" when the work is not known."""
        each = "item it yields" if self.iterable else "sample"  # a stream may yield whole batches
        return f" (`{self.method}` {self.work} for each {each})" if self.work else ""

    def unsharded_stream(self) -> bool:
        return self.iterable and not self.sharded


def workers_hint(work: SampleWork | None, default: str) -> str:
    """TL201's hint: workers are right for a map-style dataset, and for a stream only once
    each worker reads its own part of it (else each yields every sample)."""
    if work is None or not work.iterable:
        return default
    name = work.method.split(".")[0]
    if work.sharded:
        return (f"Pass `num_workers` > 0: `{name}` is an `IterableDataset` whose `__iter__` already gives each worker "
                "its own part of the stream (`get_worker_info()`)")
    return (f"`{name}` is an `IterableDataset` that does not split its stream among workers: each worker iterates its own "
            "copy, so `num_workers=N` would yield every sample N times. First split the stream in `__iter__` by "
            "`torch.utils.data.get_worker_info()` (its `id` out of `num_workers`; webdataset's `split_by_worker` does this "
            "for shards), then pass `num_workers` > 0")


#: Stands for what the dataset does per sample in a loader finding whose dataset class is in
#: another file, until the join finds that class (engine/settle.py).
WORK_PLACEHOLDER = "\ue001work\ue001"


def given_items(finding: Finding) -> Finding:
    """A loader finding over a dataset that only indexes what its constructor was given: the
    items are in memory (unless what it was given reads lazily); collation is all that is left."""
    impact, reason = assess(Cost.GIVEN_ITEMS_PIPELINE, Where.TRAIN)
    return replace(finding, impact=impact, impact_reason=reason)


def unseen_batches(finding: Finding) -> Finding:
    """A loader finding over whole batches (``batch_size=None``) from a dataset this project
    does not hold: what it does per batch is not seen, often a slice of arrays in memory (low)."""
    impact, reason = assess(Cost.PREBATCHED_PIPELINE, Where.TRAIN)
    return replace(finding, impact=impact, impact_reason=reason)
