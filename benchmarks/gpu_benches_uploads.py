"""A/B micro-benchmarks of where a wait sits in a step and of tiny uploads per step (TL101, TL113, TL114; issue 32).

A blocking copy from pageable host memory to the device waits for the stream it is queued on
(``copy_`` without ``non_blocking``), so an upload of two numbers may cost a pipeline refill,
like ``.item()``, whatever its size. These arms put one such upload in each training step, in
the middle of it (between the forward and the loss: device work is queued behind it) or
at its end, against the same values kept on the device. Registered in ``gpu_benches.BENCHES``
on import (``gpu_micro.py`` imports this module).
"""

from __future__ import annotations

from typing import Any

from gpu_benches import Arm, Ctx, Trainer, _sizes, batch, bench, mlp


def _upload_arms(ctx: Ctx, light: bool, upload: Any, kept: Any) -> dict[str, Arm]:
    """Per step: the forward, ``upload()`` (or ``kept``) scaling the logits, the backward."""
    F = ctx.torch.nn.functional
    width, depth, rows = _sizes(ctx, light)
    step = Trainer(ctx, mlp(ctx, width, depth))
    x, y = batch(ctx, rows, width)

    def run(n: int, make: Any) -> None:
        for _ in range(n):
            out = step.model(x)
            scale = make()
            loss = F.cross_entropy(out * scale[0] + scale[1], y)
            step.opt.zero_grad(set_to_none=True)
            loss.backward()
            step.opt.step()

    return {"upload every step": lambda n: run(n, upload), "kept on the device": lambda n: run(n, lambda: kept)}


def _constant_arms(ctx: Ctx, light: bool) -> dict[str, Arm]:
    t = ctx.torch
    kept = t.tensor([1.0, 0.0], device=ctx.device)
    return _upload_arms(ctx, light, lambda: t.tensor([1.0, 0.0], device=ctx.device), kept)


def _index_arms(ctx: Ctx, light: bool) -> dict[str, Arm]:
    t = ctx.torch
    gain = t.tensor([0.0, 0.0, 1.0, 0.0], device=ctx.device)
    kept = gain[t.tensor([2, 3], device=ctx.device)]
    return _upload_arms(ctx, light, lambda: gain[[2, 3]], kept)


@bench("TL113", "constant-upload-in-loop: `torch.tensor([1.0, 0.0], device=cuda)` mid-step (GPU busy)")
def tl113(ctx: Ctx) -> dict[str, Arm]:
    return _constant_arms(ctx, light=False)


@bench("TL113-light", "constant-upload-in-loop: two numbers uploaded mid-step (small model, GPU mostly idle)")
def tl113_light(ctx: Ctx) -> dict[str, Arm]:
    return _constant_arms(ctx, light=True)


@bench("TL114", "host-index-in-loop: `gain[[2, 3]]` of a device tensor mid-step (GPU busy)")
def tl114(ctx: Ctx) -> dict[str, Arm]:
    return _index_arms(ctx, light=False)


@bench("TL114-light", "host-index-in-loop: `gain[[2, 3]]` mid-step (small model, GPU mostly idle)")
def tl114_light(ctx: Ctx) -> dict[str, Arm]:
    return _index_arms(ctx, light=True)


def _position_arms(ctx: Ctx, light: bool) -> dict[str, Arm]:
    """One wait per step, at each place in the step, against none (the first arm)."""
    t = ctx.torch
    F = t.nn.functional
    width, depth, rows = _sizes(ctx, light)
    step = Trainer(ctx, mlp(ctx, width, depth))
    x, y = batch(ctx, rows, width)
    kept = t.tensor([1.0, 0.0], device=ctx.device)

    def upload() -> Any:
        return t.tensor([1.0, 0.0], device=ctx.device)

    def run(n: int, where: str) -> None:
        for _ in range(n):
            scale = upload() if where == "upload at the start" else kept
            out = step.model(x)
            if where == "upload mid-step":
                scale = upload()
            loss = F.cross_entropy(out * scale[0] + scale[1], y)
            if where == "item() before backward":
                loss.item()
            step.opt.zero_grad(set_to_none=True)
            loss.backward()
            step.opt.step()
            if where == "item() at the end":
                loss.item()

    places = ("no wait", "upload at the start", "upload mid-step", "item() before backward", "item() at the end")
    return {p: (lambda n, p=p: run(n, p)) for p in places}


@bench("POSITION", "one wait per step at each place in the step, against none (busy GPU): negative = its cost")
def position(ctx: Ctx) -> dict[str, Arm]:
    return _position_arms(ctx, light=False)


@bench("POSITION-light", "one wait per step at each place in the step, against none (small model)")
def position_light(ctx: Ctx) -> dict[str, Arm]:
    return _position_arms(ctx, light=True)

