"""The module-level classes a file names nowhere but in their own ``class`` statement (and as the
base of such classes): no call, other base, default value, table, annotation, attribute or string
of the file mentions them (``FileSummary.unnamed``). The join keeps those no other file imports or builds either:
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
    unnamed = {c.name.value for c in module_classes if names[c.name.value] == 1 and c.name.value not in strings}
    while True:
        # a base named only by classes nothing names either (ImageBind's `Attention`, the base of an
        # unused `ViTAttention`): no code builds it through them (the join asks the other files)
        as_bases = Counter(b.value.value for c in module_classes if c.name.value in unnamed for b in c.bases if type(b.value) is cst.Name)
        more = {c.name.value for c in module_classes if c.name.value not in unnamed and c.name.value not in strings
                and as_bases[c.name.value] and names[c.name.value] - as_bases[c.name.value] == 1}
        if not more:
            break
        unnamed |= more
    return tuple(c.name.value for c in module_classes if c.name.value in unnamed)


__all__ = ["unnamed_classes"]
