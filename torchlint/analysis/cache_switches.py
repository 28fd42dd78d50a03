"""Parameters that turn a decoder's cache on and default to off (bark's ``use_kv_caching=False``).

``def generate(model, x, use_kv_caching=False): ... if use_kv_caching and kv_cache is not None:
x_input = x[:, [-1]] else: x_input = x; logits, kv_cache = model(x_input, use_cache=use_kv_caching,
past_kv=kv_cache)``: the loop has a cache path, and at the function's defaults it does not take it.
So does ``cache = {} if use_cache else None`` before the loop, then ``model(..., cache=cache)``
(DALLE-pytorch's ``generate_images``, ``use_cache=False``): the keyword is passed, but at the
default what it carries is None. TL407 (:mod:`analysis.prefix`) asks its questions again at such
a parameter's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import assignment_of, mentions, targets

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


@dataclass(frozen=True, slots=True)
class CacheSwitch:
    """A parameter of the decoder's function, off by default, that turns its cache on: passed as
    the model's ``use_cache=``, or choosing the new token alone as its input (``if use_kv_caching
    and kv_cache is not None: x_input = x[:, [-1]] else: x_input = x``). At its default the
    calls it is passed to keep no cache, and what they return for one (``kv_cache``) holds none."""

    flag: str
    calls: frozenset[int]  # the model calls given `use_cache=flag`, by id
    state: frozenset[str]  # what those calls bind, and what the pass makes of it: the cache they return, None at the default
    # Names the calls are given that hold None unless the flag is passed (`cache = {} if use_cache else None`)
    unset: frozenset[str] = frozenset()


def cache_switches(ctx: FileContext, runs: list[cst.Call], ordered: list[cst.CSTNode]) -> list[CacheSwitch]:
    """The parameters of the loop's function, off by default, that may turn its cache on: each
    passed as a model call's ``use_cache=``, or opting in a binding of what a model call is given."""
    off = ctx.guards.off_by_default(runs[0]) if runs else frozenset()
    if not off:
        return []
    given = {name for call in runs for arg in call.args for name in mentions(arg.value)}
    found = []
    for flag in sorted(off):
        calls = [call for call in runs if any(_is_use_cache(arg, flag) for arg in call.args)]
        unset = frozenset(name for name in given if _unset_unless(ctx, name, runs[0], flag))
        if calls or unset or any(targets(s, items=False) & given and _opts_in(ctx, s, flag) for s in ordered):
            bound = (assignment_of(ctx, call) for call in calls)
            made = {name for s in bound if s is not None for name in targets(s)}
            found.append(CacheSwitch(flag, frozenset(map(id, calls)), frozenset(made | _read_from(ordered, made)), unset))
    return found


def _unset_unless(ctx: FileContext, name: str, at: cst.CSTNode, flag: str) -> bool:
    """Is ``name`` a plain local of ``at``'s function that holds None unless ``flag`` is passed:
    bound only to None or where the flag opts in (``cache = {} if use_cache else None``, or
    ``cache = None`` then ``if use_cache: cache = {}``), once at least where it does? A name any
    other statement binds (``cache = out.cache`` in the loop) is carried, not unset."""
    if "." in name:
        return False  # (an attribute may be set anywhere)
    bindings = ctx.bindings.lookup(name, at)
    opted = 0
    for binding in bindings:
        value = binding.value
        if binding.kind != "assign" or binding.element is not None or value is None:
            return False
        if type(value) is cst.IfExp and _none(value.orelse) and ctx.guards.opt_in(value.body) == flag \
                or ctx.guards.opt_in(binding.node) == flag:
            opted += 1
        elif not _none(value):
            return False
    return opted > 0


def _none(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value == "None"


def _read_from(ordered: list[cst.CSTNode], made: set[str]) -> set[str]:
    """The names the pass binds to a field of what the calls returned (``past = out.past_key_values``)."""
    found: set[str] = set()
    for statement in ordered:
        value = getattr(statement, "value", None)
        root = value
        while type(root) in (cst.Attribute, cst.Subscript):
            root = root.value  # type: ignore[union-attr]
        if root is not value and type(root) is cst.Name and root.value in made:
            found |= targets(statement, items=False)
    return found


def _opts_in(ctx: FileContext, statement: cst.CSTNode, flag: str) -> bool:
    """Is ``statement`` run only when ``flag`` is passed, or its value chosen by it (``x[:, -1:]
    if cached and state is not None else x``)?"""
    value = getattr(statement, "value", None)
    return ctx.guards.opt_in(statement) == flag or type(value) is cst.IfExp and ctx.guards.opt_in(value.body) == flag


def _is_use_cache(arg: cst.Arg, flag: str) -> bool:
    return arg.keyword is not None and arg.keyword.value == "use_cache" and type(arg.value) is cst.Name and arg.value.value == flag


def off_at_default(ctx: FileContext, switch: CacheSwitch | None, call: cst.Call, arg: cst.Arg) -> bool:
    """Does ``arg`` of ``call`` carry no cache at the switch's default: ``use_cache=flag``, the
    cache the call returns when given it (``past_kv=kv_cache``), ``past if flag else None``, or
    a name that holds None unless the flag is passed (``cache=cache``)?"""
    if switch is None:
        return False
    if _is_use_cache(arg, switch.flag):
        return True
    if id(call) in switch.calls and (mentioned := mentions(arg.value)) and mentioned <= switch.state:
        return True
    if (mentioned := mentions(arg.value)) and mentioned <= switch.unset:
        return True  # `cache=cache`, None at the default
    value = arg.value
    return type(value) is cst.IfExp and type(value.orelse) is cst.Name and value.orelse.value == "None" \
        and ctx.guards.opt_in(value.body) == switch.flag
