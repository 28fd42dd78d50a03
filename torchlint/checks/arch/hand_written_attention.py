"""Scaled dot-product attention written out by hand instead of `F.scaled_dot_product_attention`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.attention_positions import CACHED, CROSS, FEATURE_MAP, LATENTS, attention_kind, few_positions, run_once_here, window_attention
from torchlint.analysis.attention_scores import SECOND_SCORES, score_product, softmax_input
from torchlint.analysis.attention_spellings import calls_fused, fused_branch, option_off_by_default
from torchlint.analysis.attention_weights import through_dropout, weights_times_values, weights_used_elsewhere
from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost, Unreached
from torchlint.findings import HIGH, LOW, MEDIUM
from torchlint.checks.base import Check


class HandWrittenAttention(Check):
    """`softmax(q @ k.transpose(-2, -1) * scale) @ v` (or its spellings) inside a model's step."""

    code = "TL405"
    name = "hand-written-attention"
    cost = Cost.UNFUSED_ATTENTION
    per_step = True
    message = ("`{softmax}` in {loop} is attention written by hand ({shape}): the full weight matrix is written "
               "to memory and read back by several kernels, where one fused kernel would do")
    fix_hint = ("Use `F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p if self.training else 0.0, "
                "is_causal=...)`: the scale, mask and dropout are its arguments")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        scores = softmax_input(ctx, node)
        if scores is None:
            return
        operands: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        product = score_product(ctx, scores, node, 0, operands=operands)
        if product is None:
            return  # a softmax over anything but q @ k^T (a classifier's logits, a gate)
        weights = through_dropout(ctx, node)
        use = weights_times_values(ctx, weights, node)
        if use is None:
            return  # the weights are not multiplied into values here: no attention, or returned for a plot
        returned: list[cst.CSTNode] = []
        if weights_used_elsewhere(ctx, weights, use, returned):
            return  # the weights themselves are kept or read: the fused kernel does not give them
        fused = fused_branch(ctx, node)
        if fused is not None:
            off = option_off_by_default(ctx, fused.test, fused) if calls_fused(ctx, fused.body) else None
            if off is None:
                return  # `if self.flash: F.scaled_dot_product_attention(...) else: <by hand>`: the fused kernel runs where it exists
            # (`flash=False` by default: the hand-written path is what runs unless a caller turns it on)
            product += f"; the default path: the fused kernel runs only with {off}"
        # One attention may spell its softmax in several branches (glide's bias of rank 2, of
        # rank 3, none): one finding for it, reported when the file is done.
        few = any(few_positions(ctx, operand, at) for operand, at in operands)
        kind = attention_kind(ctx, operands[0][0], operands[1][0], operands[0][1]) if len(operands) >= 2 else None
        if len(operands) >= 2 and few_positions(ctx, operands[0][0], operands[0][1], one=True):
            kind = ONE_QUERY  # (a class token's query, `self.q(x[:, 0])`: one row of scores per head, whatever else it is)
        if kind is None and SECOND_SCORES in product:
            kind = SECOND
        self._found.setdefault(id(use), []).append((node, use, product, few, bool(returned), kind))

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        # (softmax, product with the values, shape words, few positions, weights returned beside the output,
        # what it attends with and over: `attention_kind`'s, or SECOND)
        self._found: dict[int, list[tuple[cst.Call, cst.CSTNode, str, bool, bool, str | None]]] = {}

    def finish(self) -> None:
        ctx = self.ctx
        for spellings in self._found.values():
            if any(ctx.guards.opt_in(s[0], optional=True) is not None for s in spellings):
                # A branch of a parameter's test (`if mask is not None:` and its `else:`): which of
                # them a step runs is the join's to say, from what the callers pass: each stays.
                chosen = spellings
            else:  # one finding: the plain spelling in the chain's `else:` (no bias, no special case), else the first
                chosen = [next((s for s in spellings if _in_else(ctx, s[0])), spellings[0])]
            for node, use, product, few, returned, kind in chosen:
                if kind is not None and not returned:
                    cost, words = _KINDS[kind]
                    self.report(node, related=(use,), cost=cost, softmax=short_code(ctx.module, node.func) + "(...)",
                                shape=f"{product}; {words}", unreached=_in_forward(ctx, node, few, kind=kind))
                    continue
                if returned:  # `return output, attn`: medium, whatever its callers read (their option, `return_attns`, or a plot)
                    self.report(node, related=(use,), cost=Cost.RETURNED_ATTENTION, softmax=short_code(ctx.module, node.func) + "(...)",
                                shape=product + "; its weights are returned too, which the fused kernel does not give",
                                unreached=_in_forward(ctx, node, few, returned=True))
                    continue
                self.report(node, related=(use,), softmax=short_code(ctx.module, node.func) + "(...)", shape=product, unreached=_in_forward(ctx, node, few))


SECOND = "second scores"  # the scores carry a second score matrix of the same size (`SECOND_SCORES`)
ONE_QUERY = "one query"  # the queries are one position (a class token's, a pooled one)
# What the attention attends with and over -> its cost, and the words the message adds.
_KINDS = {
    LATENTS: (Cost.LATENT_ATTENTION, "its queries are a few learned latents, a Perceiver's: a thin score matrix"),
    ONE_QUERY: (Cost.LATENT_ATTENTION, "its query is one position, a class token's or a pooled one: one row of scores per head, "
                                       "linear in the sequence length, a small share of the step"),
    CACHED: (Cost.SIDE_ATTENTION, "its keys are a cache the module fills call by call (a decoder's KV cache): after the prompt's "
                                  "pass, each decoded token's query is one row of scores per head against it, linear in the length"),
    CROSS: (Cost.SIDE_ATTENTION, "cross-attention: its keys are another input's, usually a short one, a text's or media's"),
    FEATURE_MAP: (Cost.SIDE_ATTENTION, "over a channels-first feature map's pixels: an attention block between a convolutional "
                                       "network's blocks, at the resolutions it is built for"),
    SECOND: (Cost.SIDE_ATTENTION, "the second score matrix would go to the fused kernel as a float mask, written and read anyway"),
}


