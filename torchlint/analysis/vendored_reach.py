"""Code of a package vendored into a project that no code of the project reaches (pure data, over
the project's summaries): so-vits-svc carries a copy of whisper, runs its encoder, and never calls
its ``decode()``; the decode loop there is no step of this project (engine/settle_places.py)."""

from __future__ import annotations

from torchlint.analysis.setting_defaults import SettingDefaults
from torchlint.analysis.summary import CallSite
from torchlint.findings import Location


def uncalled_vendored(settings: SettingDefaults, site: Location) -> str | None:
    """Words for what a hot loop runs from ``site`` (its call in the loop) where the loop's
    function sits in a vendored package, one the project uses only in part, and no code of the
    project reaches it: so-vits-svc's copy of whisper, whose encoder it runs and whose
    ``DecodingTask._main_loop`` only ``decode()`` reaches, which nothing calls. A vendored package
    (``_vendored``) is nested in another package, calls nothing of the project outside itself, and
    is called by the project's code outside it. None where some call, a use as a value, or a call
    of that name the join cannot resolve may reach the function (a library's own package at the
    top of its project keeps its entry points: users call them)."""
    found = _hot_sites(settings).get(site)
    if found is None or not found[1].caller:
        return None
    path, call = found
    folder = path.rpartition("/")[0]
    if not _vendored(settings, folder):
        return None
    roots: list[str] = []
    if _reached(settings, path, call.caller, folder, {}, roots):
        return None
    root = sorted(roots)[0] if roots else call.caller
    return f"only where `{root}()` runs, in a package vendored into the project, and no code of this project calls it"


def _hot_sites(settings: SettingDefaults) -> dict[Location, tuple[str, CallSite]]:
    return settings.kept("vendored_reach.hot_sites", lambda: {call.location: (path, call) for path, summary in settings.project.files.items()
                                                              for call in summary.calls if call.loop is not None and call.location is not None})


def _vendored(settings: SettingDefaults, folder: str) -> bool:
    """Is ``folder`` a package nested in another one (its parent has an ``__init__.py`` too: not a
    library's own top-level package), that calls nothing of the project outside itself (a copy
    of another project), and that code of the project outside it, not a test, calls into?"""
    memo: dict[str, bool] = settings.kept("vendored_reach.vendored", dict)
    if folder not in memo:
        files = settings.project.files
        parent = folder.rpartition("/")[0]
        inside = [p for p in files if p.rpartition("/")[0] == folder]
        used = False
        if f"{folder}/__init__.py" in files and f"{parent}/__init__.py" in files:
            for p in inside:  # (a package using the project's own modules is part of the project)
                if any(c[0].rpartition("/")[0] != folder for call in files[p].calls for c in settings.project.callees(call.target, p)):
                    break
            else:
                used = any(c[0].rpartition("/")[0] == folder for p, summary in files.items()
                           if not p.startswith(folder + "/") and not p.rpartition("/")[2].startswith("test")
                           for call in summary.calls for c in settings.project.callees(call.target, p))
        memo[folder] = used
    return memo[folder]


def _reached(settings: SettingDefaults, path: str, function: str, folder: str, seen: dict[tuple[str, str], bool], roots: list[str]) -> bool:
    """May code of the project outside ``folder`` (or a module's top level) run ``function``?
    ``roots``: the functions with no caller on the way."""
    key = (path, function)
    if key not in seen:
        seen[key] = False  # (on the way: a call back to it reaches nothing new)
        seen[key] = _reached_now(settings, path, function, folder, seen, roots)
    return seen[key]


def _reached_now(settings: SettingDefaults, path: str, function: str, folder: str, seen: dict[tuple[str, str], bool], roots: list[str]) -> bool:
    owner, _, name = function.partition("#")[0].rpartition(".")
    # (a dunder or a forward runs on an object's construction or call, by no name a call site records)
    if name.startswith("__") or name in ("forward", "__call__") or len(seen) > 64:
        return True
    # (a method runs only on an object of its class: where none is built in code that runs, no call by its name,
    # nor a use of that name as a value, is this one; elsewhere either may be)
    if owner not in settings.project.classes.get(path, {}) or _built_where_run(settings, path, owner, folder, seen, roots):
        if name in settings.valued():
            return True
        for caller_path, call in settings.unresolved_named(name):  # (a call of that name the join cannot resolve: maybe this one)
            if caller_path.rpartition("/")[0] != folder or not call.caller or _reached(settings, caller_path, call.caller, folder, seen, roots):
                return True
    calls = settings.calls_of((path, function))
    for caller_path, call in calls:
        if caller_path.rpartition("/")[0] != folder or not call.caller or _reached(settings, caller_path, call.caller, folder, seen, roots):
            return True
    if not calls:
        roots.append(function.partition("#")[0])
    return False


def _built_where_run(settings: SettingDefaults, path: str, cls: str, folder: str, seen: dict[tuple[str, str], bool], roots: list[str]) -> bool:
    """May an object of class ``cls`` (of ``path``) be built by code of the project that runs: a
    construction outside ``folder``, at a module's top level or in a function reached, a subclass,
    a class built by name, or none seen (a factory's)?"""
    if settings.project.has_subclasses(path, cls) or any(summary.by_name for summary in settings.project.files.values()):
        return True
    built = [(caller_path, call) for caller_path, call in settings.constructions() if settings.project.class_of(call.target, caller_path, 1) == (path, cls)]
    return not built or any(caller_path.rpartition("/")[0] != folder or not call.caller or _reached(settings, caller_path, call.caller, folder, seen, roots)
                            for caller_path, call in built)
