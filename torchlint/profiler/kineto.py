"""Settings of torch's profiler library (kineto) that every torch.profiler window of the
child shares: the scheduled windows (torchprof.py) and the evaluation window
(evalwindow.py). Imported only in the profiled child.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from typing import Any


def add_rank_metadata(prof: Any) -> None:
    """``distributedInfo`` (rank 0 of 1) in each trace, which HTA reads the rank from;
    under torch.distributed, torch writes the real one itself."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return
        prof.preset_metadata_json("distributedInfo", json.dumps({"backend": "none", "rank": 0, "world_size": 1}))
    except Exception:  # an older torch without preset_metadata_json: traces without it
        pass


@contextlib.contextmanager
def kineto_quiet() -> Any:
    """torch's profiler library (kineto) prints ``USDT: ... profiler_start`` and
    ``profiler_stop`` on stderr at every window unless ``KINETO_LOG_LEVEL`` is above its
    levels; it reads the variable once, when the first profiler starts. So it is set for
    that start only (unless the user set it), and the script's environment stays as it was."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["KINETO_LOG_LEVEL"] = "6"  # above ERROR (4) and USDT (5)
    try:
        yield
    finally:
        os.environ.pop("KINETO_LOG_LEVEL", None)


def step_quietly(prof: Any) -> None:
    """``prof.step()`` without torch's warning, at each window after the first, that a
    window's events are cleared: torchlint records windows that way on purpose (each one is
    exported on its own), so the warning would only reach the user's terminal as noise."""
    with kineto_quiet(), warnings.catch_warnings():  # the window's first step starts kineto
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
        prof.step()
