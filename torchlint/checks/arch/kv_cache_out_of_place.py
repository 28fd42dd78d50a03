"""A key-value cache updated out of place: the whole cache copied to write one token (`index_copy`, or `torch.cat` grown)."""

from __future__ import annotations

import re

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import string_key
from torchlint.checks.base import Check

# Out-of-place writes into a tensor: each returns a new tensor as large as the one written into.
_OUT_OF_PLACE = frozenset({"index_copy", "index_put", "scatter", "slice_scatter", "select_scatter"})
# What names a key-value cache (`cache_k`, `self.k_cache`, `past_key`, `kv_cache[0]`), not a token buffer (`idx`).
_CACHE_WORDS = re.compile(r"cache|past|(^|_)kv(_|$)")
# Concatenations: each returns a new tensor holding all its inputs.
_CATS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
# A grown cache also names keys or values, or is the whole per-layer cache (`past_key`, `cache_v`,
# `layer_past`, GPT-2's `past`): `past_obs` or `past_rewards`, a history an agent keeps, is not one.
_KEY_VALUE_WORDS = re.compile(r"(^|_)(k|v|keys?|values?|kv)(_|$)|^(layer_)?(past|cache)$|^past_key_values?$|^kv_cache$")
# What an object unpacked into keys and values is called when it holds what earlier tokens left.
_STORED = re.compile(r"cache|past")
# Tensor methods whose result is the copy itself, or a view or cast of it (`torch.cat(...).detach()`): kept, it is the cache.
_KEEPS_TENSOR = frozenset({"detach", "contiguous", "to", "float", "half", "bfloat16"})


class KvCacheOutOfPlace(Check):
    """`k = cache_k.index_copy(dim, pos, k)` or `k = torch.cat((past_key, k), -2)` in a decode step: the whole key-value cache copied to write one token."""

    code = "TL408"
    name = "kv-cache-out-of-place"
    cost = Cost.CACHE_COPIED
    per_step = True
    device_bound = True
    message = "`{call}` in {loop} {what}"
    fix_hint = ("Write into the cache in place and attend over it: `cache_k.index_copy_(dim, input_pos, k)` then "
                "`k = cache_k` (or `cache_k[:, :, input_pos] = k`), as gpt-fast's `KVCache.update` does")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        grown = _grown_cache(ctx, node)
        if grown is not None:
            self._report_kept(node, grown, _GROWN, cost=Cost.CACHE_GROWN, hint=_GROWN_HINT)
            return
        receiver = _receiver(ctx, node)
        if receiver is None:
            return  # no out-of-place write (`index_copy_` writes in place: nothing copied)
        cache = dotted(receiver)
        if cache is None or not _CACHE_WORDS.search(cache.rsplit(".", 1)[-1].lower()):
            return  # not a cache by its name: a token buffer (`idx.index_copy(0, pos, next)`) costs a few bytes
        self._report_kept(node, cache, _WRITTEN)

    def _report_kept(self, node: cst.Call, cache: str, what: str, cost: Cost | None = None, hint: str = "") -> None:
        ctx = self.ctx
        kept: cst.CSTNode = node
        while type(ctx.tree.parent(kept)) is cst.Attribute and ctx.tree.parent(kept).attr.value in _KEEPS_TENSOR \
                and type(ctx.tree.parent(ctx.tree.parent(kept))) is cst.Call:  # type: ignore[attr-defined]
            kept = ctx.tree.parent(ctx.tree.parent(kept))  # `torch.cat([cache[m], out], 1).detach()`: the copy's view is kept
        if not isinstance(ctx.tree.parent(kept), (cst.Assign, cst.AnnAssign, cst.Arg, cst.Return, cst.Element)):
            return  # the result is not kept: nothing reads the copy (and no cache is updated at all)
        if ctx.tree.enclosing_function(node) is None:
            return  # module code: run once, not per decoded token
        # Where it runs comes from the step: the join finds the decode loop that calls the
        # model whose layers run this forward (per layer per token), or drops it where none does.
        self.report(node, cost=cost, hint=hint, call=short_code(ctx.module, node, limit=50), what=what.format(cache=cache))


_WRITTEN = ("writes the new keys or values into a copy of the whole cache `{cache}`: "
            "a read and a write of the preallocated cache for one token's entries, in every layer")
