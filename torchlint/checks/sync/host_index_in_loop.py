"""A device tensor indexed with an index built on the host, inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


class HostIndexInLoop(Check):
    """`x[idx]` on a device tensor where `idx` is a host tensor, a NumPy array or a list, inside a hot loop."""

    code = "TL114"
    name = "host-index-in-loop"
    cost = Cost.UPLOAD
    message = "`{expr}` in {loop} indexes a device tensor with an index that lives on the host: the index is copied to the device, and the host waits, on every step"
    per_step = True
    device_bound = True
    fix_hint = "Build the index on the device (`torch.arange(n, device=x.device)`, `torch.tensor(ids, device=x.device)` once before the loop)"

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        indexes = [e.slice.value for e in node.slice if type(e.slice) is cst.Index and type(e.slice.value) in _MAY_HOLD_AN_INDEX]
        if not indexes or not ctx.syncs.in_step(node):
            return
        uploads = ctx.uploads
        hosted = [index for index in indexes if uploads.host_index(index, node)]
        if hosted and _into_from_numpy(ctx, node):
            return  # `torch.from_numpy(emb[idx.numpy()])`: what is indexed is a NumPy array, whatever else the name may hold
        if hosted and ctx.syncs.device_tensor(node.value, node):
            # A written list of positions is a few bytes: its copy costs what a read does, its wait for the queue.
            cost = Cost.SMALL_UPLOAD if all(uploads.listed_index(index, node) for index in hosted) else None
            hint = _LOADER_HINT if any(uploads.index_loader_batch(index, node) for index in hosted) else ""
            self.report(node, cost=cost, hint=hint, expr=short_code(ctx.module, node, limit=60))


def _into_from_numpy(ctx, node: cst.Subscript) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` the array given to ``torch.from_numpy``, which takes only a NumPy array?"""
    parent = ctx.tree.parent(node)
    parent = ctx.tree.parent(parent) if type(parent) is cst.Arg else None
    return type(parent) is cst.Call and ctx.call_name(parent) == "torch.from_numpy"


_LOADER_HINT = ("Draw the step's indices on the device: `for perm in torch.randperm(n, device=x.device).split(batch_size):` "
                "(no per-step collation of Python ints on the host, no copy)")
# Index expressions that may be an index array (a number, a slice, a string or `None` never is).
_MAY_HOLD_AN_INDEX = frozenset({cst.Name, cst.Call, cst.List, cst.ListComp, cst.Subscript, cst.Attribute})
