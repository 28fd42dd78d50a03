"""``DataLoader`` subclasses (``class AudioDataLoader(data.DataLoader)``): a construction of
one is a ``DataLoader(...)`` for the data-loading rules. In this file, by the class's bases;
in another file, by the join (a class named like a loader, imported from the project:
``Pending.loader``, confirmed by the class's bases (analysis/loader_bases.py), which ``ClassSummary.loader_sets``
completes with the options its ``__init__`` passes up itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.loader_bases import DATALOADERS
from torchlint.analysis.local_bases import class_named, constructed_class, local_chain, reached_base
from torchlint.analysis.members import method_named
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
POSITIONS = {"dataset": 0, "batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4, "num_workers": 5, "collate_fn": 6, "pin_memory": 7}
_DEPTH = 6  # a chain of subclasses in one file


def local_loader_class(ctx: FileContext, call: cst.Call) -> cst.ClassDef | None:
    """The class of this file that ``call`` constructs, when its bases (in this file) reach
    ``DataLoader``."""
    cls = constructed_class(ctx, call)
    return cls if cls is not None and reached_base(ctx, cls, DATALOADERS.__contains__) is not None else None


def loader_candidate(ctx: FileContext, call: cst.Call) -> bool:
    """A class imported from another module named like a loader (``AudioDataLoader``,
    ``InfiniteDataLoader``): the join tells whether it subclasses ``DataLoader``."""
    name = dotted(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    if "Loader" not in last or not last[:1].isupper() or class_named(ctx, last) is not None:
        return False
    qualified = ctx.qname(call.func) or ""
    return bool(qualified) and not qualified.startswith("torch.")  # torch's own loaders are DataLoader itself or none


def loader_sets(ctx: FileContext, cls: cst.ClassDef) -> tuple[str, ...] | None:
    """For a class that may be a ``DataLoader`` subclass (a base named like a loader): the
    options its ``__init__`` passes up itself (``super().__init__(ds, pin_memory=True,
    **kwargs)``: ``("dataset", "pin_memory")``); None for other classes."""
    if not any("Loader" in (dotted(base.value) or "") for base in cls.bases):
        return None
    init = method_named(cls, "__init__")
    up = _super_init(ctx, init) if init is not None else None
    if up is None:
        return ()
    names = {v: k for k, v in POSITIONS.items()}
    return tuple([names[i] for i, arg in enumerate(a for a in up.args if a.keyword is None and not a.star) if i in names]
                 + [a.keyword.value for a in up.args if a.keyword is not None])


def passed_up_off(ctx: FileContext, cls: cst.ClassDef) -> tuple[str, ...]:
    """The keywords the class's ``__init__`` passes up to ``super().__init__`` as a literal ``False``
    (drqv2's ``TruncatedNormal(pyd.Normal)``: ``super().__init__(loc, scale, validate_args=False)``)."""
    init = method_named(cls, "__init__")
    up = _super_init(ctx, init) if init is not None else None
    return tuple(a.keyword.value for a in up.args if a.keyword is not None and type(a.value) is cst.Name
                 and a.value.value == "False") if up is not None else ()


def sets_itself(ctx: FileContext, cls: cst.ClassDef, option: str) -> bool:
    """Does the subclass (or a subclass of this file between it and ``DataLoader``) pass
    ``option`` up itself: the construction does not decide it."""
    return any(option in (loader_sets(ctx, each) or ()) for each in local_chain(ctx, cls))


def _super_init(ctx: FileContext, init: cst.FunctionDef) -> cst.Call | None:
    """``super().__init__(...)``, ``super(Cls, self).__init__(...)`` or ``Base.__init__(self, ...)``
    (its first argument dropped) in ``__init__``."""
    for node in ctx.tree.descendants(init):
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute or node.func.attr.value != "__init__":
            continue
        receiver = node.func.value
        if type(receiver) is cst.Call and dotted(receiver.func) == "super":
            return node
        if "Loader" in (dotted(receiver) or ""):
            return node.with_changes(args=node.args[1:])  # `DataLoader.__init__(self, ...)`
    return None
