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
    message = "`{call}` {drives}"
    fix_hint = "Use `torch.nn.parallel.DistributedDataParallel` with one process per GPU (launched with `torchrun`)"

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qname(node.func)
        if qualified not in _DATA_PARALLEL:
            return
        call = short_code(self.ctx.module, node.func) + "(...)"
        one = _one_device(self.ctx, node, qualified)
        if one is not None:  # `device_ids=[0]`: no replica to make, only the scatter and gather of each call
            self.report(node, where=_what_the_file_runs(self.ctx), cost=Cost.ONE_DEVICE_PARALLEL, call=call,
                        drives=_ONE_DEVICE_WORDS.format(ids=one))
            return
        self.report(node, where=_what_the_file_runs(self.ctx), call=call, drives=_EVERY_GPU_WORDS)


_EVERY_GPU_WORDS = "drives every GPU from one Python process, replicating the model and scattering each batch on every step"
_ONE_DEVICE_WORDS = ("wraps the model over one device ({ids}): no replica is made, but each call still goes through "
                     "the wrapper's scatter and gather; call the model itself, or use DistributedDataParallel for more GPUs")


def _one_device(ctx, call: cst.Call, qualified: str) -> str | None:  # type: ignore[no-untyped-def]
    """The code of a one-device list ``call`` is given as ``device_ids``: a one-element literal
    (``[0]``), or a parameter of the function around it that defaults to one and that the function
    never binds again (lpips' ``gpu_ids=[0]``); None otherwise (a caller may still pass more)."""
    position = 2 if qualified.endswith(".data_parallel") else 1  # `data_parallel(module, inputs, device_ids)`
    ids = ctx.keyword(call, "device_ids")
    positional = [a for a in call.args if a.keyword is None and not a.star]
    value = ids.value if ids is not None else positional[position].value if len(positional) > position else None
    if type(value) is cst.Name:
        bound = ctx.bindings.lookup(value.value, call)
        # (a parameter bound again in its function is no longer its default)
        if len(bound) != 1 or bound[0].kind != "param":
            return None
        literal, words = bound[0].value, f"`{value.value}` defaults to `{short_code(ctx.module, bound[0].value)}`" if bound[0].value is not None else ""
    else:
        literal, words = value, f"`{short_code(ctx.module, value)}`" if value is not None else ""
    if type(literal) in (cst.List, cst.Tuple) and len(literal.elements) == 1 and not type(literal.elements[0]) is cst.StarredElement:  # type: ignore[union-attr]
        return words
    return None


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
