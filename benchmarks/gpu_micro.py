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
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchlint.experiment.stats import compare  # noqa: E402

Arm = Callable[[int], None]  # runs n steps


@dataclass
class Ctx:
    """Where and how big: the device, sizes scaled down for the CPU smoke run."""

    torch: Any
    device: Any
    cuda: bool
    smoke: bool
    notes: list[str] = field(default_factory=list)

    def n(self, full: int, tiny: int) -> int:
        return tiny if self.smoke else full

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    @property
    def pin(self) -> bool:  # pinned host memory needs a CUDA device
        return self.cuda


BENCHES: dict[str, tuple[str, Callable[[Ctx], dict[str, Arm]]]] = {}


def bench(key: str, title: str) -> Callable[[Callable[[Ctx], dict[str, Arm]]], Callable[[Ctx], dict[str, Arm]]]:
    def register(fn: Callable[[Ctx], dict[str, Arm]]) -> Callable[[Ctx], dict[str, Arm]]:
        BENCHES[key] = (title, fn)
        return fn

    return register


# --------------------------------------------------------------------------
# shared pieces: an MLP training step on a batch already on the device
# --------------------------------------------------------------------------


def mlp(ctx: Ctx, width: int, depth: int, classes: int = 10) -> Any:
    nn = ctx.torch.nn
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes)).to(ctx.device)


class Trainer:
    """One optimizer step of ``model`` on (x, y); returns (loss, logits), both on the device."""

    def __init__(self, ctx: Ctx, model: Any, autocast: Any = None) -> None:
        self.ctx, self.model = ctx, model
        self.opt = ctx.torch.optim.SGD(model.parameters(), lr=1e-4)
        self.autocast = autocast

    def __call__(self, x: Any, y: Any) -> tuple[Any, Any]:
        F = self.ctx.torch.nn.functional
        with self.autocast() if self.autocast else contextlib.nullcontext():
            out = self.model(x)
            loss = F.cross_entropy(out.float(), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss, out


def batch(ctx: Ctx, rows: int, width: int, classes: int = 10) -> tuple[Any, Any]:
    t = ctx.torch
    return t.randn(rows, width, device=ctx.device), t.randint(0, classes, (rows,), device=ctx.device)


def _sizes(ctx: Ctx, light: bool) -> tuple[int, int, int]:
    """(width, depth, batch): busy ~ 2 ms of fp32 GEMMs a step on an H100; light: launch-bound."""
    if ctx.smoke:
        return 32, 2, 8
    return (256, 2, 64) if light else (2048, 4, 1024)


# --------------------------------------------------------------------------
# the benchmarks: each returns {arm name: run n steps}, the anti-pattern first
# --------------------------------------------------------------------------


def _scalar_sync(ctx: Ctx, light: bool) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light)
    step = Trainer(ctx, mlp(ctx, width, depth))
    x, y = batch(ctx, rows, width)

    def item_every_step(n: int) -> None:
        total = 0.0
        for _ in range(n):
            loss, _ = step(x, y)
            total += loss.item()

    def read_once(n: int) -> None:
        total = ctx.torch.zeros((), device=ctx.device)
        for _ in range(n):
            loss, _ = step(x, y)
            total += loss.detach()
        float(total)

    return {"loss.item() every step": item_every_step, "accumulate .detach(), read once": read_once}


@bench("TL101", "scalar-sync-in-loop: `.item()` every step (GPU busy)")
def tl101(ctx: Ctx) -> dict[str, Arm]:
    return _scalar_sync(ctx, light=False)


@bench("TL101-light", "scalar-sync-in-loop: `.item()` every step (small model, GPU mostly idle)")
def tl101_light(ctx: Ctx) -> dict[str, Arm]:
    return _scalar_sync(ctx, light=True)


