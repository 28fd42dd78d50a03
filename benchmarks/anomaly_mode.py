"""What autograd's anomaly detection costs a training step on this machine: the figure
rules/TL306 cites.

Not a test. A training step (forward, backward, SGD step) of 12 Linear+GELU blocks on a
batch of 64, with anomaly mode off and on, alternated in one process so that both see the
same machine state; each repeat times both, and the medians and quartiles of the repeats
are printed with the ratio of each repeat's pair:

    OMP_NUM_THREADS=1 python benchmarks/anomaly_mode.py [--repeats 9] [--steps 40] [--width 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per variant per repeat")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=12)
    opts = parser.parse_args()

    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(opts.blocks):
        layers += [nn.Linear(opts.width, opts.width), nn.GELU()]
    model = nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(opts.batch, opts.width)
    y = torch.randn(opts.batch, opts.width)

    def steps(anomaly: bool) -> float:
        torch.autograd.set_detect_anomaly(anomaly)
        try:
            t0 = time.perf_counter()
            for _ in range(opts.steps):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            return (time.perf_counter() - t0) / opts.steps
        finally:
            torch.autograd.set_detect_anomaly(False)

    steps(False), steps(True)  # warm-up: allocator, first-call paths
    off, on, ratios = [], [], []
    for i in range(opts.repeats):
        # alternate which variant goes first, so a drift in machine load hits both
        a, b = (steps(False), steps(True)) if i % 2 == 0 else tuple(reversed((steps(True), steps(False))))
        off.append(a)
        on.append(b)
        ratios.append(b / a)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {opts.blocks} Linear({opts.width})+GELU blocks, "
          f"batch {opts.batch}, {opts.steps} steps x {opts.repeats} repeats")
    for label, values in (("anomaly off", off), ("anomaly on", on)):
        lo, mid, hi = _quartiles(values)
        print(f"{label:12s} median {mid * 1e3:.2f} ms/step (quartiles {lo * 1e3:.2f}-{hi * 1e3:.2f})")
    lo, mid, hi = _quartiles(ratios)
    print(f"{'on / off':12s} median {mid:.2f}x (quartiles {lo:.2f}-{hi:.2f}, range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
