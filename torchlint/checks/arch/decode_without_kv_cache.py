"""A decode loop that runs its model over the whole growing sequence for every token, with no cache."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext, short_code
from torchlint.analysis.impact import Cost, Where
from torchlint.checks.base import Check


class DecodeWithoutKvCache(Check):
    """A decode loop whose model call is given the whole sequence it grows, with no KV cache: every token re-runs the prefix."""

    code = "TL407"
    name = "decode-without-kv-cache"
    cost = Cost.PREFIX_RECOMPUTED
    per_step = True
    message = ("`{call}` in {loop} is given the whole sequence `{sequence}`, which the loop grows by a token each "
               "pass, {cache}: every decoded token re-runs the model over the whole prefix")
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
                 f"`{_default_of(self.ctx, function, found.switch)}` in `{function.name.value}()`)") if switched else "with no cache"
        # (the model may be a class of another file: the join drops the finding where it keeps a cache;
        # a cache off by default waits for the callers of its function: do they all turn it on?)
        self.report(found.call, related=(found.grown_at,), where=where, call=short_code(self.ctx.module, found.call, limit=60),
                    sequence=found.sequence, cache=cache, unless_cached=found.call,
                    hint=self.switched_hint.format(flag=found.switch, function=function.name.value) if switched else "",  # type: ignore[union-attr]
                    unless_passed=(function, found.switch) if switched else None)


def _default_of(ctx: FileContext, function: cst.FunctionDef, name: str) -> str:
    """The default ``function`` gives its parameter ``name``, as written (``False``)."""
    param = next(p for p in (*function.params.params, *function.params.kwonly_params) if p.name.value == name)
    return short_code(ctx.module, param.default) if param.default is not None else ""
