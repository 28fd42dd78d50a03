"""Two torchlint trees side by side, file by file, with the libcst parse floor: CPU per file
in three warm worker processes, asked in a random order for every file, so that the load
of a shared machine falls on all three alike.

    python benchmarks/interleaved_ab.py A_TREE B_TREE [PATH ...] [--sample 300] [--rounds 5]

A_TREE and B_TREE are checkouts (their ``torchlint`` package is imported from there, e.g.
``git archive main | tar -x -C /tmp/main``). Prints each round's CPU and ratios, then each
file's fastest run summed over rounds 2 and later (round 1 warms the caches), as
`engine_speed.py` does for whole runs: the ratio to the parse floor of each tree, and B/A.
"""

from __future__ import annotations

import argparse
import importlib.util
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
import gc, sys, time
from pathlib import Path
if sys.argv[1] == "floor":
    import libcst
    def run(path):
        gc.disable()
        try:
            libcst.parse_module(open(path, "rb").read())
        except Exception:
            pass
        gc.enable(); gc.collect(0)
else:
    from torchlint.config import from_table
    from torchlint.engine.lint import lint_paths
    config = from_table({}, Path(sys.argv[2]))
    def run(path):
        lint_paths([Path(path)], config)
for line in sys.stdin:
    start = time.process_time()
    run(line.strip())
    print(time.process_time() - start, flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    paths = args.paths or [Path(importlib.util.find_spec("torch").origin).parent]  # type: ignore[arg-type, union-attr]
    with tempfile.TemporaryDirectory(prefix="torchlint-ab-") as tmp:
        root = Path(tmp) / "corpus"
        files = [str(f) for f in corpus(paths, args.sample, root)]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        workers = {
            name: subprocess.Popen([sys.executable, "-c", _WORKER, mode, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, env=dict(env, PYTHONPATH=str(tree)) if tree else env,
                                   cwd=tree)  # (`python -c` puts the working directory first: a checkout there would win)
            for name, mode, tree in (("floor", "floor", None), ("a", "lint", args.a.resolve()), ("b", "lint", args.b.resolve()))
        }
        fastest: dict[str, dict[str, float]] = {name: {} for name in workers}
        for round_ in range(args.rounds):
            sums = dict.fromkeys(workers, 0.0)
            for path in files:
                order = list(workers)
                random.shuffle(order)
                for name in order:
                    worker = workers[name]
                    worker.stdin.write(path + "\n")  # type: ignore[union-attr]
                    worker.stdin.flush()  # type: ignore[union-attr]
                    spent = float(worker.stdout.readline())  # type: ignore[union-attr]
                    sums[name] += spent
                    if round_:
                        fastest[name][path] = min(spent, fastest[name].get(path, spent))
            print(f"round {round_ + 1}: floor {sums['floor']:.2f} s, A {sums['a']:.2f} s ({sums['a'] / sums['floor']:.3f}x), "
                  f"B {sums['b']:.2f} s ({sums['b'] / sums['floor']:.3f}x), B/A {sums['b'] / sums['a']:.3f}", flush=True)
        for worker in workers.values():
            worker.stdin.close()  # type: ignore[union-attr]
        if args.rounds > 1:
            total = {name: sum(times.values()) for name, times in fastest.items()}
            print(f"rounds 2-{args.rounds}, each file's fastest run: A {total['a'] / total['floor']:.3f}x the floor, "
                  f"B {total['b'] / total['floor']:.3f}x, B/A {total['b'] / total['a']:.3f}")
            ratios = [fastest["b"][f] / fastest["a"][f] for f in files if fastest["a"].get(f, 0) > 0.005]
            print(f"median per-file B/A {statistics.median(ratios):.3f} over {len(ratios)} files")


if __name__ == "__main__":
    main()
