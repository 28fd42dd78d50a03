"""A shuffling DataLoader without a sampler in a module that trains with DDP."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_DDP = "torch.nn.parallel.DistributedDataParallel"
_LOADER = "torch.utils.data.DataLoader"


class DdpWithoutDistributedSampler(Check):
    """`DataLoader(shuffle=True)` with no sampler in a module that wraps a model in DDP."""

    code = "TL602"
    name = "ddp-without-distributed-sampler"
    message = "`{call}` shuffles without a `DistributedSampler` while the model runs under DistributedDataParallel, so every process reads the whole dataset"
    fix_hint = "Pass `sampler=DistributedSampler(dataset)` (and drop `shuffle=True`); call `sampler.set_epoch(epoch)` every epoch"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) != _LOADER or not self._uses_ddp():
            return
        if ctx.has_star_kwargs(node) or any(a.star == "*" for a in node.args):
            return  # a splat may carry the sampler
        shuffle = ctx.argument(node, 2, "shuffle")
        if shuffle is None or not (isinstance(shuffle.value, cst.Name) and shuffle.value.value == "True"):
            return
        for position, keyword in ((3, "sampler"), (4, "batch_sampler")):
            if ctx.argument(node, position, keyword) is not None:
                return
        self.report(node, call=f"{dotted(node.func) or _LOADER}(...)")

    def _uses_ddp(self) -> bool:
        if not hasattr(self, "_ddp"):
            self._ddp = bool(self.ctx.calls_named(_DDP))
        return self._ddp
