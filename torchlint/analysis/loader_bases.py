"""Whether a class another file constructs is a ``DataLoader`` subclass, from the project's
summaries (pure data, no libcst: settling runs on cached results). analysis/loader_classes.py
finds the candidates and what each class passes up itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchlint.analysis.project import Project

DATALOADER = "torch.utils.data.DataLoader"
DATALOADERS = frozenset({DATALOADER, "torch.utils.data.dataloader.DataLoader"})


def confirmed_loader(project: Project, path: str, ref: tuple, option: str) -> bool:
    """Does ``ref`` (a class another file constructs) subclass ``DataLoader``, without any
    class between passing ``option`` up itself?"""
    owner = project.class_of(ref, path, 0)
    if owner is None:
        return False
    chain = project.mro(*owner)
    if any(option in (cls.loader_sets or ()) for _, cls in chain):
        return False
    return any(base[0] == "import" and base[-1] in DATALOADERS for _, cls in chain for base in cls.bases)
