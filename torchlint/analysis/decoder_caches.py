"""What says a decoder's model call runs from a key-value cache: what the call is given (a cache, a
start position, a state it returned before), what its class's ``forward`` must be given, and the caches
a file's classes keep and update on ``self``. TL407 (:mod:`analysis.prefix`) asks these; so does the
summary of a file's classes (``ClassSummary.cache_methods``/``keeps_cache``) for the join.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.cache_switches import CacheSwitch, off_at_default
from torchlint.analysis.decoding import mentions
from torchlint.analysis.members import method_named
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Names of what a cached decoder is given besides the new tokens: its cache, or where it starts.
CACHE_WORDS = ("past", "cache", "kv", "incremental", "mems", "layer_state")
POSITION_NAMES = frozenset({"input_pos", "start_pos", "prev_pos", "cur_pos", "pos", "offset", "seqlen_offset", "cache_position", "step"})
# A model's attributes that hold a key-value cache (not `cos_cached`: a rotary table).
_CACHE_ATTRIBUTES = ("kv", "past", "k_cache", "v_cache", "cache_k", "cache_v", "key_cache", "value_cache", "layer_cache")


def passes_a_cache(ctx: FileContext, call: cst.Call, outputs: set[str], positions: bool = True, switch: CacheSwitch | None = None) -> bool:
    """Is the call given a cache, a start position, or a state it returned before
    (``past_key_values=out.past_key_values``, ``model(x, input_pos)``, ``rnn(x, hidden)``
    with ``out, hidden = rnn(...)``)? Without ``positions``, a cache by name only (a helper
    given the loop's ``step`` is no cached model). At a ``switch``'s default, what it turns off is none."""
    for arg in call.args:
        if off_at_default(ctx, switch, call, arg):
            continue
        if arg.star:
            if _kwargs_may_hold_a_cache(ctx, call):
                return True  # `**kwargs` may hold the cache
            continue
        keyword = arg.keyword.value if arg.keyword is not None else ""
        if keyword == "use_cache":
            if not (type(arg.value) is cst.Name and arg.value.value == "False"):
                return True
            continue
        # (a position only as the argument itself: `tokens[:, :step]` is the prefix up to the loop's step)
        given = (dotted(arg.value) or "").rsplit(".", 1)[-1].lower()
        if positions and (keyword in POSITION_NAMES or given in POSITION_NAMES) or cache_word(keyword):
            return True
        if any(cache_word(name.rsplit(".", 1)[-1]) for name in mentions(arg.value, slices=False)):
            return True
        if mentions(arg.value) & outputs:
            return True  # a state the model returned last pass: an RNN's hidden, a cache by any name
    return False


def cache_word(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in CACHE_WORDS)


def _cache_name(name: str) -> bool:
    return cache_word(name) or name.lower() in POSITION_NAMES


def forward_takes_a_cache(ctx: FileContext, call: cst.Call) -> bool:
    """Does the model's class, where this file defines it (``self(x)``, ``model = GPT(cfg)``),
    take a cache or a start position in its ``forward`` that the call fills (one it must: a
    parameter with no default)? One left out at its default (``kv_cache=None``) runs without."""
    cls = _model_class(ctx, call)
    forward = method_named(cls, "forward") if cls is not None else None
    if forward is None:
        return False
    filled = sum(1 for arg in call.args if arg.keyword is None and not arg.star)
    params = [p for p in forward.params.params if p.name.value != "self"]
    return any(_cache_name(p.name.value) and (p.default is None or index < filled) for index, p in enumerate(params)) \
        or any(_cache_name(p.name.value) and p.default is None for p in forward.params.kwonly_params)


def _kwargs_may_hold_a_cache(ctx: FileContext, call: cst.Call) -> bool:
    """May the ``**kwargs`` a model call passes on hold a cache? Not where the call runs the ``forward``
    of a class of this file (``self.forward(out, **kwargs)`` in PaLM's own ``generate``) that takes no
    cache, no start position and no ``**kwargs`` of its own: nothing passed there can be one."""
    cls = _model_class(ctx, call)
    forward = method_named(cls, "forward") if cls is not None else None
    if forward is None:
        return True  # (a model not of this file: its forward is not seen)
    params = (*forward.params.params, *forward.params.kwonly_params)
    return isinstance(forward.params.star_kwarg, cst.Param) or any(_cache_name(p.name.value) for p in params)


def _model_class(ctx: FileContext, call: cst.Call) -> cst.ClassDef | None:
    """The class of this file that the call runs: ``self(x)`` in a method, or a name or
    ``self.`` attribute bound to ``Cls(...)`` once."""
    name = dotted(call.func)
    if name in ("self", "self.forward"):
        return ctx.tree.enclosing_class(call)
    bound = ctx.bindings.lookup(name, call) if name is not None else []
    if len(bound) != 1 or bound[0].kind != "assign" or type(bound[0].value) is not cst.Call:
        return None
    made = dotted(bound[0].value.func)
    return next(iter(ctx.tree.classes_named(made)), None) if made is not None else None


def file_keeps_a_cache(ctx: FileContext) -> bool:
    """Does a method of this file update a key-value cache it keeps (``self.cache_k[:b, s:e] =
    xk``, ``self.kv_cache = ...`` outside ``__init__``)? Its model decodes from that cache."""
    return bool(_cache_updates(ctx))


def keeps_a_cache(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """Does a method of ``cls`` update a key-value cache it keeps on ``self``?"""
    return any(ctx.tree.enclosing_class(node) is cls for node in _cache_updates(ctx))


def cache_methods(cls: cst.ClassDef) -> tuple[str, ...]:
    """The methods of ``cls`` that must be given a key-value cache or a start position (``forward(self,
    tokens, start_pos)``; not ``forward(self, idx, kv_cache=None)``, which a call leaving it out runs without)."""
    return tuple(s.name.value for s in cls.body.body if type(s) is cst.FunctionDef  # type: ignore[union-attr]
                 and any(_cache_name(p.name.value) and p.default is None for p in (*s.params.params, *s.params.kwonly_params)))


def _cache_updates(ctx: FileContext) -> list[cst.Assign]:
    """The assignments of the file that update a key-value cache on ``self``."""
    known = ctx.__dict__.get("_cache_updates")
    if known is None:
        known = ctx.__dict__["_cache_updates"] = [node for node in ctx.tree.nodes(cst.Assign) if _updates_a_cache(ctx, node)]
    return known


def _updates_a_cache(ctx: FileContext, node: cst.Assign) -> bool:
    assigned: list[cst.BaseExpression] = []
    for target in node.targets:  # (`self.kv_cache, self.hooks = self.model.install_kv_cache_hooks()`: whisper's inference)
        whole = target.target
        if type(whole) in (cst.Tuple, cst.List):
            assigned.extend(e.value for e in whole.elements)  # type: ignore[attr-defined]
        else:
            assigned.append(whole)
    for value in assigned:
        subscripted = type(value) is cst.Subscript
        while type(value) is cst.Subscript:
            value = value.value
        name = dotted(value) or ""
        if not name.startswith("self.") or not any(word in name.rsplit(".", 1)[-1].lower() for word in _CACHE_ATTRIBUTES):
            continue
        function = ctx.tree.enclosing_function(node)
        if subscripted or function is not None and function.name.value != "__init__":
            return True
    return False
