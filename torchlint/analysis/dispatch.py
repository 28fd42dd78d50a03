"""What a call on ``self`` runs: ``self.train_step()`` in a base class's ``train_iteration`` runs the
method of whichever project class the object is (decision-transformer's ``SequenceTrainer`` and
``ActTrainer`` override it); where the project is seen building some of those classes
(``Project.built``), only the methods of the classes it builds. A method no object runs is dead:
its class is not built, and every subclass overrides it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchlint.analysis.project import Project


def self_dispatch(project: Project, path: str, class_key: str, name: str) -> list[tuple[str, str]]:
    """Every (file, method key) a call of ``self.<name>()`` in class ``class_key`` of ``path`` may
    run: for the class and each of its project subclasses (any depth), the method it resolves,
    kept where that class is built. Where none of them is seen built (a library's classes, or
    objects made in ways the join cannot see), every one of those methods."""
    own = project.method(path, class_key, name)
    if own is None:
        return []
    family = [(path, class_key), *project.subclasses(path, class_key)]
    resolved = [(cls, own if cls == family[0] else project.method(*cls, name)) for cls in family]
    built = project.built
    kept = [method for cls, method in resolved if method is not None and (built is None or cls in built)]
    return list(dict.fromkeys(kept or [method for _, method in resolved if method is not None]))


def overridden(project: Project, path: str, class_key: str, name: str) -> bool:
    """Does no object of the project run method ``name`` of class ``class_key``: the class is not
    built, some of its project subclasses are, and every subclass overrides the method? (Where
    nothing is known to be built, or the class has no subclass, it may run.)"""
    own = project.method(path, class_key, name)
    if own != (path, f"{class_key}.{name}"):
        return False
    built = project.built
    subclasses = project.subclasses(path, class_key)
    if built is None or (path, class_key) in built or not any(sub in built for sub in subclasses):
        return False  # (anything may be built; the class itself is; or none of the family is seen built)
    return all(project.method(*sub, name) != own for sub in subclasses)
