"""Forwards patched into a library's module classes: ``LlamaAttention.forward = forward``
(FastChat's flash-attention patch) makes a function of this file run on every call of that
module, which the library's model makes once per layer. The join runs such a function as it
runs a ``forward`` no step is seen to reach (``join._model_reach``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# The module classes a model builds once per layer (`LlamaAttention`, `LlamaDecoderLayer`,
# `GPT2Block`, `BertSelfAttention`, `T5LayerNorm`, `LlamaMLP`): a forward patched into one runs per layer.
_PER_LAYER_SUFFIXES = ("Attention", "Layer", "Block", "MLP", "Norm")


def patched_forwards(ctx: FileContext, keys: dict[int, str]) -> tuple[tuple[str, str, bool, str], ...]:
    """(function key, class, per layer, installer) for each ``Cls.forward = function`` of this file,
    where ``function`` is a function of this file (``keys``: id -> key) and ``Cls`` a class it does
    not define (a library's); per layer where the class is named for a layer of a model. The
    installer is the function that makes the assignment (``replace_llama_attn_with_flash_attn``),
    "" at module level (the import installs it): the join runs the patch only where a call of the
    project runs its installer (``patch_installs.installed_patches``)."""
    found: list[tuple[str, str, bool, str]] = []
    defined = {c.name.value for c in ctx.tree.nodes(cst.ClassDef)}
    for assign in ctx.tree.nodes(cst.Assign):
        value = assign.value
        if type(value) is not cst.Name:
            continue
        for target in assign.targets:
            owner = target.target.value if type(target.target) is cst.Attribute and target.target.attr.value == "forward" else None
            cls = (dotted(owner) or "").rsplit(".", 1)[-1] if owner is not None else ""
            if not cls[:1].isupper() or cls in defined:
                continue  # (`self.forward = ...`, an instance; a class of this file has its own `forward`)
            function = ctx.functions.named(value.value, assign)
            if function is not None and id(function) in keys:
                installer = ctx.tree.enclosing_function(assign)
                found.append((keys[id(function)], cls, cls.endswith(_PER_LAYER_SUFFIXES), keys.get(id(installer), "") if installer is not None else ""))
    return tuple(found)
