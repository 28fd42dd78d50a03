"""`nn.DataParallel` or `nn.parallel.data_parallel` instead of DistributedDataParallel."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.checks.base import Check

_DATA_PARALLEL = {
    "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel",  # the functional form, imported from torch.nn.parallel
    "torch.nn.parallel.data_parallel.data_parallel",
}


class DataParallel(Check):
    """`nn.DataParallel(...)` / `nn.parallel.data_parallel(...)`: single-process multi-GPU."""

    code = "TL601"
    name = "data-parallel"
    cost = Cost.MULTI_GPU_OVERHEAD
    message = "`{call}` drives every GPU from one Python process, replicating the model and scattering each batch on every step"
    fix_hint = "Use `torch.nn.parallel.DistributedDataParallel` with one process per GPU (launched with `torchrun`)"

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qname(node.func) in _DATA_PARALLEL:
            self.report(node, where=_what_the_file_runs(self.ctx), call=short_code(self.ctx.module, node.func) + "(...)")


def _what_the_file_runs(ctx) -> Where:  # type: ignore[no-untyped-def]
    """A script that only evaluates or predicts pays the replication on its inference
    steps; anything else is taken to train (its loop may be in another file)."""
    if ctx.loops.training_loops() or ctx.method_calls({"backward"}):
        return Where.TRAIN
    hot = [loop for loop in (*ctx.tree.nodes(cst.For), *ctx.tree.nodes(cst.While)) if ctx.loops.is_hot(loop)]
    kinds = {ctx.loops.where(loop) for loop in hot}
    if kinds and kinds <= {Where.EVAL, Where.INFER}:
        return Where.INFER if Where.INFER in kinds else Where.EVAL
    return Where.TRAIN
