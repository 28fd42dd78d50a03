"""cProfile's ``profile.prof`` read back as function-level hotspots.

pstats keys are ``(filename, firstlineno, funcname)``: function granularity,
the first *decorator* line for a decorated function, and the filename as the
code object saw it. The child runs the script by absolute path, so user
filenames are absolute; any relative one is resolved against the run's cwd.
"""

from __future__ import annotations

import marshal
import pstats
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchlint.profiler.session import Hotspot, resolve_path
from torchlint.profiler.usercode import is_user_file


def function_hotspots(prof: Path, cwd: str, *, user_only: bool = True) -> list[Hotspot]:
    """One :class:`Hotspot` per function in ``prof`` (user functions only by default)."""
    stats = pstats.Stats(str(prof))
    out: list[Hotspot] = []
    # once per file, not per function: torch's import puts ~9,000 functions of ~800 files in the table
    paths: dict[str, tuple[str, bool]] = {}
    for (filename, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~" or filename.startswith("<"):
            continue
        if filename not in paths:
            resolved = resolve_path(filename, cwd)
            paths[filename] = (resolved, not user_only or is_user_file(resolved))
        path, wanted = paths[filename]
        if not wanted:
            continue
        out.append(
            Hotspot(
                source="cprofile",
                path=path,
                line=int(line),
                granularity="function",
                function=func,
                op=None,
                self_s=float(tt),
                total_s=float(ct),
                calls=int(nc),
            )
        )
    return out


# --------------------------------------------------------------------------
# profile.prof as the user's program: torchlint's frames taken out
# --------------------------------------------------------------------------

PROBE_PREFIX = "<torchlint probe "  # the name each probe wrapper's code object carries

_Key = tuple  # (filename, line, function name), as pstats keys its table
_Edge = tuple  # (primitive calls, calls, inline seconds, cumulative seconds)


def _is_torchlint(key: _Key) -> bool:
    from torchlint.profiler.usercode import _TORCHLINT_DIR

    return str(key[0]).startswith(_TORCHLINT_DIR)


def _wrapped(key: _Key, stats: dict, op: str) -> _Key | None:
    """The function a probe wrapper called: its callee named like the probed attribute."""
    attr = op.rsplit(".", 1)[-1]
    pattern = re.compile(rf"(?<![\w]){re.escape(attr)}(?![\w])")
    best = None
    for callee, (_cc, _nc, _tt, ct, callers) in stats.items():
        if key in callers and not _is_torchlint(callee) and pattern.search(str(callee[2])):
            if best is None or ct > stats[best][3]:
                best = callee
    return best


def _drop(stats: dict, key: _Key) -> None:
    """Remove ``key`` and the calls it made; callees nobody else calls go too."""
    if stats.pop(key, None) is None:
        return
    for callee in [k for k, v in stats.items() if key in v[4]]:
        cc, nc, tt, ct, callers = stats[callee]
        ecc, enc, ett, ect = callers.pop(key)
        if not callers:
            _drop(stats, callee)
        else:
            stats[callee] = (cc - ecc, nc - enc, max(tt - ett, 0.0), max(ct - ect, 0.0), callers)


def _add_own_time(stats: dict, key: _Key, seconds: float) -> None:
    """``seconds`` spent in ``key`` itself (a dropped frame's residue): its inline time,
    and each call edge's in proportion to the calls."""
    entry = stats.get(key)
    if entry is None or seconds <= 0:
        return
    cc, nc, tt, ct, callers = entry
    for caller, (ecc, enc, ett, ect) in callers.items():
        callers[caller] = (ecc, enc, ett + seconds * enc / max(nc, 1), ect)
    stats[key] = (cc, nc, tt + seconds, ct, callers)


def _take_path(stats: dict, path: list[_Key], seconds: float) -> None:
    """Take ``seconds`` of torchlint's work out of each distinct function on ``path``
    (the hook's caller first, the root last) and each distinct call between two of them:
    once each, as cProfile counts a recursive function's time once."""
    for key in set(path):
        entry = stats.get(key)
        if entry is not None:
            cc, nc, tt, ct, callers = entry
            stats[key] = (cc, nc, tt, max(ct - seconds, 0.0), callers)
    for callee, caller in set(zip(path, path[1:])):
        entry = stats.get(callee)
        if entry is not None and caller in entry[4]:
            ecc, enc, ett, ect = entry[4][caller]
            entry[4][caller] = (ecc, enc, ett, max(ect - seconds, 0.0))


def _replace_probe(stats: dict, key: _Key, charged: dict[_Key, float]) -> None:
    """The probe's callers call the wrapped function instead; the wrapper's own time is
    the call's (the user's code paid it), torchlint's work inside it (``charged``, per
    caller) is not."""
    cc, nc, tt, ct, callers = stats[key]
    op = str(key[2])[len(PROBE_PREFIX):].rstrip(">")
    target = _wrapped(key, stats, op)
    if target is None or ct <= 0:
        for caller, edge in callers.items():
            _add_own_time(stats, caller, max(edge[3] - charged.get(caller, 0.0), 0.0))
        stats[key] = (cc, nc, tt, ct, {})
        _drop(stats, key)
        return
    tcc, tnc, ttt, tct, tcallers = stats[target]
    ecc, enc, ett, ect = tcallers.pop(key)
    for caller, (pcc, pnc, ptt, pct) in callers.items():
        paid = max(pct - charged.get(caller, 0.0), 0.0)  # this caller's calls, without torchlint's work
        share = pct / ct
        old = tcallers.get(caller, (0, 0, 0.0, 0.0))
        tcallers[caller] = (old[0] + pcc, old[1] + pnc, old[2] + ett * share, old[3] + ect * share)
        # the wrapper's own work (finding the user's line, counting) is no part of the
        # wrapped call: plain cProfile would time the call alone. It stays in the caller.
        _add_own_time(stats, caller, max(paid - ect * share, 0.0))
    stats[key] = (cc, nc, tt, ct, {})  # its callers now call the target
    _drop(stats, key)


def _splice(stats: dict, key: _Key) -> None:
    """Fold ``key`` into its caller: its calls become the caller's, its own time too
    (torch's ``_call_impl.<locals>.inner``, which only torchlint's module hooks made run)."""
    entry = stats.get(key)
    if entry is None:
        return
    cc, nc, tt, ct, callers = entry
    total = sum(e[3] for e in callers.values()) or 1.0
    parents = [(p, e[3] / total if total else 1.0 / len(callers)) for p, e in callers.items()]
    for callee, (c_cc, c_nc, c_tt, c_ct, c_callers) in list(stats.items()):
        edge = c_callers.pop(key, None) if callee != key else None
        if edge is None:
            continue
        for parent, share in parents:
            old = c_callers.get(parent, (0, 0, 0.0, 0.0))
            c_callers[parent] = (old[0] + round(edge[0] * share), old[1] + round(edge[1] * share),
                                 old[2] + edge[2] * share, old[3] + edge[3] * share)
    for parent, share in parents:
        _add_own_time(stats, parent, tt * share)
    del stats[key]


def user_view(stats: dict, tool: list[tuple[_Key, list[_Key], float]] | None = None,
              splice: tuple[_Key, ...] = (), names: dict[str, str | None] | None = None) -> dict:
    """pstats' table with torchlint's frames taken out, so that snakeviz shows the
    user's program as ``python -m cProfile`` would:

    - each probe wrapper's callers call the wrapped torch function directly (the
      wrapper's own time is charged to that call, as the user's code paid it);
    - torchlint's work noted by :mod:`torchlint.profiler.tooltime` (``tool``: entry
      frame, the path above it, seconds; the step hook, the evaluation window) is
      taken out of exactly the functions on its path;
    - torchlint's other frames (a module hook's few microseconds) are removed and
      their time left to their caller as its own;
    - the functions in ``splice`` are folded into their callers;
    - C methods called through a probe get plain cProfile's names back (``names``, by
      default the probes' own: tooltime.CPROFILE_NAMES), and slots it never lists
      (``Tensor.__bool__``) are folded into their callers."""
    stats = {k: (cc, nc, tt, ct, dict(callers)) for k, (cc, nc, tt, ct, callers) in stats.items()}
    charged: dict[_Key, dict[_Key, float]] = {}  # entry -> its caller -> seconds
    for entry, path, seconds in tool or ():
        if path:
            per_caller = charged.setdefault(entry, {})
            per_caller[path[0]] = per_caller.get(path[0], 0.0) + seconds
    for key in [k for k in stats if _is_torchlint(k) and str(k[2]).startswith(PROBE_PREFIX)]:
        if key in stats:
            _replace_probe(stats, key, charged.get(key, {}))
    for _entry, path, seconds in tool or ():
        _take_path(stats, path, seconds)
    for key in [k for k in stats if _is_torchlint(k)]:
        entry = stats.get(key)
        if entry is None:
            continue
        for caller, edge in entry[4].items():
            if not _is_torchlint(caller):  # what the path did not account for stays the caller's own time
                _add_own_time(stats, caller, max(edge[3] - charged.get(key, {}).get(caller, 0.0), 0.0))
        stats[key] = (entry[0], entry[1], entry[2], entry[3], {})
        _drop(stats, key)
    for key in splice:
        _splice(stats, key)
    _drop_orphans(stats)
    return _cprofile_names(stats, names if names is not None else _probe_names())


def _drop_orphans(stats: dict) -> None:
    """Remove what only torchlint's removed frames called: what no root reaches now (a
    recursive function, ``pathlib.Path.mkdir`` under a trace export, still calls itself
    once its torchlint caller is gone). The roots are the entries nobody calls."""
    callees: dict[_Key, list[_Key]] = {}
    for key, entry in stats.items():
        for caller in entry[4]:
            callees.setdefault(caller, []).append(key)
    reached = {k for k, entry in stats.items() if not entry[4]}
    todo = list(reached)
    while todo:
        for callee in callees.get(todo.pop(), ()):
            if callee not in reached:
                reached.add(callee)
                todo.append(callee)
    for key in [k for k in stats if k not in reached]:
        del stats[key]
    for key, (cc, nc, tt, ct, callers) in list(stats.items()):
        gone = [c for c in callers if c not in reached]
        for caller in gone:  # the calls an orphan made are not the program's
            ecc, enc, ett, ect = callers.pop(caller)
            cc, nc, tt, ct = cc - ecc, nc - enc, max(tt - ett, 0.0), max(ct - ect, 0.0)
        if gone:
            stats[key] = (cc, nc, tt, ct, callers)


def _probe_names() -> dict[str, str | None]:
    from torchlint.profiler.tooltime import CPROFILE_NAMES

    return CPROFILE_NAMES


def _cprofile_names(stats: dict, names: dict[str, str | None]) -> dict:
    """C methods called through a probe under the names plain cProfile gives them; the
    slots it never lists (``if t:``) folded into their callers."""
    for key in [k for k in stats if k[0] == "~" and k[2] in names]:
        name = names[key[2]]
        if name is None:
            _splice(stats, key)
            continue
        renamed = ("~", 0, name)
        entry = stats.pop(key)
        for callee_entry in stats.values():  # a C method calls nothing back, but be exact
            if key in callee_entry[4]:
                callee_entry[4][renamed] = callee_entry[4].pop(key)
        if renamed in stats:  # calls made before the probe went in
            cc, nc, tt, ct, callers = stats[renamed]
            for caller, edge in entry[4].items():
                old = callers.get(caller, (0, 0, 0.0, 0.0))
                callers[caller] = tuple(a + b for a, b in zip(old, edge))
            entry = (cc + entry[0], nc + entry[1], tt + entry[2], ct + entry[3], callers)
        stats[renamed] = entry
    return stats


def write_user_profile(profiler: Any, path: Path, tool: list[tuple[_Key, list[_Key], float]] | None = None,
                       splice: tuple[_Key, ...] = (), script: tuple[str, str] | None = None,
                       ahead: Sequence[Any] = ()) -> None:
    """``profiler.dump_stats(path)``, with :func:`user_view` applied, the imports torchlint
    made ahead of the script grafted where the script would have made them (``ahead``:
    ahead.AheadImport), and the script's functions under the path the user typed
    (``script``: its absolute path, the typed one), as ``python -m cProfile SCRIPT`` names them."""
    from torchlint.profiler.ahead import graft

    profiler.create_stats()
    try:
        stats = user_view(profiler.stats, tool, splice)
        for each in ahead:
            try:
                stats = graft(stats, each)
            except Exception:  # an odd import table must not cost the script's: left out
                pass
        if script is not None and script[0] != script[1]:
            stats = _rename_file(stats, *script)
    except Exception:  # an odd table must not cost the profile: keep it as cProfile made it
        stats = profiler.stats
    with open(path, "wb") as f:
        marshal.dump(stats, f)


def _rename_file(stats: dict, old: str, new: str) -> dict:
    """Every key of file ``old`` as file ``new``, in the table and in every caller list."""
    def renamed(key: _Key) -> _Key:
        return (new, key[1], key[2]) if key[0] == old else key

    return {renamed(k): (cc, nc, tt, ct, {renamed(c): e for c, e in callers.items()})
            for k, (cc, nc, tt, ct, callers) in stats.items()}
