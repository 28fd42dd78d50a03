"""The GPU check: what a session that finds a GPU runs first, in one command (issue 26).

    bash benchmarks/gpu_check.sh                 # on the device machine; writes to $OUT
    python benchmarks/gpu_check.py --dry-run --out DIR   # anywhere: the plumbing, no CUDA

Not a test: it measures and reports. In order of value, each step bounded by what is
left of the deadline (default 450 s, inside the device tool's 8 minutes), the summary
rewritten after every step so that a run killed at its limit still leaves what it had:

0. the wheels: installs libcst (and what it needs) from ``.gpu-wheels/`` (no network
   there; ``benchmarks/gpu_wheels.sh`` fetches them here), and the machine's facts
   (GPU, driver, torch, CUDA);
1. ``pytest -m gpu``: every test that checks the CUDA path;
2. ``torchlint profile`` on the GPU fixture scripts, without and with ``--experiment``
   (small ``--budget``), keeping each run's ``report.json``;
3. paired A/B micro-benchmarks of the CUDA rules (``benchmarks/gpu_micro.py``);
4. the CUDA savings scripts (``fixtures/scripts/gpu/``): ``--experiment``'s measured
   saving against the A/B truth of each hand fix (warm forks, alternated);
5. ``torchlint profile --nproc-per-node 2`` where two GPUs exist (else skipped, saying so).

It ends with ``summary.md`` (GPU, driver, torch, each check's figure and verdict) and
``gpu_check.json`` in the output folder (``$OUT`` by default), next to ``log.txt``
(every command and its output), ``pytest-gpu.txt`` and ``runs.tar.gz`` (the runs'
reports, experiments, sessions and traces). At most 8 files: what the device tool
brings back.

``--dry-run`` replaces every CUDA step by its plumbing: argument parsing, the wheel
folder, the commands it would run (checked against ``torchlint profile --help``), the
micro-benchmarks' code at tiny sizes on the CPU (no figure), the fixes' changed lines,
the output layout and the summary. tests/test_gpu_check.py runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_steps import Kit, STEPS  # noqa: E402
from gpu_summary import render_summary  # noqa: E402

DEFAULT_DEADLINE_S = 450.0


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) if out else ROOT / "gpu-check-out"


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else ./gpu-check-out)")
    ap.add_argument("--dry-run", action="store_true", help="no CUDA: the plumbing of every step, on any machine")
    ap.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S,
                    help="stop starting work after this many seconds (default 450: the device tool's call gets 540)")
    ap.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels", help="wheel folder (default .gpu-wheels)")
    ap.add_argument("--only", action="append", choices=[s for s, _ in STEPS],
                    help="run only these steps (default: all, in order of value)")
    ap.add_argument("--no-smoke", action="store_true", help="--dry-run: skip the micro-benchmarks' CPU smoke run")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder for the runs (default: a new temp dir)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    out = opts.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    work = opts.work or Path(tempfile.mkdtemp(prefix="torchlint-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    kit = Kit(out=out, work=work, dry=opts.dry_run, deadline_s=opts.deadline_s, wheels=opts.wheels,
              smoke=not opts.no_smoke)
    kit.writer = write_outputs
    kit.log(f"gpu_check {'--dry-run ' if kit.dry else ''}out={out} work={work} deadline={opts.deadline_s:.0f}s")
    status = 0
    try:
        for name, step in STEPS:
            if opts.only and name not in opts.only and name != "setup":
                kit.results["steps"][name] = {"verdict": "not run", "why": "not asked for (--only)"}
                continue
            kit.run_step(name, step)
            write_outputs(kit)
            if name == "setup" and kit.results["steps"]["setup"].get("stop"):
                break  # no CUDA on a real run: nothing else can measure anything
    except KeyboardInterrupt:
        kit.results["interrupted"] = True
        status = 130
    finally:
        kit.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        kit.results["elapsed_s"] = kit.elapsed()
        kit.pack_runs()
        write_outputs(kit)
    failed = [n for n, s in kit.results["steps"].items() if s.get("verdict") in ("FAIL", "ERROR")]
    print((out / "summary.md").read_text(encoding="utf-8"))
    if opts.work is None and kit.dry:
        shutil.rmtree(work, ignore_errors=True)
    return status or (1 if failed else 0)


def write_outputs(kit: Kit) -> None:
    """gpu_check.json and summary.md, each replaced whole (a reader never sees half of one)."""
    _atomic(kit.out / "gpu_check.json", json.dumps(kit.results, indent=1, default=str))
    _atomic(kit.out / "summary.md", render_summary(kit.results))


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
