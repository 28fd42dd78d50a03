"""Adam or AdamW on an accelerator without `fused=True`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.checks.base import Check

_FUSABLE = frozenset({"torch.optim.Adam", "torch.optim.AdamW", "torch.optim.adam.Adam", "torch.optim.adamw.AdamW"})


class OptimizerNotFused(Check):
    """`torch.optim.Adam/AdamW(...)` in a module that trains on an accelerator, without `fused=True`."""

    code = "TL505"
    name = "optimizer-not-fused"
    cost = Cost.SMALL_WORK
    default = False
    message = "`{call}` updates the parameters with the multi-tensor (`foreach`) kernels{why}; `fused=True` does the whole update in one kernel per group"
    fix_hint = "Pass `fused=True` (CUDA tensors, torch 2.0 and newer); leave it out where a parameter may live on the CPU"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) not in _FUSABLE or ctx.options.target_torch < (2, 0):
            return  # fused Adam/AdamW came with torch 2.0
        if ctx.has_star_kwargs(node) or ctx.keyword(node, "fused") is not None:
            return  # chosen already, or a splat may choose
        if not ctx.devices.uses_accelerator():
            return  # fused kernels are CUDA's (and a few other accelerators')
        foreach = ctx.keyword(node, "foreach")
        single = isinstance(foreach, cst.Arg) and isinstance(foreach.value, cst.Name) and foreach.value.value == "False"
        why = " (here `foreach=False`: one parameter at a time)" if single else ""
        self.report(node, where=Where.TRAIN, cost=Cost.PER_PARAMETER_LAUNCHES if single else None,
                    call=short_code(ctx.module, node.func) + "(...)", why=why)
