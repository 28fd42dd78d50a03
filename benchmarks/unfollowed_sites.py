"""What skipping the facts of call sites no module of the project can be the target of saves
(``project_index.never_resolved``): in one process, alternated, the cold check (every default rule, the
project join) with them skipped (B) and with none skipped (A), the summary's call sites' CPU
(``StepSummarizer._call_site``) and the whole check, each as a multiple of the parse floor measured beside them.

    OMP_NUM_THREADS=1 PYTHONPATH=.:benchmarks python benchmarks/unfollowed_sites.py PATH ... [--rounds 2]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import engine_stages as es  # noqa: E402 - the parse floor measured as it measures it

from torchlint.analysis import steps  # noqa: E402
from torchlint.config import Resolver  # noqa: E402
from torchlint.engine.discover import discover  # noqa: E402
from torchlint.engine.lint import lint_paths  # noqa: E402

real = steps.never_resolved
S = steps.StepSummarizer
orig = S._call_site
acc = [0.0, 0, 0]  # call sites' CPU, sites, sites skipped


def timed_site(self, caller, target, loop, call, within, locate):  # type: ignore[no-untyped-def]
    start = time.process_time()
    site = orig(self, caller, target, loop, call, within, locate)
    acc[0] += time.process_time() - start
    acc[1] += 1
    acc[2] += self.tails is not None and steps.never_resolved(target, self.tails)
    return site


def run(paths: list[Path], mode: str) -> tuple[float, float, int, int]:
    steps.never_resolved = real if mode == "B" else (lambda target, tails: False)
    acc[:] = [0.0, 0, 0]
    start = time.process_time()
    lint_paths(paths, Resolver(), jobs=1, cache=None, project=True)
    return time.process_time() - start, acc[0], acc[1], acc[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    S._call_site = timed_site
    files = [f.path for f in discover(args.paths, Resolver())]
    run(args.paths, "A")  # imports and first-use caches out of the way
    rows: dict[str, list[tuple[float, float, int, int]]] = {"A": [], "B": []}
    floors = []
    for round_ in range(args.rounds):
        floors.append(es.parse_floor(files))
        for mode in random.sample(["A", "B"], 2):
            rows[mode].append(run(args.paths, mode))
        print(f"round {round_ + 1}: floor {floors[-1]:.2f} s, " + ", ".join(
            f"{m} check {rows[m][-1][0]:.2f} s, call sites {rows[m][-1][1]:.3f} s" for m in rows), flush=True)
    floor = statistics.median(floors)
    for mode, label in (("A", "every site's facts"), ("B", "unfollowed sites skipped")):
        check = statistics.median(r[0] for r in rows[mode]) / floor
        sites = statistics.median(r[1] for r in rows[mode]) / floor
        print(f"{mode} ({label}): check {check:.2f}x the parse, call sites {sites:.3f}x; {rows[mode][0][2]} sites, {rows['B'][0][3]} of them skipped in B")


if __name__ == "__main__":
    main()