@bench("TL102", "device-to-host-in-loop: predictions `.cpu()` every step")
def tl102(ctx: Ctx) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    x, y = batch(ctx, rows, width)

    def cpu_every_step(n: int) -> None:
        preds = []
        for _ in range(n):
            _, out = step(x, y)
            preds.append(out.argmax(1).cpu())

    def keep_on_device(n: int) -> None:
        preds = []
        for _ in range(n):
            _, out = step(x, y)
            preds.append(out.argmax(1))
        ctx.torch.cat(preds).cpu()

    return {".cpu() every step": cpu_every_step, "on the device, one .cpu() at the end": keep_on_device}


@bench("TL103", "sync-call-in-loop: `torch.cuda.synchronize()` every step")
def tl103(ctx: Ctx) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    x, y = batch(ctx, rows, width)

    def synchronize_every_step(n: int) -> None:
        for _ in range(n):
            step(x, y)
            ctx.sync()

    def no_sync(n: int) -> None:
        for _ in range(n):
            step(x, y)

    return {"synchronize() every step": synchronize_every_step, "no synchronize()": no_sync}


@bench("TL110", "create-then-move: `torch.ones(...).to(device)` every step")
def tl110(ctx: Ctx) -> dict[str, Arm]:
    t = ctx.torch
    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    _, y = batch(ctx, rows, width)

    def host_then_move(n: int) -> None:
        for _ in range(n):
            step(t.ones(rows, width).to(ctx.device), y)

    def on_device(n: int) -> None:
        for _ in range(n):
            step(t.ones(rows, width, device=ctx.device), y)

    return {"torch.ones(...).to(device)": host_then_move, "torch.ones(..., device=device)": on_device}


def _host_batch(ctx: Ctx, rows: int, width: int, pinned: bool) -> Any:
    x = ctx.torch.randn(rows, width)
    return x.pin_memory() if pinned and ctx.pin else x


@bench("TL111", "blocking-host-to-device: `.to(device)` from pinned memory without non_blocking")
def tl111(ctx: Ctx) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    host = _host_batch(ctx, rows, width, pinned=True)
    _, y = batch(ctx, rows, width)

    def blocking(n: int) -> None:
        for _ in range(n):
            step(host.to(ctx.device), y)

    def non_blocking(n: int) -> None:
        for _ in range(n):
            step(host.to(ctx.device, non_blocking=True), y)

    return {"pinned .to(device)": blocking, "pinned .to(device, non_blocking=True)": non_blocking}


