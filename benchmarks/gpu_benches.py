"""The A/B micro-benchmarks of the GPU check, one per CUDA rule (``benchmarks/gpu_micro.py`` runs them):
the harness's ``Ctx`` and ``@bench`` registry, the shared MLP step, and the syncs', copies' and loaders'
benchmarks; the kernels' (TL401, TL402, TLR07, TLR08) are in ``gpu_benches_kernels.py``, the tiny
uploads' (TL113, TL114) in ``gpu_benches_uploads.py``.

Each ``@bench`` function builds a model on ``ctx.device`` and returns its arms, the
anti-pattern first, then the fixes: each arm runs ``n`` training steps and ends with
whatever the fix reads once (``float(total)``), so a block's time holds all of it.
Sizes shrink for the CPU smoke run (``ctx.smoke``): the code runs, no figure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

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
