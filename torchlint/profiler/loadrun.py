"""A run directory read back as one :class:`ProfileSession`: ``session.json``, with
cProfile's function hotspots (:mod:`.cprof`) and the torch.profiler windows' summaries
(:mod:`.tracefile`, totalled over the windows by :mod:`.tracewindows`) added. The session stage of the chain: it reads what the
collectors left, and the join (:mod:`torchlint.correlate`) starts from what it returns.
Nothing here imports torch.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from torchlint.profiler.cprof import function_hotspots
from torchlint.profiler.session import PROFILE_FILE, SESSION_FILE, ProfileSession, resolve_path
from torchlint.profiler.tracewindows import summarise_run


def load_run(run_dir: Path) -> ProfileSession:
    """Load ``session.json`` from a run directory and add cProfile's function hotspots.

    A run directory without ``session.json`` (the child died before writing it)
    gives an empty session that still carries whatever ``profile.prof`` holds.
    """
    run_dir = Path(run_dir)
    session_file = run_dir / SESSION_FILE
    if session_file.is_file():
        session = ProfileSession.load(session_file)
    else:
        session = ProfileSession(meta={"incomplete": True, "cwd": os.getcwd()})
    cwd = session.cwd
    real: dict[str, str] = {}
    for i, h in enumerate(session.hotspots):  # one spelling per file, as the join needs
        if h.path not in real:
            real[h.path] = resolve_path(h.path, cwd)
        if real[h.path] != h.path:
            session.hotspots[i] = replace(h, path=real[h.path])
    if session.meta.get("script"):
        session.meta["script"] = resolve_path(str(session.meta["script"]), cwd)
    traces = [str(t) for t in session.artifacts.get("traces") or []]
    if traces and "labels" in session.torch_window and not session.by_source("torch"):
        try:
            hotspots, window, errors = summarise_run(run_dir, session.torch_window, bool(session.meta.get("cuda")), traces)
        except Exception as exc:  # a malformed trace must not cost the rest of the report
            hotspots, window, errors = [], {}, [f"the traces: {type(exc).__name__}: {exc}"]
        session.hotspots.extend(replace(h, path=resolve_path(h.path, cwd)) for h in hotspots)
        session.torch_window.update(window)
        session.meta.setdefault("warnings", []).extend(f"could not read {e}" for e in errors)
    prof = run_dir / PROFILE_FILE
    if prof.is_file() and not session.by_source("cprofile"):
        try:
            session.hotspots.extend(function_hotspots(prof, session.cwd))
        except Exception as exc:  # a truncated .prof must not lose the rest of the report
            session.meta.setdefault("warnings", []).append(f"could not read {prof.name}: {exc}")
    return session
