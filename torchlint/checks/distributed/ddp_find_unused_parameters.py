"""DistributedDataParallel with `find_unused_parameters=True`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.parameter_use import ParameterUse, Use
from torchlint.checks.base import Check

_DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
_CHECK = ("run one step with TORCH_DISTRIBUTED_DEBUG=DETAIL: DDP then names the parameters that got no "
          "gradient; if it names none, drop the flag")


class DdpFindUnusedParameters(Check):
    """`DistributedDataParallel(model, find_unused_parameters=True)`: a graph walk every step."""

    code = "TL604"
    name = "ddp-find-unused-parameters"
    cost = Cost.UNUSED_PARAMETER_SEARCH
    message = ("`find_unused_parameters=True` makes DDP walk the autograd graph after every forward to find "
               "parameters that get no gradient; {why}")
    fix_hint = "Drop `find_unused_parameters=True`: every parameter gets a gradient"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) not in _DDP:
            return
        flag = ctx.keyword(node, "find_unused_parameters")
        if flag is None or ctx.constants.bool_value(flag.value, node) is not True:
            return  # off (the default), or the user's setting (`find_unused_parameters=args.x`)
        static = ctx.keyword(node, "static_graph")
        if static is not None and ctx.constants.bool_value(static.value, node) is not False:
            return  # a static graph is searched once, on the first iteration only
        model = ctx.argument(node, 0, "module")
        if model is None:
            return
        verdict = ParameterUse(ctx).of_model(model.value, node)
        if verdict.use is Use.SOME_UNUSED:
            return  # the flag is needed: without it DDP waits for a gradient that never comes
        if verdict.use is Use.ALL:
            self.report(node, where=Where.TRAIN, why=f"{verdict.why}, so the walk finds none")
            return
        self.report(node, where=Where.TRAIN, cost=Cost.MAYBE_UNUSED_PARAMETER_SEARCH, hint=_CHECK[0].upper() + _CHECK[1:],
                    why=f"whether this model needs it is not known from the source ({verdict.why}): {_CHECK}")
