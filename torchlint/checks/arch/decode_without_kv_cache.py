"""A decode loop that runs its model over the whole growing sequence for every token, with no cache."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext, short_code
from torchlint.analysis.decoding import mentions, may_run_a_model
from torchlint.analysis.impact import Cost, Unreached
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check
from torchlint.findings import MEDIUM


class DecodeWithoutKvCache(Check):
    """A decode loop whose model call is given the whole sequence it grows, with no KV cache: every token re-runs the prefix."""

    code = "TL407"
    name = "decode-without-kv-cache"
    cost = Cost.PREFIX_RECOMPUTED
    per_step = True
    message = "`{call}` in {loop} {what}: every decoded token re-runs the model over the whole prefix"
    fix_hint = ("Keep a key-value cache (an RNN: its hidden state) and give the model only the new token and its "
                "position: `model(idx_next, input_pos=pos)` with a `KVCache` (gpt-fast), `past_key_values=` "
                "(Hugging Face), or `model.generate(...)` of a library that caches")
    switched_hint = ("Default `{flag}` to True in `{function}()` (the cached path decodes the same tokens), or pass "
                     "`{flag}=True` at every call of it")

    def visit_For(self, node: cst.For) -> None:
        self._visit_loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._visit_loop(node)

    def _visit_loop(self, loop: cst.For | cst.While) -> None:
        found = self.ctx.loops.reruns_prefix(loop)
        if found is None:
            return  # no decode loop, or its model is given a cache, a state or the new token only
        # A generation every N steps of a training run (`if step % 500 == 0:` around it) is a
        # small share of that run, however wasteful each generation is.
        where = Where.EVERY_N if self.ctx.loops.enclosing_loops(loop) and self.ctx.guards.rare(loop) else None
        function = self.ctx.tree.enclosing_function(loop)
        switched = bool(found.switch) and function is not None
        cache = (f"with its cache off (`{found.switch}`, which turns it on, defaults to "  # type: ignore[union-attr]
                 f"`{_default_of(self.ctx, function, found.switch)}` in `{function.name.value}()`)") if switched \
            else f"whatever its `{found.cache}` keeps (it is given that prefix again)" if found.cache else "with no cache"
        # (the model may be a class of another file: the join drops the finding where it keeps a cache;
        # a cache off by default waits for the callers of its function: do they all turn it on?)
        self.report(found.call, related=(found.grown_at,), where=where, call=short_code(self.ctx.module, found.call, limit=60),
                    what=_GROWN.format(sequence=found.sequence, cache=cache), unless_cached=found.call,
                    hint=self.switched_hint.format(flag=found.switch, function=function.name.value) + _dropped(self.ctx, found.call)  # type: ignore[union-attr]
                    if switched else "",
                    unless_passed=(function, found.switch) if switched else None)


    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if type(node.func) is not cst.Attribute or node.func.attr.value != "generate":
            return
        setting = _cache_turned_off(ctx, node)
        if setting is None:
            return  # the library's default (its cache on), a cache turned on, or a flag the caller chooses
        forward = ctx.tree.enclosing_function(node)
        where = f"`{forward.name.value}()`" if forward is not None else "this file"
        # (one generation per call: how many calls a step makes, a step loop of the project says; where none is
        # seen, each generation still pays for it)
        self.report(node, cost=Cost.GENERATE_UNCACHED, hint=_GENERATE_HINT, call=short_code(ctx.module, node.func, limit=60) + "(...)",
                    what=_GENERATE.format(setting=setting),
                    unreached=Unreached(f"{where} (each generation; no loop that runs it is visible)", MEDIUM,
                                        f"{Cost.GENERATE_UNCACHED.value}, each generation", None))


_GROWN = "is given the whole sequence `{sequence}`, which the loop grows by a token each pass, {cache}"
_GENERATE = "runs a library's decode loop with its key-value cache turned off (`{setting}`)"
_GENERATE_HINT = ("Leave `use_cache` at its default (True) so that `generate` keeps the keys and values of the prefix; where the "
                  "model cannot take a cache yet, give its forward `past_key_values` (and return them) before turning it on")


def _cache_turned_off(ctx: FileContext, call: cst.Call) -> str | None:
    """How ``call`` (``.generate(...)``) turns its cache off: ``use_cache=False`` given to it, or a generation
    config every setting of whose ``use_cache`` in the function is ``False`` (``GenerationConfig(**kw)`` with
    ``kw = dict(..., use_cache=False)``, ``config.use_cache = False``: open_clip's CoCa); None otherwise."""
    given = ctx.keyword(call, "use_cache")
    if given is not None:
        return "use_cache=False" if _false(given.value) else None
    config = ctx.keyword(call, "generation_config")
    if config is None or type(config.value) is not cst.Name:
        return None
    name = config.value.value
    function = ctx.tree.enclosing_function(call)
    settings: list[cst.BaseExpression] = []
    for binding in ctx.bindings.lookup(name, call):
        if binding.kind == "assign" and type(binding.value) is cst.Call:
            settings.extend(_use_cache_arguments(ctx, binding.value, call))
    for assign in ctx.tree.nodes(cst.Assign):
        target = assign.targets[0].target
        if type(target) is cst.Attribute and target.attr.value == "use_cache" and dotted(target.value) == name \
                and ctx.tree.enclosing_function(assign) is function:
            settings.append(assign.value)  # `generation_config.use_cache = False`
    return f"{name}.use_cache = False" if settings and all(_false(v) for v in settings) else None


def _use_cache_arguments(ctx: FileContext, construction: cst.Call, at: cst.CSTNode) -> list[cst.BaseExpression]:
    """What a config's construction sets ``use_cache`` to: its keyword, or the entry of a ``dict(...)`` or
    ``{...}`` it is given with ``**`` (``GC(**gen_kwargs)``)."""
    found = [a.value for a in construction.args if a.keyword is not None and a.keyword.value == "use_cache"]
    for arg in construction.args:
        if arg.star != "**" or type(arg.value) is not cst.Name:
            continue
        for binding in ctx.bindings.lookup(arg.value.value, at):
            value = binding.value if binding.kind == "assign" else None
            if type(value) is cst.Call and dotted(value.func) == "dict":
                found.extend(a.value for a in value.args if a.keyword is not None and a.keyword.value == "use_cache")
            elif type(value) is cst.Dict:
                found.extend(e.value for e in value.elements if type(e) is cst.DictElement and type(e.key) is cst.SimpleString
                             and e.key.evaluated_value == "use_cache")
    return found


def _dropped(ctx: FileContext, call: cst.Call) -> str:
    """Words for a method of this file the call runs that takes the cache it is given and returns a model
    call's result without it (DALLE-pytorch's ``forward_with_cond_scale``: ``if cond_scale == 1: return
    self(*args, **kwargs)``, ``cache`` left out): turning the cache on does not reach the model there."""
    method = ctx.functions.called(call, ctx.qname(call.func))
    if method is None:
        return ""
    params = {p.name.value for p in (*method.params.params, *method.params.kwonly_params)}
    given = [a.keyword.value for a in call.args if a.keyword is not None and a.keyword.value in params and "cache" in a.keyword.value.lower()]
    for returned in ctx.tree.nodes(cst.Return):
        value = returned.value
        if type(value) is not cst.Call or ctx.tree.enclosing_function(returned) is not method:
            continue
        left_out = [name for name in given if name not in mentions(value)]
        if left_out and may_run_a_model(ctx, value):
            return (f"; `{method.name.value}()` also returns `{short_code(ctx.module, value, limit=40)}` without `{left_out[0]}`: "
                    "pass it on there too, or that path decodes with no cache whatever the flag says")
    return ""


def _false(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value == "False"


def _default_of(ctx: FileContext, function: cst.FunctionDef, name: str) -> str:
    """The default ``function`` gives its parameter ``name``, as written (``False``)."""
    param = next(p for p in (*function.params.params, *function.params.kwonly_params) if p.name.value == name)
    return short_code(ctx.module, param.default) if param.default is not None else ""