_GROWN = ("grows the key-value cache `{cache}` by concatenation: a new tensor one token longer, the whole cache "
          "copied into it for each token (T²/2 positions copied for T tokens), in every layer")
_GROWN_HINT = ("Preallocate the cache for the whole generation (`torch.empty(B, heads, max_len, head_dim)`) and write each "
               "token in place: `cache_k[:, :, pos] = k`, then attend over `cache_k[:, :, :pos + 1]`, as gpt-fast's "
               "`KVCache` or Hugging Face's `StaticCache` do")


def _grown_cache(ctx, call: cst.Call) -> str | None:  # type: ignore[no-untyped-def]
    """The cache ``call`` concatenates onto: ``past_key`` of ``torch.cat((past_key, k), dim=-2)``,
    ``layer_past`` of ``torch.cat([layer_past[0], k], -2)``, ``past`` of ``torch.cat(past, dim=-2)``
    (a list of per-token caches joined again for each token); None for any other call."""
    if not call.args or ctx.qname(call.func) not in _CATS:
        return None
    first = call.args[0].value
    parts = [e.value for e in first.elements] if isinstance(first, (cst.List, cst.Tuple)) else [first]
    for part in parts:
        entry = _state_entry(ctx, part, call)
        if entry is not None:
            return entry
        while isinstance(part, cst.Subscript):
            part = part.value  # `layer_past[0]`, `past[i]`: the cache it indexes
        name = dotted(part)
        if _names_a_cache(name) or isinstance(part, cst.Name) and _unpacked_from_a_cache(ctx, part, call):
            return name
    return None


def _state_entry(ctx, part: cst.BaseExpression, call: cst.Call) -> str | None:  # type: ignore[no-untyped-def]
    """``self._streaming_state['past_keys']`` (audiocraft's ``_complete_kv``), read where it is joined or
    into a name first (``pk = self._streaming_state['past_keys']``): a cache kept in a dict entry on ``self``,
    when the function stores into that same entry (the grown tensor kept for the next token). Its spelling, else None."""
    at: cst.CSTNode = call
    if isinstance(part, cst.Name):
        binding = ctx.bindings.reaching(part.value, call)
        if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
            return None
        part, at = binding.value, binding.node
    if not isinstance(part, cst.Subscript):
        return None
    key, owner = string_key(part), dotted(part.value)
    if key is None or owner is None or not owner.startswith("self.") or not _names_a_cache(key):
        return None  # (an entry named for no cache, `state['past_frames']`, or a dict that lives only for this call)
    function = ctx.tree.enclosing_function(at)
    stored = function is not None and any(
        isinstance(target.target, cst.Subscript) and dotted(target.target.value) == owner and string_key(target.target) == key
        for target in ctx.tree.nodes_under(function, cst.AssignTarget))
    # (stored back under the same key: the cache the next token reads; joined into another entry, it is no cache grown)
    return f"{owner}[{key!r}]" if stored else None


def _names_a_cache(name: str | None) -> bool:
    """``past_key``, ``self.k_cache``, ``cache.cached_kv``, ``layer_past``: a key-value cache by its name."""
    last = name.rsplit(".", 1)[-1].lower() if name is not None else ""
    return bool(_CACHE_WORDS.search(last) and _KEY_VALUE_WORDS.search(last))


def _unpacked_from_a_cache(ctx, part: cst.Name, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Is ``part`` one of the tensors a cache is unpacked into (``ck, cv = cache.cached_kv``,
    ``past_k, past_v = layer_past``): named for nothing, but what flows in is the cache."""
    binding = ctx.bindings.reaching(part.value, at)
    if binding is None or binding.kind != "assign" or binding.element is None or binding.value is None:
        return False  # (a plain `k = f(x)` says nothing: only the unpacking of a cache object's keys and values)
    value = binding.value
    while isinstance(value, cst.Subscript):
        value = value.value  # `ck, cv = caches[layer]`
    name = dotted(value)
    # (a cache or a past by name: `mem_k, mem_v = self.mem_kv` unpacks learned memory keys, the same few rows each call)
    return _names_a_cache(name) and _STORED.search(name.rsplit(".", 1)[-1].lower()) is not None  # type: ignore[union-attr]


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
