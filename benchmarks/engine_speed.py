"""Side by side in one run: the bare libcst parse floor, `torchlint check` on one core, on
every core, with a warm cache (nothing changed, then one file changed); CPU, wall, peak RSS.

    python benchmarks/engine_speed.py [PATH ...] [--sample 400] [--jobs N] [--repeat 1] [--cold-one-core]

The corpus is copied into a temporary directory (the installed torch package's sources by
default, every k-th file with --sample), so the one-file edit never touches the original.
Every scenario runs as its own process (interpreter start-up and imports included, as a
user pays them); CPU time includes the pool's workers, peak RSS is the largest process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from torchlint.config import Config
from torchlint.engine.discover import discover
from torchlint.engine.pool import default_jobs

_FLOOR = """
import sys, libcst
for name in open(sys.argv[1]).read().splitlines():
    try:
        libcst.parse_module(open(name, "rb").read())
    except Exception:
        pass
"""
# The same parse with Python's cyclic collector paused per file, as torchlint checks each
# file (engine/pool.py, collector_paused): a fairer floor for torchlint's own work, since
# the pause makes torchlint's parse itself cheaper than the default floor's.
_FLOOR_PAUSED = """
import gc, sys, libcst
for name in open(sys.argv[1]).read().splitlines():
    gc.disable()
    try:
        libcst.parse_module(open(name, "rb").read())
    except Exception:
        pass
    gc.enable()
    gc.collect(0)
"""


@dataclass(frozen=True)
class Measured:
    cpu_s: float
    wall_s: float
    peak_rss_mib: float


def measure(argv: list[str], cwd: Path, env: dict[str, str]) -> Measured:
    """One process (and the workers it waits for): CPU, wall and the largest peak RSS."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}: {child.stderr.read().decode()[-2000:] if child.stderr else ''}")
    return Measured(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024)


