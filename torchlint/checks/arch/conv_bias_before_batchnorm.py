"""A convolution with a bias whose output goes straight into BatchNorm."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.edits import with_keyword
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_CONVS = {f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for d in (1, 2, 3)}
_BATCH_NORMS = {f"torch.nn.{kind}{d}d" for kind in ("BatchNorm", "LazyBatchNorm") for d in (1, 2, 3)} | {"torch.nn.SyncBatchNorm"}
# Position of `bias` among the positional parameters (Lazy variants have no in_channels).
_BIAS_POSITION = {"Conv": 7, "ConvTranspose": 7, "LazyConv": 6, "LazyConvTranspose": 6}


class ConvBiasBeforeBatchnorm(Check):
    """Conv layer with `bias=True` (the default) feeding straight into BatchNorm."""

    code = "TL401"
    name = "conv-bias-before-batchnorm"
    message = "`{conv}` adds a bias that the following `{norm}` subtracts again with the batch mean"
    fix_hint = "Pass `bias=False` to the convolution: BatchNorm's own shift replaces the bias"
    fix_safety = FixSafety.UNSAFE  # the checkpoint loses the conv's `bias` key

    def finish(self) -> None:
        ctx = self.ctx
        reported: set[int] = set()
        for conv, norm in ctx.layers.feeds:
            conv_name = ctx.qname(conv.func)
            norm_name = ctx.qname(norm.func)
            if conv_name not in _CONVS or norm_name not in _BATCH_NORMS or id(conv) in reported:
                continue
            if ctx.has_star_kwargs(conv) or any(a.star == "*" for a in conv.args):
                continue  # the splat may carry bias=False
            position = _BIAS_POSITION[conv_name.rsplit(".", 1)[-1][:-2]]
            bias = ctx.argument(conv, position, "bias")
            if bias is not None and not (isinstance(bias.value, cst.Name) and bias.value.value == "True"):
                continue  # bias=False, or a value only known at run time
            reported.add(id(conv))
            if bias is None or bias.keyword is not None:
                fixed = with_keyword(conv, "bias", cst.Name("False"))
            else:  # a positional True
                fixed = conv.with_changes(args=tuple(a.with_changes(value=cst.Name("False")) if a is bias else a for a in conv.args))
            self.report(
                conv,
                fix=(conv, fixed),
                related=(norm,),
                conv=(dotted(conv.func) or conv_name) + "(...)",
                norm=(dotted(norm.func) or norm_name) + "(...)",
            )
