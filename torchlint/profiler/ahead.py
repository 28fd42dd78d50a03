"""Imports torchlint makes ahead of the script, profiled so that ``profile.prof`` keeps them.

torchlint must patch torch before the script's first line runs (the probes, the step
hook), so the child imports torch itself, and torch._dynamo (which the first optimizer
construction would import), before cProfile starts on the script. Under plain
``python -m cProfile SCRIPT`` those imports are the script's: ``import torch`` under the
script's ``<module>``, torch._dynamo under the first optimizer's construction, and
together they are most of a short script's cumulative time.

So each such import runs under a cProfile of its own (:func:`profile_import`), and
:func:`graft` puts its table into the script's, under the function that would have
made it: the import's calls become that function's, and its time is added to that
function and to every function and call above it, once per distinct function as cProfile
counts a recursive one (the mirror of :func:`torchlint.profiler.cprof._take_path`).
torchlint's own set-up after the imports is not profiled at all.

Standard library only: the bootstrap uses it before torch is imported.
"""

from __future__ import annotations

import ast
import cProfile
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchlint.profiler.tooltime import EXEC_KEY

Key = tuple  # (filename, first line, function name): pstats' key

#: the stand-in ``<module>`` that runs ``import NAME`` under the import's own profile
STAND_IN_FILE = "<torchlint import ahead>"
_EXEC = EXEC_KEY  # cProfile's key of builtins.exec
#: set to 0, the imports torchlint makes ahead of the script are neither profiled nor in profile.prof
PROFILE_IMPORTS_ENV = "TORCHLINT_PROFILE_IMPORTS"
_DISABLE = ("~", 0, "<method 'disable' of '_lsprof.Profiler' objects>")


@dataclass
class AheadImport:
    """One import made ahead of the script: its cProfile table and where it belongs."""

    name: str
    stats: dict
    seconds: float  # its cumulative time under cProfile, as the script would have paid it
    path: list[Key] = field(default_factory=list)  # the importing function first, then its callers to the root
    #: whether the script's run would have made the import at all (None: whenever the path ran)
    wanted: Callable[[dict], bool] | None = None


#: name -> the import; filled by the bootstrap (torch) and torchprof (torch._dynamo)
AHEAD: dict[str, AheadImport] = {}


def import_torch() -> None:
    """``import torch``, profiled (the bootstrap's, before the script). Raises what the
    import raises."""
    if "torch" not in sys.modules:  # imported before us (sitecustomize): nobody's import to show
        profile_import("torch")


def imports_of(script: str) -> list[AheadImport]:
    """The imports made ahead of ``script`` (its absolute path), each with the function it
    would have made it in: torch under the script's ``<module>`` where a module the script
    ran imports it (torch._dynamo's place is set by torchprof, at the first optimizer's
    construction)."""
    torch_import = AHEAD.get("torch")
    if torch_import is not None:
        torch_import.path = [(script, 1, "<module>"), EXEC_KEY]
        torch_import.wanted = lambda stats: run_imports(stats, "torch")
    return list(AHEAD.values())


def profile_import(name: str) -> AheadImport:
    """``import NAME`` under a cProfile of its own, run as a statement of a stand-in module
    so that the table starts as the script's would: ``<module> -> _find_and_load``.
    Raises what the import raises."""
    code = compile(f"import {name}\n", STAND_IN_FILE, "exec")
    # On unless opted out: the import runs a little slower under cProfile, before the script.
    profiler: Any = None if os.environ.get(PROFILE_IMPORTS_ENV) == "0" else cProfile.Profile()
    t0 = time.perf_counter()
    try:
        if profiler is not None:
            profiler.enable()
    except ValueError:  # another profiler holds the hook (3.12's sys.monitoring): import unprofiled
        profiler = None
    try:
        exec(code, {"__name__": "__torchlint_ahead__"})
    finally:
        if profiler is not None:
            profiler.disable()
    seconds = time.perf_counter() - t0
    stats: dict = {}
    if profiler is not None:
        profiler.create_stats()
        stats = profiler.stats
    stand_in = _stand_in(stats)
    if stand_in is not None:
        seconds = stats[stand_in][3]
    ahead = AheadImport(name, stats, seconds)
    AHEAD[name] = ahead
    return ahead


