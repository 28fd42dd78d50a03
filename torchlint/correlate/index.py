"""The run's hotspots indexed by source and line: what the join, the hotspot list and the
runtime findings look measurements up in. Pure: no torch, no libcst.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from torchlint.profiler.session import Hotspot, ProfileSession


class _Index:
    """Hotspots by (path, line), per source; paths resolved against the run's cwd."""

    def __init__(self, session: ProfileSession) -> None:
        real: dict[str, str] = {}
        hotspots = []
        for h in session.hotspots:
            if h.path not in real:
                real[h.path] = session.resolve(h.path)
            hotspots.append(h if real[h.path] == h.path else replace(h, path=real[h.path]))
        self.hotspots = hotspots
        self.by_line: dict[str, dict[tuple[str, int], list[Hotspot]]] = defaultdict(lambda: defaultdict(list))
        self.functions: dict[tuple[str, int], Hotspot] = {}
        for h in hotspots:
            if h.granularity == "function":
                key = (h.path, h.line)
                old = self.functions.get(key)
                if old is None or h.total_s > old.total_s:
                    self.functions[key] = h
            else:
                self.by_line[h.source][(h.path, h.line)].append(h)

    def by_source(self, source: str) -> list[Hotspot]:
        return [h for h in self.hotspots if h.source == source]

    def at(self, source: str, path: str, first: int, last: int) -> list[Hotspot]:
        table = self.by_line.get(source, {})
        out: list[Hotspot] = []
        for line in range(first, last + 1):
            out.extend(table.get((path, line), ()))
        return out
