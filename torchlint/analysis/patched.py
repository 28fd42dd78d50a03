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
    from torchlint.analysis.project import Project

# The module classes a model builds once per layer (`LlamaAttention`, `LlamaDecoderLayer`,
# `GPT2Block`, `BertSelfAttention`, `T5LayerNorm`, `LlamaMLP`): a forward patched into one runs per layer.
_PER_LAYER_SUFFIXES = ("Attention", "Layer", "Block", "MLP", "Norm")


def patched_forwards(ctx: FileContext, keys: dict[int, str]) -> tuple[tuple[str, str, bool, str], ...]:
    """(function key, class, per layer, installer) for each ``Cls.forward = function`` of this file,
    where ``function`` is a function of this file (``keys``: id -> key) and ``Cls`` a class it does
    not define (a library's); per layer where the class is named for a layer of a model. The
    installer is the function that makes the assignment (``replace_llama_attn_with_flash_attn``),
    "" at module level (the import installs it): the join runs the patch only where a call of the
    project runs its installer (``installed_patches``)."""
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


def installed_patches(project: Project) -> frozenset[tuple[str, str]]:
    """The functions installing a patched forward (``FileSummary.patched``) that the project may
    run: one some call of the project runs (train_xformers.py's ``replace_llama_attn_with_xformers_attn()``),
    or one a file imports, by name or with its whole module, at its top level (a file without torch
    keeps no top-level or conditional call in its summary: the import stands for them). Only the
    calls named like an installer are resolved."""
    installers = {(path, installer) for path, summary in project.files.items() for _, _, _, installer in summary.patched if installer}
    if not installers:
        return frozenset()
    names = {installer.rsplit(".", 1)[-1] for _, installer in installers}
    found: set[tuple[str, str]] = set()
    for path, summary in project.files.items():
        for call in (*summary.calls, *summary.guarded, *summary.every_n):  # (a rare or every-N call installs it too)
            if any(isinstance(part, str) and part.rsplit(".", 1)[-1] in names for part in call.target):
                found.update(project.callees(call.target, path))
        for _, ref in summary.exports:
            if ref[0] != "import":
                continue  # (a namespace's member: a function of this file)
            whole = project.module_file(ref[2], path, ref[1])
            found.update(installer for installer in installers if installer[0] == whole != path)  # `import patch`: any of its functions
            if ref[2].rsplit(".", 1)[-1] in names:
                one = project.function(ref, path)
                if one is not None:
                    found.add(one)
        for level, module in summary.stars:  # `from patch import *`
            whole = project.module_file(module, path, level)
            found.update(installer for installer in installers if installer[0] == whole != path)
    return frozenset(found & installers)
