"""Which patched forwards the project installs (``FileSummary.patched``' installers), for the
join: summaries only, no tree, so a warm run that parses nothing imports no libcst."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchlint.analysis.project import Project


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
