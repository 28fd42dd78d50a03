"""What a call on ``self`` runs: ``self.train_step()`` in a base class's ``train_iteration`` runs the
override of each project subclass whose object it is (decision-transformer's ``SequenceTrainer``
and ``ActTrainer``), and the base's own method only where some object may still run it: the base
class is built itself, or a subclass keeps it (``Project.built``). A method no object runs is dead."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchlint.analysis.project import Project


def self_dispatch(project: Project, path: str, class_key: str, name: str) -> list[tuple[str, str]]:
    """Every (file, method key) a call of ``self.<name>()`` in class ``class_key`` of ``path`` may
    run: the method the class resolves, unless no object runs it (:func:`overridden`), and the
    override each of its project subclasses (any depth) resolves."""
    own = project.method(path, class_key, name)
    if own is None:
        return []
    subclasses = project.subclasses(path, class_key)
    overrides = [found for sub in subclasses if (found := project.method(*sub, name)) is not None and found != own]
    kept = [] if overrides and _never_runs(project, path, class_key, own, subclasses, name) else [own]
    return list(dict.fromkeys(kept + overrides))


def overridden(project: Project, path: str, class_key: str, name: str) -> bool:
    """Does no object of the project run method ``name`` of class ``class_key``: the class is
    never built (and some file builds classes: ``Project.built`` is known), and every project
    subclass of it overrides the method? A library's base class with no subclass here is not."""
    own = project.method(path, class_key, name)
    return own == (path, f"{class_key}.{name}") and _never_runs(project, path, class_key, own, project.subclasses(path, class_key), name)


def _never_runs(project: Project, path: str, class_key: str, own: tuple[str, str], subclasses: list[tuple[str, str]], name: str) -> bool:
    built = project.built
    if built is None or not subclasses or (path, class_key) in built:
        return False  # (unknown what is built; no subclass: the class itself is what runs; built itself)
    return all(project.method(*sub, name) != own for sub in subclasses)
