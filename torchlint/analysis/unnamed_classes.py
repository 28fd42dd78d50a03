"""The module-level classes a file names nowhere but in their own ``class`` statement: no call,
base, default value, table, annotation, attribute or string of the file mentions them
(``FileSummary.unnamed``). The join keeps those no other file imports or builds either:
classes the project never builds (``join_params.never_built``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def unnamed_classes(ctx: FileContext) -> tuple[str, ...]:
    """The names of the module-level classes of the file that only their definition names."""
    module_classes = [s for s in ctx.tree.module.body if type(s) is cst.ClassDef]
    if not module_classes:
        return ()
    names = Counter(name.value for name in ctx.tree.nodes(cst.Name))
    # (`__all__ = ["Block"]`, a registry's `{"block": "Block"}`: a string naming it may build it)
    strings = {string.raw_value for string in ctx.tree.nodes(cst.SimpleString)}
    return tuple(c.name.value for c in module_classes if names[c.name.value] == 1 and c.name.value not in strings)


__all__ = ["unnamed_classes"]
