"""The project's module classes that no code runs as a model: every construction of them is idle
(``FileSummary.idle_builds``: tortoise's ``STFT``, kept by ``TacotronSTFT`` and only asked for
``transform``; segment-anything's ``SamOnnxModel``, only exported to ONNX). The join seeds no
forward of theirs as a model's (``join._model_reach``). Libcst-free: the join runs on warm caches."""

from __future__ import annotations

from torchlint.analysis.project import Project


def idle_models(project: Project) -> frozenset[tuple[str, str]]:
    """(file, class key) of each class built only idly in the project (see the module docstring)."""
    if any(summary.by_name for summary in project.files.values()):
        return frozenset()  # classes built from names (a config's `target`): any may be built and run
    verdict: dict[tuple[str, str], bool] = {}
    for path, summary in project.files.items():
        verdict.update(((path, key), False) for key in summary.registered)  # built by name, by a registry
        idle = {ref for ref, _ in summary.idle_builds}
        for ref, holder in summary.idle_builds:
            subclassed = bool(holder) and bool(project.subclasses(path, holder))  # a subclass elsewhere may call the attribute
            for cls in project.classes_of(ref, path, 1):
                verdict[cls] = verdict.get(cls, True) and not subclassed
        for ref in _references(summary):
            if ref not in idle:
                for cls in project.classes_of(ref, path, 1):
                    verdict[cls] = False  # built, kept, handed on or called some other way
    return frozenset(cls for cls, ok in verdict.items() if ok and not project.subclasses(*cls))  # (a subclass inherits its forward)


def _references(summary) -> list:
    """What the file's calls, arguments and kept attributes name (the refs ``join_params.constructed`` reads),
    and the classes whose objects it calls (``("object", cls, "__call__")``)."""
    refs: list = [ref for cls in summary.classes for _, ref in cls.attributes]
    for call in (*summary.calls, *summary.guarded, *summary.every_n):
        for target in call.target[1] if call.target[0] == "each" else (call.target,):
            refs.append(target[1] if target[0] == "object" else target)
        refs.extend(ref for _, ref in call.args)
    return [ref for ref in refs if isinstance(ref, tuple) and ref and ref[0] in ("local", "import", "each")]
