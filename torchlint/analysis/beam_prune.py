"""A beam search over a score tensor's frames, with or without a model in it: each iteration
picks its candidates with ``topk`` from this frame's scores, extends the hypotheses it carries
with them, and keeps the best ``k`` for the next frame.

wenet's ``ctc_prefix_beam_search``: ``for t in range(num_t): logp = ctc_prob[t];
top_k_logp, top_k_index = logp.topk(beam_size); for u in top_k_index: ... for prefix, s in
cur_hyps: ...``, then ``cur_hyps = next_hyps[:beam_size]``; its transducer prefix beam search
runs the predictor on the beam too, ``beam_init = fusion_A[:beam_size]``. Each iteration is
one step of the search (a decoded frame), and what it does per hypothesis or per candidate
repeats within that step: a decode loop (``Loops.decodes``), whatever runs the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.tree import node_types

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_LOOPS = node_types(cst.For, cst.While)
# Where the carried hypotheses are read back in the iteration: walked, or counted.
_READERS = node_types(cst.For, cst.CompFor)


def prunes_a_beam(ctx: FileContext, loop: cst.CSTNode) -> bool:
    """Is ``loop`` a beam search over frames (see the module's docstring): a ``topk`` in its
    iteration, and a name it carries from the iteration before, read in the iteration (walked by
    a loop or a comprehension, or counted) and rebound in its own body to the first ``k`` of
    what the iteration made (``cur_hyps = next_hyps[:beam_size]``)? Not a training loop: one
    that steps an optimizer or runs a backward prunes hard examples, not hypotheses."""
    if type(loop) not in _LOOPS:
        return False
    own = ctx.loops.own_nodes(loop.body)
    # (the candidates come from this frame's scores: without a `topk`, a loop keeping a list's first k is no search)
    if not any(type(n) is cst.Call and ctx.method_name(n) == "topk" for n in own):
        return False
    pruned = {target.value for n in own if type(n) is cst.Assign and len(n.targets) == 1
              and type(target := n.targets[0].target) is cst.Name and _first_k(n.value)}
    if not pruned:
        return False
    everything = list(ctx.tree.descendants(loop.body))
    if any(type(n) is cst.Call and ctx.method_name(n) in ("backward", "zero_grad") for n in everything):
        return False  # (a training loop's hard-example mining: its step is the update, not a frame)
    for name in pruned:
        # carried: bound before the loop (the first hypotheses), so the iteration reads the last one's
        binding = ctx.bindings.reaching(name, loop)
        if binding is None:
            continue
        if any(type(n) in _READERS and _reads(n.iter, name) or type(n) is cst.Call and _counts(n, name) for n in everything):
            return True
    return False


def _first_k(value: cst.BaseExpression) -> bool:
    """``next_hyps[:beam_size]``, ``sorted(...)[:k]``: the first ``k`` of a list, ``k`` not a literal 1."""
    if type(value) is not cst.Subscript or len(value.slice) != 1 or type(value.slice[0].slice) is not cst.Slice:
        return False
    part = value.slice[0].slice
    lower_ok = part.lower is None or type(part.lower) is cst.Integer and part.lower.value == "0"
    # (`x[:1]`, `x[:-1]`: one item, or all but the last, prune no beam)
    return lower_ok and part.step is None and part.upper is not None and type(part.upper) in (cst.Name, cst.Attribute)


def _reads(expr: cst.BaseExpression, name: str) -> bool:
    """Does ``expr`` walk ``name`` (``cur_hyps``, ``enumerate(cur_hyps)``, ``range(len(beam))``)?"""
    if type(expr) is cst.Name:
        return expr.value == name
    if type(expr) is cst.Call:
        return any(_reads(arg.value, name) or type(arg.value) is cst.Call and _counts(arg.value, name) for arg in expr.args)
    return False


def _counts(call: cst.Call, name: str) -> bool:
    """``len(beam)``."""
    return type(call.func) is cst.Name and call.func.value == "len" and len(call.args) == 1 \
        and type(call.args[0].value) is cst.Name and call.args[0].value.value == name