@bench("TL112", "device-round-trip: an activation `.cpu().to(device)` every step")
def tl112(ctx: Ctx) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light=False)
    model = mlp(ctx, width, depth)
    head, tail = model[:2], model[2:]
    x, y = batch(ctx, rows, width)
    opt = ctx.torch.optim.SGD(model.parameters(), lr=1e-4)
    F = ctx.torch.nn.functional

    def run(n: int, round_trip: bool) -> None:
        for _ in range(n):
            h = head(x)
            if round_trip:
                h = h.cpu().to(ctx.device)
            loss = F.cross_entropy(tail(h), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return {"h.cpu().to(device)": lambda n: run(n, True), "h stays on the device": lambda n: run(n, False)}


class _Batches:
    """A dataset of whole batches (``batch_size=None``): a fetch is a slice copied out of a
    host tensor plus ``work`` rounds of CPU arithmetic, as an augmentation would do."""

    def __init__(self, torch: Any, rows: int, width: int, work: int, count: int = 100_000) -> None:
        self.torch, self.rows, self.width, self.work, self.count = torch, rows, width, work, count
        self.data = torch.randn(4 * rows, width)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        start = (i % 4) * self.rows
        x = self.data[start : start + self.rows].clone()
        for _ in range(self.work):
            x = x * 0.999 + 0.001
        return x, self.torch.randint(0, 10, (self.rows,))


def _forever(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


def _loader_arm(ctx: Ctx, loader: Any, step: Trainer, non_blocking: bool = False) -> Arm:
    it = _forever(loader)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(it)
            step(x.to(ctx.device, non_blocking=non_blocking), y.to(ctx.device, non_blocking=non_blocking))

    return run


@bench("TL201", "dataloader-no-workers: batches made in the main process")
def tl201(ctx: Ctx) -> dict[str, Arm]:
    from torch.utils.data import DataLoader

    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    ds = _Batches(ctx.torch, rows, width, work=ctx.n(4, 1))
    workers = ctx.n(4, 1)
    return {
        "num_workers=0": _loader_arm(ctx, DataLoader(ds, batch_size=None), step),
        f"num_workers={workers}, persistent": _loader_arm(
            ctx, DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True, prefetch_factor=2), step),
    }


@bench("TL202", "dataloader-no-pin-memory: pageable batches (no workers), pinned in the main process")
def tl202(ctx: Ctx) -> dict[str, Arm]:
    from torch.utils.data import DataLoader

    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    ds = _Batches(ctx.torch, rows, width, work=0)
    return {
        "pin_memory=False": _loader_arm(ctx, DataLoader(ds, batch_size=None), step),
        "pin_memory=True": _loader_arm(ctx, DataLoader(ds, batch_size=None, pin_memory=ctx.pin), step),
        "pin_memory=True + non_blocking": _loader_arm(ctx, DataLoader(ds, batch_size=None, pin_memory=ctx.pin), step,
                                                      non_blocking=True),
    }


def _conv_net(ctx: Ctx, channels: int, bias: bool, depth: int = 4) -> Any:
    nn = ctx.torch.nn
    layers: list[Any] = [nn.Conv2d(3, channels, 3, padding=1, bias=bias), nn.BatchNorm2d(channels), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(channels, channels, 3, padding=1, bias=bias), nn.BatchNorm2d(channels), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)).to(ctx.device)


def _bf16(ctx: Ctx) -> Callable[[], Any]:
    kind = "cuda" if ctx.cuda else "cpu"
    return lambda: ctx.torch.autocast(kind, dtype=ctx.torch.bfloat16)


def _images(ctx: Ctx) -> tuple[Any, Any]:
    t = ctx.torch
    n, side = (2, 8) if ctx.smoke else (64, 56)
    return t.randn(n, 3, side, side, device=ctx.device), t.randint(0, 10, (n,), device=ctx.device)


def _conv_arms(ctx: Ctx, nets: dict[str, Any]) -> dict[str, Arm]:
    x, y = _images(ctx)
    arms = {}
    for name, net in nets.items():
        step = Trainer(ctx, net, autocast=_bf16(ctx))

        def run(n: int, step: Trainer = step) -> None:
            for _ in range(n):
                step(x, y)

        arms[name] = run
    return arms


@bench("TL401", "conv-bias-before-batchnorm: bf16 convs with a bias the BatchNorm cancels")
def tl401(ctx: Ctx) -> dict[str, Arm]:
    c = ctx.n(64, 4)
    return _conv_arms(ctx, {"Conv2d(bias=True) + BN": _conv_net(ctx, c, True),
                            "Conv2d(bias=False) + BN": _conv_net(ctx, c, False)})


@bench("TL402-conv", "tensor-core-misaligned: bf16 convs with 60 channels, padded to 64")
def tl402_conv(ctx: Ctx) -> dict[str, Arm]:
    return _conv_arms(ctx, {"60 channels": _conv_net(ctx, ctx.n(60, 3), False),
                            "64 channels": _conv_net(ctx, ctx.n(64, 8), False)})


