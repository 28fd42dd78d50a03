"""The runtime half of torchlint: ``torchlint profile``.

Collect (a child process runs the script under cProfile, call probes, a line
sampler and a scheduled torch.profiler window; :mod:`.bootstrap`) → session
(plain data on disk; :mod:`.session`, read back by :mod:`.loadrun`) → correlate (:mod:`torchlint.correlate`)
→ render (:mod:`torchlint.report.profile_text`, :mod:`torchlint.report.profile_json`).

Importing this package imports neither torch nor libcst.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Hotspot", "ProfileSession", "load_run"]


def __getattr__(name: str) -> Any:
    # Looked up on first use: the profiled child imports this package before the script
    # starts, and needs neither the run reader (loadrun, tracefile, cprof) nor the session
    # data until the script has ended.
    if name == "load_run":
        from torchlint.profiler.loadrun import load_run

        return load_run
    if name in ("Hotspot", "ProfileSession"):
        from torchlint.profiler import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
