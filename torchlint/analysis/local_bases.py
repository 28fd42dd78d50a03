"""Classes of one file and the library base a chain of them reaches (``class
FixedCategorical(torch.distributions.Categorical)``, ``class AudioDataLoader(DataLoader)``,
subclasses of those in the same file): a construction of such a class is one of that base."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 6  # a chain of subclasses in one file


def class_named(ctx: FileContext, name: str) -> cst.ClassDef | None:
    """The one class of the file called ``name`` (None where there are none or several)."""
    classes = ctx.tree.classes_named(name)
    return classes[0] if len(classes) == 1 else None


def constructed_class(ctx: FileContext, call: cst.Call) -> cst.ClassDef | None:
    """The class of this file that ``call`` constructs by its plain name."""
    name = dotted(call.func)
    return class_named(ctx, name) if name is not None and "." not in name else None


def reached_base(ctx: FileContext, cls: cst.ClassDef, wanted: Callable[[str], bool], depth: int = 0) -> str | None:
    """The qualified name of the first base ``wanted`` accepts that ``cls`` reaches through
    its bases and the classes of this file they name (any depth up to a bound)."""
    if depth > _DEPTH:
        return None
    for base in cls.bases:
        qualified = ctx.qname(base.value)
        if qualified is not None and wanted(qualified):
            return qualified
        parent = class_named(ctx, dotted(base.value) or "")
        if parent is not None and parent is not cls:
            found = reached_base(ctx, parent, wanted, depth + 1)
            if found is not None:
                return found
    return None


def local_chain(ctx: FileContext, cls: cst.ClassDef) -> list[cst.ClassDef]:
    """``cls`` and the classes of this file its bases name, first base first (up to a bound)."""
    chain = [cls]
    while len(chain) <= _DEPTH:
        parent = next((found for base in chain[-1].bases if (found := class_named(ctx, dotted(base.value) or "")) is not None
                       and found not in chain), None)
        if parent is None:
            break
        chain.append(parent)
    return chain
