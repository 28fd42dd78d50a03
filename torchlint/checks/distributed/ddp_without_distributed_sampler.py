"""A shuffling DataLoader without a sampler in a module that trains with DDP."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost
from torchlint.analysis.loaders import DATALOADER, UNKNOWN, is_dataloader, loader_feeds, loader_option, sharded_by_rank
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_DDP = "torch.nn.parallel.DistributedDataParallel"


class DdpWithoutDistributedSampler(Check):
    """`DataLoader(shuffle=True)` with no sampler in a module that wraps a model in DDP."""

    code = "TL602"
    name = "ddp-without-distributed-sampler"
    cost = Cost.DUPLICATED_WORK
    message = "`{call}` shuffles without a `DistributedSampler` while the model runs under DistributedDataParallel, so every process reads the whole dataset"
    fix_hint = "Pass `sampler=DistributedSampler(dataset)` (and drop `shuffle=True`); call `sampler.set_epoch(epoch)` every epoch"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if not is_dataloader(ctx, node) or not self._uses_ddp():
            return
        shuffle = loader_option(ctx, node, "shuffle")
        if shuffle is UNKNOWN:
            return  # a splat may carry the sampler
        if shuffle is None or not (isinstance(shuffle.value, cst.Name) and shuffle.value.value == "True"):
            return
        if any(loader_option(ctx, node, option) is not None for option in ("sampler", "batch_sampler")):
            return
        if sharded_by_rank(ctx, node):
            return  # each rank loads its own share, cut by hand (`idx.split(n)[rank]`): no rank reads the whole dataset
        self.report(node, where=loader_feeds(self.ctx, node), call=f"{dotted(node.func) or DATALOADER}(...)")

    def _uses_ddp(self) -> bool:
        if not hasattr(self, "_ddp"):
            self._ddp = bool(self.ctx.calls_named(_DDP))
        return self._ddp
