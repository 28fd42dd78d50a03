"""Side-by-side CPU time: torchlint check vs a bare ``libcst.parse_module`` loop.

    python benchmarks/engine_speed.py [PATH ...] [--repeat 3] [--select ALL]

Both sides read the same files in the same process; the runs alternate and the
median of each is reported, so machine load affects both alike. The ratio is the
number the engine is held to (at most 2.5x the bare parse, default rules).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import libcst

from torchlint.config import Config, from_table
from torchlint.engine import lint_paths
from torchlint.engine.discover import discover


def _files(paths: list[Path]) -> list[Path]:
    return [f.path for f in discover(paths, Config(respect_gitignore=False)) if f.path.suffix == ".py"]


def bare_parse(files: list[Path]) -> float:
    start = time.process_time()
    for file in files:
        try:
            libcst.parse_module(file.read_bytes())
        except Exception:  # noqa: BLE001 - the floor skips what it cannot parse, as torchlint reports it
            pass
    return time.process_time() - start


def torchlint_check(files: list[Path], config: Config) -> tuple[float, int]:
    start = time.process_time()
    result = lint_paths(files, config)
    return time.process_time() - start, len(result.findings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--select", default=None, help="e.g. ALL (default: the default rules)")
    args = parser.parse_args()
    paths = args.paths or [Path(__import__("torch").__file__).parent] if not args.paths else args.paths
    files = _files(paths)
    mentions = [f for f in files if b"torch" in f.read_bytes()]
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    config = from_table({"select": [args.select]} if args.select else {}, Path.cwd())
    print(f"{len(files)} files, {lines:,} lines ({len(mentions)} files mention torch); rules: {args.select or 'default'}")
    for label, subset in (("all files", files), ("files that mention torch", mentions)):
        parse_times, lint_times = [], []
        for _ in range(args.repeat):
            parse_times.append(bare_parse(subset))
            elapsed, found = torchlint_check(subset, config)
            lint_times.append(elapsed)
        parse_s, lint_s = statistics.median(parse_times), statistics.median(lint_times)
        print(f"  {label:<26} bare parse {parse_s:7.2f} s   torchlint {lint_s:7.2f} s   ratio {lint_s / parse_s:5.2f}x   ({found} findings)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
