"""Totals over every torch.profiler window a run traced (``WindowSummary``), from each trace file's
summary (tracefile.py), and the run's hotspots and ``torch_window`` summary from them (``summarise_run``,
which loadrun.py calls). Pure: no torch."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from torchlint.profiler.session import Hotspot
from torchlint.profiler.tracefile import FileSummary, read_file
from torchlint.profiler.tracelines import line_costs
from torchlint.profiler.traceregions import RegionStats


class WindowSummary:
    """Totals over every window read so far."""

    def __init__(self, labels: dict[str, list[Any]], cuda: bool) -> None:
        self.labels = labels  # range name -> [path, line, function, probed call]
        self.cuda = cuda
        self.files: list[FileSummary] = []
        self.eval_files: list[FileSummary] = []  # the evaluation window's: its lines are reported apart
        self.errors: list[str] = []

    def add(self, path: Path) -> None:
        try:
            summary = read_file(path)
            self.files.append(summary)
            if path.parent.name == "eval" or path.name == "trace-eval.json":
                self.eval_files.append(summary)
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            self.errors.append(f"{path.name}: {type(exc).__name__}: {exc}")

    def hotspots(self) -> list[Hotspot]:
        site_ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for f in self.files:
            for key, row in f.site_ops.items():
                acc = site_ops[key]
                for i, v in enumerate(row):
                    acc[i] += v
        out = []
        for (label, op), (calls, self_us, total_us, dev_us) in site_ops.items():
            if label not in self.labels:
                continue
            path, line, func, probe = self.labels[label]
            out.append(Hotspot(source="torch", path=path, line=int(line), granularity="line", function=func,
                               op=op, kind=probe, self_s=self_us / 1e6, total_s=total_us / 1e6, calls=int(calls),
                               device_s=dev_us / 1e6))
        return out

    def window(self, active_steps: int) -> dict[str, Any]:
        table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        memcpy: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for f in self.files:
            for name, row in f.ops.items():
                acc = table[name]
                for i, v in enumerate(row):
                    acc[i] += v
            for name, row in f.memcpy.items():
                memcpy[name][0] += row[0]
                memcpy[name][1] += row[1]
        window_us = sum(f.window_us for f in self.files)
        regions = RegionStats()
        for f in self.files:
            if f not in self.eval_files:  # per training step: the evaluation window's batches apart
                regions.merge(f.regions)
        busy_us = sum(f.busy_us for f in self.files)
        matmul_us = sum(f.gemm_us for f in self.files)
        ops = sorted(table.items(), key=lambda kv: -kv[1][1])[:40]
        return {
            "ops": [
                {"name": n, "calls": int(r[0]), "self_cpu_s": r[1] / 1e6, "cpu_total_s": r[2] / 1e6,
                 "self_device_s": r[3] / 1e6}
                for n, r in ops
            ],
            "window_s": window_us / 1e6,
            "active_steps": active_steps,
            "syncs": sum(f.syncs for f in self.files),
            "pageable_copies": sum(f.pageable for f in self.files),
            "memcpy": {k: {"calls": v[0], "device_s": v[1] / 1e6} for k, v in memcpy.items()},
            "gpu_idle_share": (1.0 - busy_us / window_us) if (self.cuda and window_us) else None,
            "events": sum(f.events for f in self.files),
            "sync_gaps": self.sync_gaps() if self.cuda else [],
            "matmul_device_s": matmul_us / 1e6 if self.cuda else None,
            "compiled_regions": regions.to_dict(),
            **line_costs(self),
        }

    def sync_gaps(self) -> list[dict[str, Any]]:
        """Per probed call site: its syncs in the window, the host's wait in them, and the
        GPU idle gap each left (totals over the syncs a next kernel followed: ``measured``)."""
        sites: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0])
        for f in self.files:
            for label, row in f.sync_sites.items():
                if label is None or label not in self.labels:
                    continue  # outside probed calls: no line to charge it to
                acc = sites[label]
                for i, v in enumerate(row):
                    acc[i] += v
        out = []
        for label, (syncs, waited, gap, saving, measured) in sites.items():
            path, line, func, probe = self.labels[label]
            out.append({"path": path, "line": int(line), "function": func, "call": probe, "syncs": int(syncs),
                        "measured": int(measured), "wait_s": waited / 1e6, "gap_s": gap / 1e6, "saving_s": saving / 1e6})
        return sorted(out, key=lambda g: -g["saving_s"])


def summarise_run(run_dir: Path, torch_window: dict[str, Any], cuda: bool, traces: list[str]) -> tuple[list[Hotspot], dict[str, Any], list[str]]:
    """Hotspots and the ``torch_window`` summary from a run's trace files."""
    summary = WindowSummary(dict(torch_window.get("labels") or {}), cuda)
    for name in traces:
        path = Path(run_dir) / name
        if path.is_file():
            summary.add(path)
    window = summary.window(int(torch_window.get("active_steps") or 0))
    return summary.hotspots(), window, summary.errors
