"""What torch.compile's graph breaks and recompilations, and DDP accumulation without no_sync,
cost on this machine: the figures rules/TLR14, TLR15 and TLR16 cite.

Not a test. Each part runs the two variants side by side in one process, alternated, and
prints medians with the spread of the repeats:

    python benchmarks/compile_costs.py breaks [--backends aot_eager,inductor] [--repeats 7]
    python benchmarks/compile_costs.py recompiles [--backends aot_eager,inductor]
    python benchmarks/compile_costs.py ddp [--repeats 5]      # runs torchrun, 2 gloo ranks

- breaks: a training step of a small MLP compiled whole, and the same with
  ``torch._dynamo.graph_break()`` in its forward: the time per call each adds;
- recompiles: the compile time of a function's first compilation, and of the recompilation a
  changing batch size causes (torch's compilation records);
- ddp: a 2-rank DDP step of 4 micro-batches, every backward all-reducing, and with the first
  three under ``no_sync()``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return f"median {statistics.median(values) * 1e6:.0f} µs (quartiles {q[0] * 1e6:.0f}-{q[2] * 1e6:.0f})"


def _model(width: int):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, gb: bool) -> None:
            super().__init__()
            self.a, self.b, self.gb = nn.Linear(width, width), nn.Linear(width, width), gb

        def forward(self, x):  # type: ignore[no-untyped-def]
            h = torch.relu(self.a(x))
            if self.gb:
                torch._dynamo.graph_break()
            return self.b(h).pow(2).mean()

    return Net


def breaks(backends: list[str], repeats: int, calls: int, width: int) -> None:
    import torch

    Net = _model(width)
    for backend in backends:
        torch._dynamo.reset()
        models = {name: torch.compile(Net(gb), backend=backend) for name, gb in (("whole", False), ("break", True))}
        x = torch.randn(32, width)
        for m in models.values():  # compile, warm
            for _ in range(3):
                m(x).backward()
        per: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(repeats):
            for name, m in models.items():  # alternated
                t0 = time.perf_counter()
                for _ in range(calls):
                    m(x).backward()
                per[name].append((time.perf_counter() - t0) / calls)
        diff = [b - w for b, w in zip(per["break"], per["whole"])]
        print(f"{backend}: forward+backward of a {width}-wide 2-layer MLP, batch 32, {calls} calls x {repeats} repeats")
        print(f"  compiled whole:       {_spread(per['whole'])}")
        print(f"  with one graph break: {_spread(per['break'])}")
        print(f"  the break adds:       {_spread(diff)} per call")


def recompiles(backends: list[str], width: int) -> None:
    import torch
    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    Net = _model(width)
    for backend in backends:
        torch._dynamo.reset()
        clear_compilation_metrics()
        m = torch.compile(Net(False), backend=backend)
        for batch in (8, 8, 12, 12):
            m(torch.randn(batch, width)).backward()
        records = [r for r in get_compilation_metrics() if r.is_forward is not False]
        backward = sum((r.backward_cumulative_compile_time_us or 0) for r in get_compilation_metrics() if r.is_forward is False)
        print(f"{backend}: {width}-wide 2-layer MLP, batch 8 then 12")
        for r in records:
            print(f"  {r.compile_id}: {(r.dynamo_cumulative_compile_time_us or 0) / 1e6:.3f} s "
                  f"({'recompile: ' + r.recompile_reason if r.recompile_reason else 'first compilation'})")
        print(f"  backward graphs: {backward / 1e6:.3f} s")


DDP_CHILD = r"""
import contextlib, statistics, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo"); torch.set_num_threads(1); torch.manual_seed(0)
width, repeats, steps, accum = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), 4
model = DistributedDataParallel(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, width)
def step(no_sync):
    for micro in range(accum):
        ctx = model.no_sync() if (no_sync and micro < accum - 1) else contextlib.nullcontext()
        with ctx:
            model(x).pow(2).mean().backward()
    opt.step(); opt.zero_grad()
for v in (False, True):
    for _ in range(3): step(v)
per = {False: [], True: []}
for _ in range(repeats):
    for v in (False, True):
        dist.barrier(); t0 = time.perf_counter()
        for _ in range(steps): step(v)
        per[v].append((time.perf_counter() - t0) / steps)
if dist.get_rank() == 0:
    a, b = statistics.median(per[False]), statistics.median(per[True])
    print(f"  every backward all-reduces: {a * 1e3:.2f} ms a step {sorted(round(v * 1e3, 2) for v in per[False])}")
    print(f"  no_sync() for the first 3:  {b * 1e3:.2f} ms a step {sorted(round(v * 1e3, 2) for v in per[True])}")
    print(f"  no_sync saves {(a - b) * 1e3:.2f} ms a step ({(a - b) / a:.0%})")
dist.destroy_process_group()
"""


def ddp(repeats: int, width: int) -> None:
    params = 2 * (width * width + width)
    print(f"ddp: 2 gloo ranks on this machine, a {params / 1e6:.1f}M-parameter MLP, 4 micro-batches of 16 a step")
    script = Path(os.environ.get("TMPDIR", "/tmp")) / "torchlint_ddp_bench.py"
    script.write_text(DDP_CHILD)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script),
                    str(width), str(repeats), "10"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("breaks", "recompiles", "ddp"))
    parser.add_argument("--backends", default="aot_eager,inductor")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--width", type=int, default=64)
    opts = parser.parse_args()
    backends = [b.strip() for b in opts.backends.split(",") if b.strip()]
    if opts.part == "breaks":
        breaks(backends, opts.repeats, opts.calls, opts.width)
    elif opts.part == "recompiles":
        recompiles(backends, opts.width)
    else:
        ddp(opts.repeats, opts.width)


if __name__ == "__main__":
    main()
