"""On CUDA, ``torch.cuda.set_sync_debug_mode("warn")``: each synchronising operation
warns from inside the op, where the Python stack names the user's line. In the
profiled child only."""

from __future__ import annotations

import sys
import warnings
from typing import Any

from torchlint.profiler.probes import user_site
from torchlint.profiler.session import Hotspot


class SyncDebug:
    """Counts the synchronising operations per user call site while enabled."""

    def __init__(self) -> None:
        self.enabled = False
        self.sites: dict[tuple[str, int, str], int] = {}
        self._previous: Any = None

    def enable(self, warnings_out: list[str]) -> None:
        import torch

        try:
            with warnings.catch_warnings():
                # torch warns, once, that the mode is a prototype: torchlint's choice, not the
                # user's, so it stays off their terminal (seen on every run of the GPU check)
                warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype", category=UserWarning)
                torch.cuda.set_sync_debug_mode("warn")
        except Exception as exc:
            warnings_out.append(f"sync debug mode unavailable: {exc}")
            return
        self.enabled = True
        warnings.filterwarnings("always", message=".*synchroniz", category=UserWarning)
        previous = self._previous = warnings.showwarning
        sites = self.sites

        def showwarning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if "synchroniz" in str(message).lower():
                site = user_site(sys._getframe(1))
                if site is not None:
                    sites[site[:3]] = sites.get(site[:3], 0) + 1
                return  # counted, not printed: the script's output stays its own
            previous(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning

    def disable(self) -> None:
        if not self.enabled:
            return
        try:
            import torch

            torch.cuda.set_sync_debug_mode(0)
        except Exception:
            pass

    def hotspots(self) -> list[Hotspot]:
        return [
            Hotspot(source="sync", path=path, line=line, granularity="line", function=func,
                    op="cuda sync", self_s=0.0, total_s=0.0, calls=n)
            for (path, line, func), n in self.sites.items()
        ]
