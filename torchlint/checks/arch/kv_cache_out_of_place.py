"""A key-value cache updated out of place: the whole preallocated cache copied to write one token."""

from __future__ import annotations

import re

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

# Out-of-place writes into a tensor: each returns a new tensor as large as the one written into.
_OUT_OF_PLACE = frozenset({"index_copy", "index_put", "scatter", "slice_scatter", "select_scatter"})
# What names a key-value cache (`cache_k`, `self.k_cache`, `past_key`, `kv_cache[0]`), not a token buffer (`idx`).
_CACHE_WORDS = re.compile(r"cache|past|(^|_)kv(_|$)")


class KvCacheOutOfPlace(Check):
    """`k = cache_k.index_copy(dim, pos, k)` in a decode step: the whole key-value cache copied to write one token."""

    code = "TL408"
    name = "kv-cache-out-of-place"
    cost = Cost.CACHE_COPIED
    per_step = True
    device_bound = True
    message = ("`{call}` in {loop} writes the new keys or values into a copy of the whole cache `{cache}`: "
               "a read and a write of the preallocated cache for one token's entries, in every layer")
    fix_hint = ("Write into the cache in place and attend over it: `cache_k.index_copy_(dim, input_pos, k)` then "
                "`k = cache_k` (or `cache_k[:, :, input_pos] = k`), as gpt-fast's `KVCache.update` does")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        receiver = _receiver(ctx, node)
        if receiver is None:
            return  # no out-of-place write (`index_copy_` writes in place: nothing copied)
        cache = dotted(receiver)
        if cache is None or not _CACHE_WORDS.search(cache.rsplit(".", 1)[-1].lower()):
            return  # not a cache by its name: a token buffer (`idx.index_copy(0, pos, next)`) costs a few bytes
        if not isinstance(ctx.tree.parent(node), (cst.Assign, cst.AnnAssign, cst.Arg, cst.Return, cst.Element)):
            return  # the result is not kept: nothing reads the copy (and no cache is updated at all)
        if ctx.tree.enclosing_function(node) is None:
            return  # module code: run once, not per decoded token
        # Where it runs comes from the step: the join finds the decode loop that calls the
        # model whose layers run this forward (per layer per token), or drops it where none does.
        self.report(node, call=short_code(ctx.module, node, limit=50), cache=cache)


def _receiver(ctx, call: cst.Call) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
    """The tensor ``call`` writes into a copy of: ``cache_k`` of ``cache_k.index_copy(2, pos, k)``
    or of ``torch.index_copy(cache_k, 2, pos, k)``; None for any other call."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _OUT_OF_PLACE:
        qualified = ctx.qname(func)
        if qualified is not None and qualified.startswith("torch."):
            return call.args[0].value if call.args else None  # `torch.index_copy(cache, ...)`
        return func.value
    return None