def _in_else(ctx, node: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` in the final ``else:`` of an ``if`` (the branch no test picks)?"""
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.Else:
            return True
        if type(ancestor) in (cst.If, cst.FunctionDef):
            return False
    return False


def _in_forward(ctx, node: cst.CSTNode, few: bool = False, returned: bool = False, kind: str | None = None) -> Unreached | None:  # type: ignore[no-untyped-def]
    """Where no step is seen to run the model (built from a config, a library's model), its
    ``forward`` still runs on every call, in each step that trains or samples with the model:
    high, since its score matrix is quadratic in the sequence length and a model's attention
    runs in each of its layers; medium where the queries or keys are a few positions (a class
    token's, a learned query's, a pooled one: ``few``), whose scores are a thin slice, or a
    window's (Swin's); low where this file runs the model once, outside any loop (a script's
    visualisation). Latent queries (a Perceiver's) are low, cross-attention, a conv net's
    feature map and a second score matrix medium (``_KINDS``), wherever a step runs them. With
    the ``forward``s of the modules of this file that build it (None: built elsewhere too)."""
    forward = ctx.loops.module_forward(node)
    if forward is None:
        return None
    owners, off = _builders(ctx, forward.split(".")[0])
    if off:  # `if attention_type == "flash": Flash() else: <this class>` with `attention_type="flash"`
        return Unreached(f"`{forward}()` (every call of a model built with `{off}` other than its default; no loop that runs it is visible)", LOW,
                         f"{Cost.UNFUSED_ATTENTION.value}, only where a module is built with `{off}` other than its default", owners)
    if run_once_here(ctx, forward.split(".")[0]):  # a script that runs the model on an image or two (a visualisation)
        return Unreached(f"`{forward}()` (a model this file runs once, outside any loop)", LOW,
                         f"{Cost.UNFUSED_ATTENTION.value}, once: the file builds the model and runs it outside any loop "
                         "(an analysis or a visualisation), no step", owners)
    if window_attention(ctx, forward.split(".")[0]):
        return Unreached(f"`{forward}()` (every call of the model; no loop that runs it is visible)", MEDIUM,
                         f"{Cost.UNFUSED_ATTENTION.value}, on every call of the module, within windows (Swin's): a window's "
                         "positions squared per window, not the sequence length squared, and how often it runs per step is not visible", owners)
    if kind is not None and not returned:
        cost, words = _KINDS[kind]
        return Unreached(f"`{forward}()` (every call of the model; no loop that runs it is visible)", LOW if cost is Cost.LATENT_ATTENTION else MEDIUM,
                         f"{cost.value}, on every call of the module ({words}); how often it runs per step is not visible", owners)
    if returned:
        return Unreached(f"`{forward}()` (every call of the model; no loop that runs it is visible)", MEDIUM,
                         f"{Cost.RETURNED_ATTENTION.value}, on every call of the module; how often it runs per step is not visible", owners)
    if few:
        return Unreached(f"`{forward}()` (every call of the model; no loop that runs it is visible)", MEDIUM,
                         f"{Cost.UNFUSED_ATTENTION.value}, on every call of the module, over a few query or key positions: "
                         "a thin score matrix, and how often it runs per step is not visible", owners)
    return Unreached(f"`{forward}()` (every call of the model; no loop that runs it is visible)", HIGH,
                     f"{Cost.UNFUSED_ATTENTION.value}, on every call of the module: a score matrix quadratic in the sequence length, "
                     "for every head, in every layer built of it, in each step that trains or samples with the model", owners,
                     # (an inference application, whose sampling loops do not run this model: tortoise's CLVP scoring candidates)
                     untrained=(MEDIUM, f"{Cost.UNFUSED_ATTENTION.value}, on every call of the module, in a project that trains nothing "
                                        "and runs it in none of its sampling loops: forwards only, once per call (a scoring or "
                                        "encoding pass), not once per step"))


def _builders(ctx, name: str) -> tuple[tuple[str, ...] | None, str]:  # type: ignore[no-untyped-def]
    """``("Block.forward",)`` where only ``Block.__init__`` (a module of this file) calls
    ``name``: the module runs when a ``Block`` does. None where it is built anywhere else.
    And the parameter off by default (``Guards.opt_in``) behind every one of those
    constructions, where one is ("" where any is built on the default path)."""
    owners, off = [], []
    for call in ctx.tree.nodes(cst.Call):
        if type(call.func) is not cst.Name or call.func.value != name:
            continue
        function = ctx.tree.enclosing_function(call)
        cls = ctx.tree.enclosing_class(function) if function is not None else None
        if function is None or function.name.value != "__init__" or cls is None or not ctx.is_module_class(cls.name.value):
            return None, ""  # built at module level or by a function: the file's own steps show its use
        owners.append(f"{cls.name.value}.forward")
        off.append(ctx.guards.opt_in(call, optional=True) or "")
    return tuple(owners), off[0] if off and all(off) else ""
