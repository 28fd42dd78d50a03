"""Paired A/B micro-benchmarks of the CUDA-relevant rules, in one process (the GPU kit's step 3).

Not a test. For each rule, the anti-pattern (arm ``A``) and its fix (arm ``B``, and for
TL202 a second fix) run the same training step on the same model, in blocks of K steps,
alternated ABBA (A B, B A, A B ...) after a warm-up of each arm. A block is timed from a
device synchronisation to another (nothing inside the block syncs unless the arm does:
that is what TL101-TL103 are about), so a block is one figure, its time per step. The
saving of a fix is the Hodges-Lehmann shift between the arms' blocks with its exact 95 %
interval and a permutation test over the blocks (``torchlint.experiment.stats.compare``,
what ``--experiment`` uses), relative to the anti-pattern's median step.

Sizes are chosen so the GPU is busy while a step stays short (a few ms on an H100/H200);
``light`` variants keep the GPU mostly idle (a small model: the host is the bottleneck),
where a sync costs the host-device overlap instead of a launch gap.

    python benchmarks/gpu_micro.py --json OUT.json [--only TL101 ...] [--budget-s 90]
    python benchmarks/gpu_micro.py --smoke --json OUT.json   # CPU, tiny sizes: the code runs, no figure

``--smoke`` runs every arm twice at tiny sizes on whatever device there is (the CPU here):
it checks that the benchmarks' code runs, so the kit does not break on the GPU for a
Python error. Its numbers are not figures of anything and are marked so.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_benches import BENCHES, Arm, Ctx  # noqa: E402
importlib.import_module("gpu_benches_kernels")  # (registers TL401/TL402/TLR07/TLR08's benchmarks)
importlib.import_module("gpu_benches_uploads")  # (registers TL113/TL114 and POSITION benchmarks)

from torchlint.experiment.stats import compare  # noqa: E402

# --------------------------------------------------------------------------
# the harness
# --------------------------------------------------------------------------


def time_block(ctx: Ctx, arm: Arm, steps: int) -> float:
    """Seconds per step over one block, from a device sync to another."""
    ctx.sync()
    t0 = time.perf_counter()
    arm(steps)
    ctx.sync()
    return (time.perf_counter() - t0) / steps


def block_steps(ctx: Ctx, arms: dict[str, Arm], target_s: float) -> int:
    """Steps per block so the slowest arm's block takes about ``target_s``."""
    if ctx.smoke:
        return 2
    slowest = max(time_block(ctx, arm, 3) for arm in arms.values())
    return int(min(max(target_s / max(slowest, 1e-6), 5), 400))


def run_bench(ctx: Ctx, key: str, pairs: int, target_s: float) -> dict[str, Any]:
    title, make = BENCHES[key]
    started = time.perf_counter()
    arms = make(ctx)
    names = list(arms)
    for arm in arms.values():  # warm-up: allocator, cuBLAS/cuDNN handles and heuristics, workers
        arm(2)
    steps = block_steps(ctx, arms, target_s)
    times: dict[str, list[float]] = {name: [] for name in names}
    for p in range(pairs):
        order = names if p % 2 == 0 else list(reversed(names))
        for name in order:
            times[name].append(time_block(ctx, arms[name], steps))
    base = names[0]
    fixes = []
    for name in names[1:]:
        row: dict[str, Any] = {"arm": name, "fix_s": statistics.median(times[name])}
        if len(times[base]) >= 2:
            c = compare([[v] for v in times[base]], [[v] for v in times[name]])
            row.update(saving_s=c.per_step, ci_low=c.ci_low, ci_high=c.ci_high, verdict=c.verdict, p=c.p,
                       share=c.per_step / c.original_median if c.original_median else None)
        fixes.append(row)
    return {"key": key, "code": key.split("-")[0], "title": title, "anti_pattern": base,
            "anti_s": statistics.median(times[base]), "steps_per_block": steps, "blocks_per_arm": pairs,
            "fixes": fixes, "times": times, "wall_s": time.perf_counter() - started}


def make_ctx(smoke: bool) -> Ctx:
    import torch

    cuda = torch.cuda.is_available() and not smoke
    torch.manual_seed(0)
    return Ctx(torch=torch, device=torch.device("cuda" if cuda else "cpu"), cuda=cuda, smoke=smoke)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, required=True, help="write the results here (rewritten after each benchmark)")
    ap.add_argument("--only", action="append", help="benchmark keys (default: all)")
    ap.add_argument("--pairs", type=int, default=8, help="blocks per arm, alternated")
    ap.add_argument("--block-s", type=float, default=0.05, help="target seconds per block")
    ap.add_argument("--budget-s", type=float, default=120.0, help="stop starting benchmarks after this")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one pair, any device: the code runs, no figure")
    opts = ap.parse_args(argv)
    keys = [k for k in BENCHES if not opts.only or k in opts.only or k.split("-")[0] in opts.only]
    ctx = make_ctx(opts.smoke)
    if not ctx.cuda and not opts.smoke:
        print("no CUDA device: these benchmarks measure the GPU; --smoke checks their code on the CPU", file=sys.stderr)
        return 2
    pairs = 2 if opts.smoke else opts.pairs  # two in the smoke run: the statistics' code runs too
    out: dict[str, Any] = {"device": str(ctx.device), "smoke": opts.smoke, "pairs": pairs, "results": [], "errors": {},
                           "not_run": []}
    deadline = time.perf_counter() + opts.budget_s
    for key in keys:
        if time.perf_counter() > deadline:
            out["not_run"].append(key)
            continue
        try:
            res = run_bench(ctx, key, pairs, opts.block_s)
            out["results"].append(res)
            print(_line(res), flush=True)
        except Exception as exc:  # one broken benchmark never stops the others
            out["errors"][key] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
            print(f"{key}: ERROR {type(exc).__name__}: {exc}", flush=True)
        _write(opts.json, out)
    _write(opts.json, out)
    return 0 if not out["errors"] else 1


def _line(res: dict[str, Any]) -> str:
    parts = [f"{res['key']}: {res['anti_pattern']} {res['anti_s'] * 1e3:.3f} ms/step"]
    for f in res["fixes"]:
        if "saving_s" in f:
            parts.append(f"{f['arm']} saves {f['saving_s'] * 1e3:+.3f} ms/step [{f['ci_low'] * 1e3:+.3f}, "
                         f"{f['ci_high'] * 1e3:+.3f}] ({f['verdict']})")
        else:
            parts.append(f"{f['arm']} {f['fix_s'] * 1e3:.3f} ms/step")
    return "; ".join(parts)


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