def _stand_in(stats: dict) -> Key | None:
    return next((k for k in stats if k[0] == STAND_IN_FILE), None)


def graft(stats: dict, ahead: AheadImport) -> dict:
    """A copy of ``stats`` (pstats' table of the script) with ``ahead``'s import put under
    ``ahead.path[0]``, as plain cProfile would have recorded it there. A path that is
    not in the table (the function never ran: no optimizer was built) grafts nothing:
    plain cProfile would not have imported it either; nor does one whose calls the table
    does not have."""
    path = [k for k in ahead.path if k in stats]
    stand_in = _stand_in(ahead.stats)
    if not ahead.path or len(path) != len(ahead.path) or stand_in is None:
        return stats
    if any(caller not in stats[callee][4] for callee, caller in zip(path, path[1:])):
        return stats  # not a chain of calls the table has: nowhere to put it
    if ahead.wanted is not None and not ahead.wanted(stats):
        return stats
    stats = {k: (cc, nc, tt, ct, dict(callers)) for k, (cc, nc, tt, ct, callers) in stats.items()}
    importer = path[0]
    on_path = set(path)
    path_edges = set(zip(path, path[1:]))
    seconds = ahead.stats[stand_in][3]
    for key, (cc, nc, tt, ct, callers) in ahead.stats.items():
        if key in (stand_in, _DISABLE):
            continue
        if key == _EXEC:  # less the call that ran the stand-in, which is no call of the program
            cc, nc, ct = 0, nc - 1, 0.0
        callers = {(importer if c == stand_in else c): e for c, e in callers.items()}
        if key in on_path:  # nested in the path's own call of it: recursive, its time already counted
            cc, ct = 0, 0.0
        _add(stats, key, (cc, nc, tt, ct), callers, path_edges)
    for key in on_path:  # the import's time, once in each distinct function above it
        cc, nc, tt, ct, callers = stats[key]
        stats[key] = (cc, nc, tt, ct + seconds, callers)
    for callee, caller in path_edges:
        e = stats[callee][4].get(caller)
        if e is not None:
            stats[callee][4][caller] = (e[0], e[1], e[2], e[3] + seconds)
    cc, nc, tt, ct, callers = stats[importer]  # the import statement's own few µs
    stats[importer] = (cc, nc, tt + ahead.stats[stand_in][2], ct, callers)
    return stats


def _add(stats: dict, key: Key, totals: tuple, callers: dict, path_edges: set) -> None:
    """Sum ``key``'s row and its call edges into ``stats`` (a call edge on the graft's
    path keeps its cumulative time: the path's share is added once, by the caller)."""
    old = stats.get(key)
    if old is None:
        merged: dict[Key, Any] = {}
        row = totals
    else:
        merged = old[4]
        row = tuple(a + b for a, b in zip(old[:4], totals))
    for caller, edge in callers.items():
        prev = merged.get(caller, (0, 0, 0.0, 0.0))
        nested = (key, caller) in path_edges
        merged[caller] = (prev[0] + (0 if nested else edge[0]), prev[1] + edge[1], prev[2] + edge[2],
                          prev[3] + (0.0 if nested else edge[3]))
    stats[key] = (*row, merged)


def run_imports(stats: dict, name: str) -> bool:
    """Whether a module the script ran (its ``<module>`` is in ``stats``: the script, its
    own modules, a library it imported) has an ``import NAME`` (or of a submodule, or
    ``from NAME import ...``) anywhere in its source: a script that never imports torch
    does not get torch's import, although torchlint made it."""
    files = {str(k[0]) for k in stats if k[2] == "<module>" and not str(k[0]).startswith(("<", "~"))}
    return any(_imports(f, name) for f in files)


def _imports(filename: str, name: str) -> bool:
    try:
        with open(filename, encoding="utf-8", errors="replace") as f:
            source = f.read()
        if name not in source:  # most modules: no need to parse
            return False
        tree = ast.parse(source, filename)
    except (OSError, SyntaxError, ValueError):
        return False

    def ours(module: str | None) -> bool:
        return module is not None and (module == name or module.startswith(name + "."))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(ours(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and ours(node.module):
            return True
    return False
