"""A/A control for ``torchlint profile --experiment``: a variant identical to the original.

Not a test. For each trial a fresh window server (``torchlint.experiment.server``)
runs the original script and an identical private copy of it (served through the
same override hook as a real source variant), in ABBA pairs after one discarded
warm-up window, and compares them with ``torchlint.experiment.stats.compare``.
Every "saving" or "slower" printed here is a false verdict; the spread of the
shifts across servers is the experiment's own error on this machine.

    OMP_NUM_THREADS=1 python benchmarks/experiment_aa.py [--script numpy_mlp] [--trials 6] [--pairs 6]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchlint.experiment import stats  # noqa: E402
from torchlint.experiment.server import WindowServer  # noqa: E402
from torchlint.savings import NO_CHANGE  # noqa: E402

SCRIPTS = ROOT / "fixtures" / "scripts" / "savings"


def trial(script: Path, copy: Path, work: Path, pairs: int) -> stats.Comparison:
    server = WindowServer(work)
    try:
        server.window(script.name, [], str(script.parent), max_steps=None)  # warm-up, discarded
        arms: dict[str, list[list[float]]] = {"o": [], "v": []}
        for p in range(pairs):
            for arm in ("ov" if p % 2 == 0 else "vo"):
                over = {str(script): str(copy)} if arm == "v" else {}
                r = server.window(script.name, [], str(script.parent), max_steps=None, overrides=over)
                if r.get("status", 1) != 0:
                    raise SystemExit(f"{script.name} failed in a window: {r.get('error')}")
                arms[arm].append([r["wall_s"]])
    finally:
        server.close()
    return stats.compare(arms["o"], arms["v"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--script", default="numpy_mlp", help="a script of fixtures/scripts/savings (name without .py)")
    ap.add_argument("--trials", type=int, default=6, help="window servers, each its own experiment")
    ap.add_argument("--pairs", type=int, default=6)
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="torchlint-aa-"))
    script = work / f"{opts.script}.py"
    shutil.copy(SCRIPTS / script.name, script)
    copy = work / "private" / script.name
    copy.parent.mkdir()
    shutil.copy(script, copy)
    print(f"A/A: {script.name} against an identical copy, {opts.trials} servers x {opts.pairs} ABBA pairs")
    shifts, false = [], 0
    for t in range(opts.trials):
        c = trial(script, copy, work, opts.pairs)
        shifts.append(c.per_step)
        false += c.verdict != NO_CHANGE
        print(f"  server {t}: shift {c.per_step * 1e3:+.1f} ms [{c.ci_low * 1e3:+.0f}, {c.ci_high * 1e3:+.0f}] "
              f"{c.verdict}; original {c.original_median:.3f} s, window-to-window noise {c.noise * 100:.1f} %", flush=True)
    sd = statistics.stdev(shifts) if len(shifts) > 1 else 0.0
    print(f"false verdicts: {false}/{opts.trials}; shifts: mean {statistics.fmean(shifts) * 1e3:+.1f} ms, "
          f"sd across servers {sd * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
