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
from pathlib import Path
from typing import Any

from torchlint.profiler.session import Hotspot, resolve_path
from torchlint.profiler.usercode import is_user_file


def function_hotspots(prof: Path, cwd: str, *, user_only: bool = True) -> list[Hotspot]:
    """One :class:`Hotspot` per function in ``prof`` (user functions only by default)."""
    stats = pstats.Stats(str(prof))
    out: list[Hotspot] = []
    for (filename, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~" or filename.startswith("<"):
            continue
        path = resolve_path(filename, cwd)
        if user_only and not is_user_file(path):
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


def _subtract_up(stats: dict, key: _Key, amount: float) -> None:
    """Take ``amount`` seconds out of ``key``'s cumulative time and, in proportion,
    out of every caller above it (they included it).

    Level by level, with each caller's share summed over the paths that reach it: a
    walk per path is exponential in a call graph with cycles (recursion through torch's
    own functions under DDP), which kept a rank writing its profile for minutes."""
    pending = {key: amount}
    for _level in range(200):
        above: dict[_Key, float] = {}
        for k, part_of_k in pending.items():
            entry = stats.get(k)
            if entry is None or part_of_k <= 0:
                continue
            cc, nc, tt, ct, callers = entry
            if ct <= 0:
                continue
            stats[k] = (cc, nc, tt, max(ct - part_of_k, 0.0), callers)
            for caller, (ecc, enc, ett, ect) in list(callers.items()):
                part = part_of_k * ect / ct
                callers[caller] = (ecc, enc, ett, max(ect - part, 0.0))
                if caller != k:
                    above[caller] = above.get(caller, 0.0) + part
        pending = {k: v for k, v in above.items() if v > 1e-9}
        if not pending:
            return


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
            stats[callee] = (cc - ecc, nc - enc, tt - ett, ct - ect, callers)


def user_view(stats: dict) -> dict:
    """pstats' table with torchlint's frames taken out, so that snakeviz shows the
    user's program: each probe wrapper's callers call the wrapped torch function
    directly (the wrapper's own time is charged to that call, as the user's code
    paid it), and torchlint's other work (the optimizer step hook that exports the
    trace) is removed along with its time in every caller above it."""
    stats = {k: (cc, nc, tt, ct, dict(callers)) for k, (cc, nc, tt, ct, callers) in stats.items()}
    for key in [k for k in stats if _is_torchlint(k) and str(k[2]).startswith(PROBE_PREFIX)]:
        cc, nc, tt, ct, callers = stats[key]
        op = str(key[2])[len(PROBE_PREFIX):].rstrip(">")
        target = _wrapped(key, stats, op)
        if target is not None and ct > 0:
            tcc, tnc, ttt, tct, tcallers = stats[target]
            ecc, enc, ett, ect = tcallers.pop(key)
            overhead = max(ct - ect, 0.0)
            for caller, (pcc, pnc, ptt, pct) in callers.items():
                share = pct / ct
                old = tcallers.get(caller, (0, 0, 0.0, 0.0))
                tcallers[caller] = (old[0] + pcc, old[1] + pnc, old[2] + (ett + overhead) * share, old[3] + (ect + overhead) * share)
            stats[target] = (tcc, tnc, ttt + overhead, tct + overhead, tcallers)
            stats[key] = (cc, nc, tt, ct, {})  # its callers now call the target
        _drop(stats, key)
    for key in [k for k in stats if _is_torchlint(k)]:
        entry = stats.get(key)
        if entry is None:
            continue
        callers = entry[4]
        outside = {c: e for c, e in callers.items() if not _is_torchlint(c)}
        for caller, edge in outside.items():  # torchlint's work was inside these calls
            _subtract_up(stats, caller, edge[3])
        stats[key] = (entry[0], entry[1], entry[2], entry[3], {})
        _drop(stats, key)
    return stats


def write_user_profile(profiler: Any, path: Path) -> None:
    """``profiler.dump_stats(path)``, with :func:`user_view` applied."""
    profiler.create_stats()
    try:
        stats = user_view(profiler.stats)
    except Exception:  # an odd table must not cost the profile: keep it as cProfile made it
        stats = profiler.stats
    with open(path, "wb") as f:
        marshal.dump(stats, f)
