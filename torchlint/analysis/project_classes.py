"""The project's class hierarchy over the summaries: a class's subclasses, the methods an abstract one's subclasses
define, the module classes whose ``forward`` takes given keywords (a part of :class:`torchlint.analysis.project.Project`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchlint.analysis.library_methods import called_attributes
from torchlint.analysis.project_index import ProjectIndex

if TYPE_CHECKING:
    from torchlint.analysis.summary import ClassSummary, Ref

MAX_CLASSES = 32  # classes one object may be (branches, callers' arguments): a bound on the fan-out


class ProjectClasses(ProjectIndex):
    """Subclasses, overrides and forwards by keyword (``Project`` supplies ``class_of`` and ``is_module``)."""

    if TYPE_CHECKING:
        def class_of(self, ref: Ref, importer: str, depth: int) -> tuple[str, str] | None: ...

        def is_module(self, path: str, class_key: str) -> bool: ...

        def mro(self, path: str, class_key: str, depth: int = 0) -> list[tuple[str, ClassSummary]]: ...

        def classes_of(self, ref: Ref, importer: str, depth: int = 0) -> list[tuple[str, str]]: ...

        def _method_of(self, owner: tuple[str, str], name: str, depth: int) -> tuple[str, str] | None: ...

    def library_method_callees(self, path: str, class_key: str, name: str) -> list[tuple[str, str]]:
        """``self._sa_block(x)`` in a class deriving from torch's ``nn.TransformerEncoderLayer``, with no such method of
        its own: the ``forward`` of each module the library's method calls that the class keeps (``self.self_attn``)."""
        for _, cls in self.mro(path, class_key) if class_key in self.classes.get(path, {}) else ():
            for base in cls.bases:
                attributes = called_attributes(base, name)
                if attributes:
                    return [m for attr in attributes for owner in self.classes_of(("attr", class_key, attr), path, 1)
                            if (m := self._method_of(owner, "__call__", 1)) is not None]
        return []

    def _overrides(self, method: tuple[str, str]) -> list[tuple[str, str]]:
        """For a method whose body only raises NotImplementedError (``ClassSummary.abstract``):
        the project's subclasses' own methods of that name, any depth (a call of it runs one)."""
        path, key = method
        class_key, _, name = key.rpartition(".")
        cls = self.classes.get(path, {}).get(class_key)
        if cls is None or name not in cls.abstract:
            return []
        return [(p, f"{sub}.{name}") for p, sub in self.subclasses(path, class_key) if name in self.classes[p][sub].methods]

    def has_subclasses(self, path: str, class_key: str) -> bool:
        """Does a class of the project derive from ``class_key`` of ``path``?"""
        return bool(self.subclasses(path, class_key))

    def subclasses(self, path: str, class_key: str) -> list[tuple[str, str]]:
        """The project's classes that derive from ``class_key`` of ``path``, any depth."""
        if self._derived is None:
            derived: dict[tuple[str, str], list[tuple[str, str]]] = {}
            for p, classes in self.classes.items():
                for key, cls in classes.items():
                    for base in cls.bases:
                        resolved = self.class_of(base, p, 1)
                        if resolved is not None and resolved != (p, key):
                            derived.setdefault(resolved, []).append((p, key))
            self._derived = derived
        found: list[tuple[str, str]] = []
        work = [(path, class_key)]
        while work and len(found) < MAX_CLASSES:
            for sub in self._derived.get(work.pop(), ()):
                if sub not in found:
                    found.append(sub)
                    work.append(sub)
        return found

    def forwards_taking(self, keywords: tuple[str, ...]) -> list[tuple[str, str]]:
        """The ``forward`` of the project's module classes (one or two, no test's) that take every keyword of
        a decode loop's call of a model the summary could not name (bark's ``model(x, merge_context=True,
        use_cache=..., past_kv=kv_cache)`` on a model out of a table of loaded models: ``GPT.forward``)."""
        found = []
        for path, summary in self.files.items():
            for cls in summary.classes:
                forward = f"{cls.key}.forward"
                if "forward" in cls.methods and not cls.test and set(keywords) <= set(self.params.get(path, {}).get(forward, ())) \
                        and self.is_module(path, cls.key):
                    found.append((path, forward))
        return found if len(found) <= 2 else []  # (more: keywords many models take, no telling which)

