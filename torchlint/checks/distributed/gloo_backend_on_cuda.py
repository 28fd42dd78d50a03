"""The gloo process-group backend in a script that trains on CUDA."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.device_names import string_value
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_INIT = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"})
_GLOO_CONSTANTS = frozenset({"torch.distributed.Backend.GLOO"})
_WRAPPERS = ("torch.nn.parallel.DistributedDataParallel", "torch.distributed.fsdp.FullyShardedDataParallel",
             "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard")
_COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast", "reduce",
    "all_to_all", "all_to_all_single"))


class GlooBackendOnCuda(Check):
    """`init_process_group("gloo")` in a module that puts its model or data on CUDA."""

    code = "TL605"
    name = "gloo-backend-on-cuda"
    cost = Cost.HOST_COLLECTIVES
    message = ("`init_process_group` with the gloo backend in a script that runs on CUDA: gloo's collectives "
               "on GPU tensors go through host memory, where NCCL reduces gradients on the GPUs")
    fix_hint = ('Use backend="nccl" for CUDA tensors (or `"nccl" if torch.cuda.is_available() else "gloo"`, '
                'or "cpu:gloo,cuda:nccl" when CPU tensors are reduced too)')

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) not in _INIT:
            return
        backend = ctx.argument(node, 0, "backend")
        if backend is None or not self._is_gloo(backend.value, node):
            return  # no backend (torch picks NCCL for CUDA), or one chosen elsewhere
        if not ctx.devices.uses_accelerator():
            return  # a CPU-only script: gloo is its backend
        if ctx.guards.device_branch(node) or ctx.guards.platform_branch(node):
            return  # the CPU path (`if not torch.cuda.is_available():`), or Windows, which has no NCCL
        if not self._reduces_on_the_group():
            return  # the group serves RPC, barriers or a one-off gather: no per-step collective
        self.report(node, where=Where.TRAIN)

    def _reduces_on_the_group(self) -> bool:
        """Does this module wrap a model in DDP or FSDP (its gradients are all-reduced every
        step), or run a collective in a hot loop?"""
        ctx = self.ctx
        if ctx.calls_named(*_WRAPPERS):
            return True
        return any(ctx.qname(c.func) in _COLLECTIVES and ctx.loops.local_hot_loop(c) is not None for c in ctx.tree.nodes(cst.Call))

    def _is_gloo(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``"gloo"``, ``Backend.GLOO``, a name bound once to one of them (``BACKEND = "gloo"``),
        or a setting whose default is one (``args.backend`` with ``default="gloo"``).
        ``"nccl" if cuda else "gloo"`` and ``"cpu:gloo,cuda:nccl"`` are not: NCCL has the GPU."""
        if string_value(expr) == "gloo" and not isinstance(expr, cst.FormattedString):
            return True
        if self.ctx.qname(expr) in _GLOO_CONSTANTS:
            return True
        if isinstance(expr, cst.Name):
            bound = self.ctx.bindings.lookup(expr.value, at)
            if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None and bound[0].value is not None:
                return self._is_gloo(bound[0].value, bound[0].node)
        default = self.ctx.constants.setting_default(dotted(expr) or "")
        return default is not None and self._is_gloo(default, default)  # `--backend` whose default is gloo
