"""cProfile's ``profile.prof`` read back as function-level hotspots.

pstats keys are ``(filename, firstlineno, funcname)``: function granularity,
the first *decorator* line for a decorated function, and the filename as the
code object saw it. The child runs the script by absolute path, so user
filenames are absolute; any relative one is resolved against the run's cwd.
"""

from __future__ import annotations

import pstats
from pathlib import Path

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
