"""A/B micro-benchmarks of the kernels a layer's shape or precision picks (TL401, TL402, TLR07, TLR08):
a conv bias the BatchNorm cancels, bf16 convs, Linear layers and logits whose sizes miss the tensor
cores' multiple of 8, and fp32 matmuls with TF32 off. Registered in ``gpu_benches.BENCHES`` on import
(``gpu_micro.py`` imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_benches import Arm, Ctx, Trainer, batch, bench, mlp


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


def _steps(step: Trainer, x: Any, y: Any) -> Arm:
    """An arm that runs ``step`` on the one batch ``x``, ``y``, ``n`` times."""

    def run(n: int) -> None:
        for _ in range(n):
            step(x, y)

    return run


def _bf16_mlp(ctx: Ctx, rows: int, width: int) -> Arm:
    """Training steps of a bf16 Linear stack ``width`` wide on ``rows`` rows."""
    step = Trainer(ctx, mlp(ctx, width, 4), autocast=_bf16(ctx))
    return _steps(step, *batch(ctx, rows, width))


def _conv_arms(ctx: Ctx, nets: dict[str, Any]) -> dict[str, Arm]:
    x, y = _images(ctx)
    return {name: _steps(Trainer(ctx, net, autocast=_bf16(ctx)), x, y) for name, net in nets.items()}


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
    return {name: _bf16_mlp(ctx, rows, width) for name, width in (("width 2044", ctx.n(2044, 12)), ("width 2048", ctx.n(2048, 16)))}


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


@bench("TL402-widths", "tensor-core-misaligned: bf16 Linear stacks 2048 wide against 2047, 2046, 2044 (negative = the misalignment's cost)")
def tl402_widths(ctx: Ctx) -> dict[str, Arm]:
    rows = ctx.n(1024, 8)
    return {f"width {width}": _bf16_mlp(ctx, rows, width) for width in (ctx.n(2048, 16), ctx.n(2047, 15), ctx.n(2046, 14), ctx.n(2044, 12))}
