"""The sizes of a file's output layers: the names that give an ``nn.Linear`` its outputs or an
``nn.Embedding`` its rows (a vocabulary, a class count), so a tensor one of them sizes is known large."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_reach import FACTORIES
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# (the layer, the position and keyword of the size it takes from a vocabulary or class count)
_SIZED_LAYERS = {"torch.nn.Linear": (1, "out_features"), "torch.nn.Embedding": (0, "num_embeddings")}


def output_size_names(ctx: FileContext) -> frozenset[str]:
    """The last part of each name or attribute that sizes a Linear's outputs or an Embedding's rows
    in this file (``nn.Linear(decoder_dim, vocab_size)``, ``nn.Embedding(self.vocab_size, d)``: ``vocab_size``);
    made once per file, when a check asks."""
    memo = ctx.__dict__.get("_output_size_names")
    if memo is None:
        found = set()
        for call in ctx.calls_named(*_SIZED_LAYERS):
            position, keyword = _SIZED_LAYERS[ctx.qname(call.func) or ""]
            arg = ctx.keyword(call, keyword) or ctx.argument(call, position)
            name = dotted(arg.value) if arg is not None and not arg.star else None
            if name is not None:
                found.add(name.rsplit(".", 1)[-1])
        memo = ctx.__dict__["_output_size_names"] = frozenset(found)
    return memo


def output_sized(ctx: FileContext, size: cst.BaseExpression) -> bool:
    """Is ``size`` (a name or an attribute) one of the file's output-layer sizes: a vocabulary's or a class count's?"""
    name = dotted(size) if type(size) in (cst.Name, cst.Attribute) else None
    return name is not None and name.rsplit(".", 1)[-1] in output_size_names(ctx)


def vocabulary_sized(ctx: FileContext, call: cst.Call, sizes: list[cst.BaseExpression] | None = None) -> bool:
    """Is ``call`` a torch factory given three sizes or more, one of them an output-layer size
    (``torch.zeros(b, max_len, vocab_size)``: tens of megabytes, whatever the batch)? ``sizes``: the
    sizes as its caller read them (else its positional arguments, or the tuple given as one)."""
    if sizes is None:
        if ctx.qname(call.func) not in FACTORIES:
            return False
        sizes = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
            sizes = [element.value for element in sizes[0].elements]  # type: ignore[attr-defined]
    return len(sizes) >= 3 and any(output_sized(ctx, size) for size in sizes)
