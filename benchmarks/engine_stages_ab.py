"""`engine_stages.py` for two torchlint trees side by side, alternated in one run.

    python benchmarks/engine_stages_ab.py A_TREE B_TREE [PATH ...] [--sample 80] [--rounds 2]

A_TREE and B_TREE are checkouts (``git archive main torchlint | tar -x -C /tmp/main``).
Each round runs, for each tree in a random order, one fresh process (one core) that
measures the parse floor, the cold check, the staged check and the floor again (their mean
is its floor: the load of a shared machine drifts within a process), as `engine_stages.py`
does, so each tree's ratios are to a floor measured beside it. The whole-run rounds still
move with the load between processes: `interleaved_ab.py`, which alternates file by file,
is the steadier measure of a change; this one says where the stages stand. Prints, per stage, the median over rounds of its CPU as a
multiple of the parse, A and B side by side, and the whole check's ratio each round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine_speed import corpus  # noqa: E402 - the same sample of the same files

_WORKER = """
import json, sys
from pathlib import Path
import engine_stages as es
from torchlint.config import Resolver
from torchlint.engine.discover import discover
paths = [Path(p) for p in sys.argv[1:]]
files = [f.path for f in discover(paths, Resolver())]
es.check([files[0]])  # imports and first-use caches out of the way
# the floor before and after (a shared machine's load drifts within the process), the checks between
floor = es.parse_floor(files)
total = es.check(paths)
stages = es.staged_check(paths)
floor = (floor + es.parse_floor(files)) / 2
print(json.dumps({"floor": floor, "check": total, "stages": stages}))
"""


def run(tree: Path, paths: list[Path]) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join((str(tree), str(Path(__file__).parent))))
    # run in the tree: `python -c` puts the working directory first on the path, and a
    # torchlint checkout there (the one this is started from) would be measured for both trees
    out = subprocess.run([sys.executable, "-c", _WORKER, *map(str, paths)], env=env, capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:  # (the worker's own error, not a bare CalledProcessError)
        raise SystemExit(f"{tree}: the staged check failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--sample", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torchlint-stages-ab-") as tmp:
        root = Path(tmp) / "corpus"
        files = corpus(args.paths, args.sample, root)
        print(f"{len(files)} files, {sum(len(f.read_bytes().splitlines()) for f in files)} lines, one core per process, CPU seconds")
        results: dict[str, list[dict]] = {"a": [], "b": []}  # type: ignore[type-arg]
        for round_ in range(args.rounds):
            order = ["a", "b"]
            random.shuffle(order)
            for name in order:
                results[name].append(run(getattr(args, name).resolve(), [root]))
            a, b = results["a"][-1], results["b"][-1]
            print(f"round {round_ + 1}: A {a['check'] / a['floor']:.2f}x the parse ({a['check']:.2f} s), "
                  f"B {b['check'] / b['floor']:.2f}x ({b['check']:.2f} s), B/A {b['check'] / a['check']:.3f}", flush=True)
    ratio = {name: statistics.median(r["check"] / r["floor"] for r in rs) for name, rs in results.items()}
    print(f"\nwhole check, median over rounds: A {ratio['a']:.2f}x the parse, B {ratio['b']:.2f}x (target 1.30x)")
    stages = sorted({s for rs in results.values() for r in rs for s in r["stages"]},
                    key=lambda s: -statistics.median(r["stages"].get(s, 0.0) / r["floor"] for r in results["a"]))
    print(f"\n{'stage (x parse, timers in)':34} {'A':>7} {'B':>7} {'B-A':>7}")
    for stage in stages:
        a, b = (statistics.median(r["stages"].get(stage, 0.0) / r["floor"] for r in results[name]) for name in ("a", "b"))
        print(f"{stage:34} {a:7.3f} {b:7.3f} {b - a:+7.3f}")
    staged = {name: statistics.median(sum(r["stages"].values()) / r["floor"] for r in rs) for name, rs in results.items()}
    print(f"{'all stages':34} {staged['a']:7.3f} {staged['b']:7.3f} {staged['b'] - staged['a']:+7.3f}")


if __name__ == "__main__":
    main()
