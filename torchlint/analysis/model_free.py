"""Functions of a file that run no model: a call of one is a helper's arithmetic, not a model's forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import may_run_a_model
from torchlint.analysis.kinds import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# Helpers followed this many calls deep; deeper, a helper may run a model (a chain of 1,500 helpers
# each calling the next once recursed to Python's limit).
_DEPTH = 8


def runs_no_model(ctx: FileContext, call: cst.Call, _depth: int = 0) -> bool:
    """Is ``call`` a call of a function of this file (or a method of its class through ``self``)
    whose body calls no model, directly or through the file's other functions? so-vits-svc's
    ``extract(self.alphas_cumprod, t, x.shape)``, a gather from a schedule's buffer: two of them
    at two time steps are no model run twice. False where the callee is not the file's."""
    function = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
    if function is None:
        return False  # a value called (`self.model(x)`, `denoise_fn(x)`): maybe a model
    known: dict[int, bool] = ctx.__dict__.setdefault("_model_free", {})  # each function scanned once
    if id(function) not in known:
        if _depth >= _DEPTH:
            return False  # too deep to follow: may run one (not kept: a shallower question may see to the end)
        known[id(function)] = False  # (a function calling itself, while it is being scanned: may run one)
        known[id(function)] = not any(_may_run(ctx, n, _depth) for n in ctx.tree.descendants(function.body) if type(n) is cst.Call)
    return known[id(function)]


def _may_run(ctx: FileContext, call: cst.Call, depth: int) -> bool:
    """Does a call inside a helper maybe run a model: not a builtin, a library function, a tensor's
    method (`out.reshape(...)`, on a value known as a tensor: `x.sqrt()`) or another model-free helper?"""
    if not may_run_a_model(ctx, call):
        return False
    if type(call.func) is cst.Attribute and ctx.values.kind(call.func.value, call) is Kind.TENSOR:
        return False  # a tensor's method the word list does not hold
    return not runs_no_model(ctx, call, depth + 1)
