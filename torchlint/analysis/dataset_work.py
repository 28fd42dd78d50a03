"""What a ``Dataset`` class of this file does for each sample (analysis/samples.py holds
the answer): decodes audio or images, computes a spectrogram, augments, reads a file,
tokenizes; or only indexes what it holds in memory. TL201 tiers a loader by it, here and,
through the summary, from another file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import AUDIO_LOADERS, IMAGE_DECODERS, VIDEO_DECODERS
from torchlint.analysis.in_memory_datasets import GIVEN_ITEMS, in_memory_class
from torchlint.analysis.names import dotted
from torchlint.analysis.samples import SampleWork

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# What a call does, by its qualified name (or dotted spelling), first match wins.
_BY_NAME: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loads audio", AUDIO_LOADERS),
    ("computes a spectrogram", ("torch.stft", "librosa.stft", "librosa.feature.melspectrogram", "librosa.feature.mfcc",
                                "torchaudio.compliance.kaldi.fbank", "torchaudio.transforms.MelSpectrogram", "torchaudio.transforms.Spectrogram")),
    ("decodes video", VIDEO_DECODERS),
    ("decodes an image", IMAGE_DECODERS),
    ("reads a file", ("open", "numpy.load", "torch.load", "pickle.load", "json.load", "h5py.File", "numpy.fromfile")),
)
# The same by the last part of a name the analysis cannot qualify (a project helper, a
# method of an object the dataset holds): `load_wav_to_torch`, `self.stft.mel_spectrogram`.
_BY_WORD: tuple[tuple[str, frozenset[str]], ...] = (
    ("computes a spectrogram", frozenset({"stft", "spectrogram", "melspectrogram", "mfcc", "fbank"})),
    ("loads audio", frozenset({"wav", "audio", "flac"})),
    ("decodes an image", frozenset({"imread", "image", "img", "jpeg", "jpg", "png"})),
)
_LOADING = frozenset({"load", "read", "decode", "open", "imread"})  # a word of the name that says it loads
_AUGMENTING = frozenset({"transform", "transforms", "augment", "augmentation", "aug", "augmentations"})
_TOKENIZING = frozenset({"tokenize", "tokenizer", "encode"})
_TRANSFORM = "applies its transform"
_HEAVY = frozenset({"loads audio", "computes a spectrogram", "decodes video", "decodes an image", "augments"})
_HANDLE_READS = frozenset({"read", "readline", "readlines", "readinto", "seek"})
_HANDLES = frozenset({"file", "f", "fp", "fh", "fd", "handle", "fin", "infile", "reader"})  # what a file handle is called
_ENTRIES = ("__getitem__", "__getitems__", "__iter__", "__next__")
_WORKER_SPLITS = frozenset({"get_worker_info", "split_by_worker"})


def is_dataset_class(cls: cst.ClassDef) -> bool:
    """Does ``cls`` make samples one at a time (``__getitem__``, or a stream's ``__iter__``)?"""
    return any(isinstance(s, cst.FunctionDef) and s.name.value in _ENTRIES for s in cls.body.body)


def dataset_work(ctx: FileContext, cls: cst.ClassDef) -> SampleWork | None:
    """What ``cls`` does for each sample; None when it is no dataset (neither
    ``__getitem__`` nor ``__iter__``)."""
    methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
    entries = [methods[name] for name in _ENTRIES if name in methods]  # a stream's `__iter__` and `__next__` both
    if not entries:
        return None
    iterable = _iterable(ctx, cls, methods)
    calls = [call for method in _reached(ctx, entries, methods) for call in ctx.tree.descendants(method) if type(call) is cst.Call]
    found: list[str] = []
    for call in calls:
        what = _what_it_does(ctx, call)
        if what is not None and what not in found:
            found.append(what)
    heavy = [what for what in found if what in _HEAVY]
    # the heavy work named first; a transform it was given besides (stylegan2's decode, then `self.transform(img)`)
    work = " and ".join((heavy + [what for what in found if what == _TRANSFORM] if heavy else found)[:3])
    sharded = any((dotted(c.func) or "").rsplit(".", 1)[-1] in _WORKER_SPLITS for m in methods.values()
                  for c in ctx.tree.descendants(m) if type(c) is cst.Call)
    held = in_memory_class(ctx, cls.name.value) if not found else None
    return SampleWork(f"{cls.name.value}.{entries[0].name.value}", work, bool(heavy), held is not None, iterable, sharded,
                      given=held == GIVEN_ITEMS)


def loader_dataset(ctx: FileContext, loader: cst.Call) -> tuple[cst.ClassDef | None, cst.Call | None]:
    """The class of this file that built the loader's dataset (in every branch that binds
    it), or else the one constructor call of a class named elsewhere (``TextMelLoader(...)``
    imported from the project's ``data_utils``: the join finds what it does)."""
    dataset = ctx.argument(loader, 0, "dataset")
    built = ctx.values.constructors(dataset.value, loader) if dataset is not None else []
    names = {dotted(b.func) for b in built}
    if not built or len(names) != 1 or None in names:
        return None, None
    name = names.pop()
    classes = ctx.tree.classes_named(name)
    if len(classes) == 1:
        return classes[0], None
    return None, (built[0] if not classes else None)  # defined twice here: unknown


def several_datasets(ctx: FileContext, loader: cst.Call) -> bool:
    """Is the loader's dataset one of several classes (bound in branches): what each does
    per sample is known only class by class?"""
    dataset = ctx.argument(loader, 0, "dataset")
    built = ctx.values.constructors(dataset.value, loader) if dataset is not None else []
    return len({dotted(b.func) for b in built}) > 1


def _iterable(ctx: FileContext, cls: cst.ClassDef, methods: dict[str, cst.FunctionDef]) -> bool:
    """An ``IterableDataset`` (by its base), or a dataset with ``__iter__`` and no ``__getitem__``."""
    for base in cls.bases:
        name = ctx.qname(base.value) or dotted(base.value) or ""
        if name.rsplit(".", 1)[-1] == "IterableDataset":
            return True
    return "__iter__" in methods and "__getitem__" not in methods


def _reached(ctx: FileContext, entries: list[cst.FunctionDef], methods: dict[str, cst.FunctionDef]) -> list[cst.FunctionDef]:
    """``entries`` and the methods of their class they call through ``self.``, transitively."""
    seen = list(entries)
    index = 0
    while index < len(seen) and len(seen) < 16:  # bounded: a class of a few helpers
        for call in ctx.tree.descendants(seen[index]):
            if type(call) is cst.Call and type(call.func) is cst.Attribute and dotted(call.func.value) == "self":
                method = methods.get(call.func.attr.value)
                if method is not None and method not in seen:
                    seen.append(method)
        index += 1
    return seen


def _what_it_does(ctx: FileContext, call: cst.Call) -> str | None:
    name = ctx.qname(call.func) or dotted(call.func)
    if name is None:
        return None
    for what, names in _BY_NAME:
        if name in names:
            return what
    if name.startswith(("torchvision.transforms.", "albumentations.")):
        return "augments"
    last = name.rsplit(".", 1)[-1]
    if last in _HANDLE_READS and name.rsplit(".", 2)[-2].lower() in _HANDLES:
        return "reads a file"  # `self.file.seek(...)`, `self.file.read(n)`: a handle opened in `__init__`
    words = set(last.lower().split("_"))
    if last.lower() in _AUGMENTING and name.startswith("self."):
        return _TRANSFORM  # `self.transform(image)`: given, maybe only `ToTensor()`: work, not known heavy
    for what, markers in _BY_WORD:
        if words & markers and (what == "computes a spectrogram" or words & _LOADING):
            return what
    if words & _TOKENIZING or name.endswith(".tokenizer"):
        return "tokenizes text"
    if words & _LOADING and len(words) > 1:
        return "reads a file"  # `load_sample(path)`, `read_annotation(f)`: a loading helper
    return None
