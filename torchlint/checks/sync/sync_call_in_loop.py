"""`torch.cuda.synchronize()` or `torch.cuda.empty_cache()` on every step of a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.decoding import generation_before
from torchlint.analysis.impact import Cost, Unreached
from torchlint.checks.base import Check
from torchlint.findings import MEDIUM

_EMPTY_CACHE = "torch.cuda.empty_cache()"
_PER_GENERATION = ("and releases the caching allocator's cached blocks, once per generation: the next generation "
                   "allocates its activations and cache again with `cudaMalloc`")
_GENERATION_REASON = ("the caching allocator's blocks released and allocated again with `cudaMalloc` (a device-wide sync each), "
                      "plus a sync, once per generation (per request, in a server), not per decoded token")
_GENERATION_HINT = ("Leave the allocator's cache alone between generations (PyTorch reuses its blocks); call `empty_cache()` only "
                    "when memory must go back to other processes, or after an out-of-memory error")

_PER_STEP = ("and releases the caching allocator's cached blocks on every step: the next step allocates each of its activations "
             "again with `cudaMalloc`, which synchronizes the device too")

_SYNC_CALLS = {
    "torch.cuda.synchronize": "torch.cuda.synchronize()",
    "torch.cuda.empty_cache": "torch.cuda.empty_cache()",
    "torch.accelerator.synchronize": "torch.accelerator.synchronize()",
}


class SyncCallInLoop(Check):
    """`torch.cuda.synchronize()`/`torch.cuda.empty_cache()` unconditionally inside a hot loop."""

    code = "TL103"
    name = "sync-call-in-loop"
    cost = Cost.SYNC
    message = "`{call}` in {loop} stops the host until every queued kernel has finished, {often}"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    fix_hint = "Remove the call from the step loop, or run it only when needed (behind a flag, or every N steps)"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        label = _SYNC_CALLS.get(ctx.qname(node.func) or "")
        if label is None:
            return
        loop = ctx.loops.hot_loop(node)
        if loop is None:
            return
        if self._in_conditional_expression(node, loop):
            return  # a conditional sync (OOM recovery, a flag) is deliberate
        if ctx.guards.conditional(node, stop=loop) and not ctx.guards.device_only(node, stop=loop):
            return  # a conditional sync (a profiling flag, every N steps) is deliberate; `if use_gpu:` holds on every GPU step
        generation = generation_before(ctx, node) if label == _EMPTY_CACHE and ctx.loops.local_hot_loop(node) is None else None
        if generation is not None:
            # After a function's own decode loop: once per generation (per request, in a server) wherever
            # its callers are; where a step calls the function, the step's tier as for any per-step call.
            function = ctx.tree.enclosing_function(node)
            name = f"`{function.name.value}()`" if function is not None else "its function"
            after = "its `.generate(...)`" if type(generation) is cst.Call else "its decode loop"  # (a library's generation, or its own loop)
            self.report(node, call=label, often=_PER_GENERATION, hint=_GENERATION_HINT,
                        unreached=Unreached(f"{name} (after {after})", MEDIUM, _GENERATION_REASON, ()))
            return
        if label == _EMPTY_CACHE:
            # Not one wait: the cache it empties is what the next step's activations were going to reuse, so every
            # one of them is allocated again with `cudaMalloc` (which synchronizes): the cost of EMPTY_CACHE, high per step.
            self.report(node, call=label, often=_PER_STEP, cost=Cost.EMPTY_CACHE)
            return
        self.report(node, call=label, often="on every step")

    def _in_conditional_expression(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, (cst.IfExp, cst.BooleanOperation, cst.ExceptHandler, cst.ExceptStarHandler)):
                return True
        return False