def corpus(paths: list[Path], sample: int | None, into: Path) -> list[Path]:
    """The .py files under ``paths`` (every k-th for ``sample``), copied below ``into``."""
    files = [f.path for f in discover(paths, Config(respect_gitignore=False)) if f.path.suffix == ".py"]
    if sample and sample < len(files):
        step = len(files) / sample
        files = [files[int(i * step)] for i in range(sample)]
    copied = []
    for file in files:
        base = next(p for p in paths if file.resolve().is_relative_to(p.resolve()))
        target = into / base.name / file.resolve().relative_to(base.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
        copied.append(target)
    return copied


_CHECK = [sys.executable, "-m", "torchlint", "check", "--output-format", "json", "--exit-zero"]


def scenarios(root: Path, jobs: int, cache: Path) -> dict[str, list[str]]:
    check = [*_CHECK, "."]
    return {
        "bare libcst parse (1 core)": [sys.executable, "-c", _FLOOR, str(root / "files.txt")],
        "bare parse, collector paused": [sys.executable, "-c", _FLOOR_PAUSED, str(root / "files.txt")],
        "torchlint --jobs 1, no cache": [*check, "--jobs", "1", "--no-cache"],
        f"torchlint --jobs {jobs}, no cache": [*check, "--jobs", str(jobs), "--no-cache"],
        "warm cache, nothing changed": [*check, "--jobs", str(jobs), "--cache-dir", str(cache)],
        "warm cache, one file changed": [*check, "--jobs", str(jobs), "--cache-dir", str(cache)],
    }


def run_all(root: Path, files: list[Path], jobs: int, repeat: int, cold_only: bool) -> tuple[dict[str, list[Measured]], Measured | None]:
    """Every round's measurements of each scenario, and one cold run of the edited file
    alone (its own cost). ``cold_only``: the two floors and ``--jobs 1`` only."""
    cache = root.parent / "cache"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    (root / "files.txt").write_text("\n".join(str(f) for f in files))
    results: dict[str, list[Measured]] = {}
    plan = scenarios(root, jobs, cache)
    if cold_only:
        plan = dict(list(plan.items())[:3])
    edited = max(files, key=lambda f: f.stat().st_size if b"torch" in f.read_bytes() else 0)
    for round_ in range(repeat):
        shutil.rmtree(cache, ignore_errors=True)
        for label, argv in plan.items():
            if label.startswith("warm cache, nothing"):
                measure(list(argv), root, env)  # the cold run that fills the cache
            if label.startswith("warm cache, one file"):
                with open(edited, "a", encoding="utf-8") as handle:
                    handle.write(f"\n# edited in round {round_}\n")
            results.setdefault(label, []).append(measure(list(argv), root, env))
    alone = None if cold_only else measure([*_CHECK, "--no-cache", "--jobs", "1", str(edited)], root, env)
    return results, alone


def _median(runs: list[Measured]) -> Measured:
    return Measured(*(statistics.median(getattr(r, f) for r in runs) for f in ("cpu_s", "wall_s", "peak_rss_mib")))


def report(rounds: dict[str, list[Measured]], alone: Measured | None, jobs: int) -> None:
    results = {label: _median(runs) for label, runs in rounds.items()}
    labels = list(results)
    floor, paused, one = (results[label] for label in labels[:3])
    print(f"{'':32} {'CPU s':>8} {'wall s':>8} {'peak RSS MiB':>13} {'CPU / floor':>12} {'wall / jobs 1':>14}")
    for label, m in results.items():
        print(f"{label:32} {m.cpu_s:8.2f} {m.wall_s:8.2f} {m.peak_rss_mib:13.0f} {m.cpu_s / floor.cpu_s:11.2f}x {m.wall_s / one.wall_s:13.3f}x")
    print()
    # Each round's floors and --jobs 1 ran back to back: their ratio, round by round, is the spread.
    per_round = [(t.cpu_s / f.cpu_s, t.cpu_s / p.cpu_s) for f, p, t in zip(*(rounds[label] for label in labels[:3]))]
    print("cold, one core, CPU per round: " + ", ".join(f"{a:.2f}x ({b:.2f}x)" for a, b in per_round)
          + " the floor (the floor with the collector paused)")
    print(f"cold, one core: {one.cpu_s / floor.cpu_s:.2f}x the parse floor's CPU (target at most 1.5x); "
          f"{one.cpu_s / paused.cpu_s:.2f}x the floor with the collector paused as torchlint does")
    if alone is None:
        return
    many, warm, changed = (results[label] for label in labels[3:])
    print(f"cold, {jobs} jobs: wall {many.wall_s / one.wall_s:.3f} of --jobs 1 (target at most {1.25 / jobs:.3f}, 0.8 of linear)")
    print(f"warm, nothing changed: wall {warm.wall_s / many.wall_s:.1%} of the cold run (target at most 5 %)")
    print(f"warm, one file changed: {changed.wall_s - warm.wall_s:+.2f} s over the unchanged warm run; that file "
          f"alone, cold, takes {alone.wall_s:.2f} s with start-up (target: its cost plus at most 0.2 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=None, help="check every k-th file, this many in all")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cold-one-core", action="store_true", help="only the two parse floors and --jobs 1")
    args = parser.parse_args()
    paths = args.paths or [Path(__import__("importlib.util").util.find_spec("torch").origin).parent]
    with tempfile.TemporaryDirectory(prefix="torchlint-bench-") as tmp:
        root = Path(tmp) / "corpus"
        files = corpus(paths, args.sample, root)
        lines = sum(f.read_bytes().count(b"\n") for f in files)
        print(f"{len(files)} files, {lines:,} lines; {os.cpu_count()} CPUs, --jobs {args.jobs}; "
              f"load average {os.getloadavg()[0]:.2f}; median of {args.repeat}")
        rounds, alone = run_all(root, files, args.jobs, args.repeat, args.cold_one_core)
        report(rounds, alone, args.jobs)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