@bench("TL402-linear", "tensor-core-misaligned: bf16 Linear layers 2044 wide, padded to 2048")
def tl402_linear(ctx: Ctx) -> dict[str, Arm]:
    rows = ctx.n(1024, 8)
    arms = {}
    for name, width in (("width 2044", ctx.n(2044, 12)), ("width 2048", ctx.n(2048, 16))):
        step = Trainer(ctx, mlp(ctx, width, 4), autocast=_bf16(ctx))
        x, y = batch(ctx, rows, width)

        def run(n: int, step: Trainer = step, x: Any = x, y: Any = y) -> None:
            for _ in range(n):
                step(x, y)

        arms[name] = run
    return arms


@bench("TLR02", "host-device-syncs: three scalar reads a step (loss, accuracy, grad norm)")
def tlr02(ctx: Ctx) -> dict[str, Arm]:
    t = ctx.torch
    width, depth, rows = _sizes(ctx, light=False)
    model = mlp(ctx, width, depth)
    step = Trainer(ctx, model)
    x, y = batch(ctx, rows, width)

    def figures(loss: Any, out: Any) -> tuple[Any, Any, Any]:
        acc = (out.argmax(1) == y).float().mean()
        norm = t.linalg.vector_norm(t.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]))
        return loss.detach(), acc, norm

    def read_every_step(n: int) -> None:
        for _ in range(n):
            loss, out = step(x, y)
            _ = [v.item() for v in figures(loss, out)]

    def read_once(n: int) -> None:
        kept = []
        for _ in range(n):
            loss, out = step(x, y)
            kept.append(t.stack(figures(loss, out)))
        t.stack(kept).tolist()

    return {"3 .item() a step": read_every_step, "stacked on the device, read once": read_once}


@bench("TLR03", "pageable-copies: host batch `.to(device)` from pageable memory")
def tlr03(ctx: Ctx) -> dict[str, Arm]:
    width, depth, rows = _sizes(ctx, light=False)
    step = Trainer(ctx, mlp(ctx, width, depth))
    pageable = _host_batch(ctx, rows, width, pinned=False)
    pinned = _host_batch(ctx, rows, width, pinned=True)
    _, y = batch(ctx, rows, width)

    def run(n: int, host: Any, non_blocking: bool) -> None:
        for _ in range(n):
            step(host.to(ctx.device, non_blocking=non_blocking), y)

    return {"pageable .to(device)": lambda n: run(n, pageable, False),
            "pinned .to(device, non_blocking=True)": lambda n: run(n, pinned, True)}


@bench("TLR07", "low-precision-matmul-misaligned: bf16 logits over a 50257 vocabulary, padded to 50304")
def tlr07(ctx: Ctx) -> dict[str, Arm]:
    t = ctx.torch
    F = t.nn.functional
    rows, hidden = ctx.n(2048, 8), ctx.n(1024, 16)
    x = t.randn(rows, hidden, device=ctx.device, dtype=t.bfloat16)
    arms = {}
    for name, vocab in (("N=50257", ctx.n(50257, 33)), ("N=50304", ctx.n(50304, 40))):
        w = t.randn(vocab, hidden, device=ctx.device, dtype=t.bfloat16)

        def run(n: int, w: Any = w) -> None:
            for _ in range(n):
                F.linear(x, w)

        arms[name] = run
    return arms


@bench("TLR08", "fp32-matmul-without-tf32: the issue's loop (8 x 2048^2 Linear, batch 2048), TF32 off vs on")
def tlr08(ctx: Ctx) -> dict[str, Arm]:
    t = ctx.torch
    width, rows = ctx.n(2048, 32), ctx.n(2048, 8)
    step = Trainer(ctx, mlp(ctx, width, ctx.n(8, 2)))
    x, y = batch(ctx, rows, width)

    def run(n: int, tf32: bool) -> None:
        before = t.backends.cuda.matmul.allow_tf32
        t.backends.cuda.matmul.allow_tf32 = tf32
        try:
            for _ in range(n):
                step(x, y)
        finally:
            t.backends.cuda.matmul.allow_tf32 = before

    return {"allow_tf32=False": lambda n: run(n, False), "allow_tf32=True": lambda n: run(n, True)}


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
