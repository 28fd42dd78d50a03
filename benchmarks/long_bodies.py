"""A cold ``torchlint check`` of one generated file whose single function has N statements
(a model call on every line, an early ``return`` every 50: a long generated training or
sampling script), for growing N, in two trees side by side: the CPU seconds per size, the
exponent between sizes (1 is linear, 2 quadratic) and B/A.

    python benchmarks/long_bodies.py A_TREE [B_TREE] [--sizes 100 200 400 800] [--limit 120]

A_TREE and B_TREE are checkouts (``git archive main | tar -x -C /tmp/main``); B defaults to
this checkout. Each run is a fresh ``python -m torchlint check --isolated --no-cache`` with the
tree first on ``PYTHONPATH`` and ``OMP_NUM_THREADS=1``; its CPU (user + system) comes from the
child's rusage. A run past ``--limit`` seconds of wall time is stopped and printed as ``>limit``
(issue 34: a 400-statement body took 285 s before the per-pair scans were indexed).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def long_body(n: int) -> str:
    """The generated file: one function of ``n`` assignments (and an ``if ...: return`` every 50)."""
    lines = ["import torch", "", "def run(model, x, mask=None, cache=None, debug=False):"]
    for i in range(n):
        if i % 50 == 0:
            lines += [f"    if cache is None and x.shape[0] > {i}:", "        return x"]
        lines.append(f"    x = model(x) + torch.ones(3, device=x.device) * {i}")
    lines += ["    return x", "for step in range(10):", "    run(torch.nn.Linear(3, 3), torch.zeros(3))", ""]
    return "\n".join(lines)


def cpu_of(tree: Path, folder: Path, limit: float) -> float | None:
    """CPU seconds of one cold check of ``folder`` by ``tree``; None past ``limit``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    try:
        # (run in ``folder``: ``python -m`` puts the working directory before PYTHONPATH, and a checkout there would win)
        subprocess.run([sys.executable, "-m", "torchlint", "check", "--isolated", "--no-cache", "--exit-zero", "."],
                       cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return None  # (the killed child is not reaped into RUSAGE_CHILDREN: no CPU to report)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path, nargs="?", default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400, 800])
    parser.add_argument("--limit", type=float, default=120.0)
    args = parser.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    print(f"A = {trees['A']}\nB = {trees['B']}")
    print(f"{'statements':>10} {'A s':>8} {'A exp':>6} {'B s':>8} {'B exp':>6} {'B/A':>6}")
    previous: dict[str, tuple[int, float | None]] = {}
    stopped = {"A": False, "B": False}  # (past the limit once: the larger sizes are not tried)
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            folder = Path(tmp) / f"n{n}"
            folder.mkdir()
            (folder / "long_body.py").write_text(long_body(n))
            row = [f"{n:>10}"]
            took: dict[str, float | None] = {}
            for name, tree in trees.items():
                took[name] = None if stopped[name] else cpu_of(tree, folder, args.limit)
                stopped[name] = took[name] is None
                last = previous.get(name)
                exponent = math.log(took[name] / last[1]) / math.log(n / last[0]) if took[name] and last and last[1] else None
                row += [f"{took[name]:8.2f}" if took[name] is not None else f"{'>' + str(int(args.limit)):>8}",
                        f"{exponent:6.2f}" if exponent is not None else f"{'':>6}"]
                previous[name] = (n, took[name])
            ratio = took["B"] / took["A"] if took["A"] and took["B"] else None
            row.append(f"{ratio:6.2f}" if ratio is not None else f"{'':>6}")
            print(" ".join(row), flush=True)


if __name__ == "__main__":
    main()
