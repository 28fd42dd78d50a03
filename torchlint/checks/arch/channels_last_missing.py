"""A CNN trained under autocast in the default NCHW memory format."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.device_names import string_value
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check

_CONV2D = ("torch.nn.Conv2d", "torch.nn.ConvTranspose2d")
AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast_mode.autocast")


class ChannelsLastMissing(Check):
    """Conv2d model trained under autocast without `memory_format=torch.channels_last`."""

    code = "TL404"
    name = "channels-last-missing"
    cost = Cost.MISSING_PIECES
    message = "`{call}` runs 2-D convolutions in mixed precision on NCHW tensors; tensor-core convolution kernels want channels-last (NHWC)"
    fix_hint = "Convert the model and each input batch with `.to(memory_format=torch.channels_last)`"
    default = False

    def finish(self) -> None:
        ctx = self.ctx
        loops = ctx.loops.training_loops()
        if not loops or not ctx.calls_named(*_CONV2D) or ctx.references("torch.channels_last"):
            return
        # torch's autocast, or a framework's (`with accelerator.autocast():`)
        autocasts = [c for c in ctx.calls_named(*AUTOCAST) if not _on_cpu(c, ctx)]
        autocasts += [c for c in ctx.method_calls({"autocast"}) if isinstance(ctx.tree.parent(c), cst.WithItem) and ctx.qname(c.func) is None]
        autocasts.sort(key=ctx.tree.index)
        in_loop = [c for c in autocasts if any(ctx.tree.is_inside(c, loop) for loop in loops)]
        if in_loop:
            call = in_loop[0]
            self.report(call, where=Where.TRAIN, call=plain_code(ctx.module, call.func) + "(...)")


def _on_cpu(call, ctx) -> bool:  # type: ignore[no-untyped-def]
    device = ctx.argument(call, 0, "device_type")
    return device is not None and string_value(device.value) == "cpu"
