"""The read of a sampled token that a decode loop needs on the host, and the reads before it in its step.

A sampler (ChatRWKV's ``sample_logits``) ends with ``return int(out)`` of ``out =
torch.multinomial(probs, 1)[0]``: the loop prints that token and feeds it to the next
``forward(token)``, so one read per token is the floor (``Position.TOKEN_READ``). The reads
before it on its path in the same step (``torch.cumsum(...).cpu().numpy()`` of the whole
vocabulary, ``float(sorted_probs[i])``) are extra waits per token, which the impact model
weighs as such (``Position.EXTRA_READ``), whatever drained the queue just before them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.host_consumers import returned
from torchlint.analysis.names import dotted
from torchlint.analysis.step_drains import read_expression

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# The ops whose result is a sampled token (not `topk` or `softmax`: those give candidates or
# probabilities, read for other reasons).
_SAMPLE_OPS = frozenset({"multinomial", "argmax", "sample"})
# Methods between a sample and its read that keep it the same token (`out[0]`, `.squeeze()`).
_SAME_TOKEN = frozenset({"squeeze", "flatten", "view", "reshape", "long", "int", "detach"})
_DEPTH = 3  # names followed back to the sample (`out = torch.multinomial(...)[0]` then `int(out)`)


def token_read(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is ``node`` a read of a sampled token (``int(out)`` of ``out = torch.multinomial(probs, 1)[0]``,
    ``torch.multinomial(probs, 1).item()``) whose value its function returns or yields?"""
    value = read_expression(node)
    if value is None or not _sampled(ctx, value, node, 0):
        return False
    # the sampler's result, returned or yielded (nanochat's `token = next_ids.item(); yield token`): its caller needs
    # the token on the host (not a stop check, `if nxt.item() == eos_id: break`, which waits for a token kept on the device)
    return returned(ctx, node) or _yielded(ctx, node)


def _yielded(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is the value ``node`` reads yielded, there or through the one name it is bound to?"""
    tree = ctx.tree
    parent = tree.parent(node)
    if type(parent) is cst.Yield:
        return True
    if type(parent) is not cst.Assign or len(parent.targets) != 1 or type(parent.targets[0].target) is not cst.Name:
        return False
    return any(type(tree.parent(use)) is cst.Yield for binding in ctx.bindings.bound_to(node) for use in ctx.bindings.uses(binding, ordered=True))


def precedes_token_read(ctx: FileContext, later: Iterable[cst.CSTNode], holds: Callable[[cst.CSTNode], bool] | None = None) -> bool:
    """Does a token read run in one of the ``later`` statements (those after a read on its path,
    up to its step's bounds, ``StepWork._statements_around``)? The read before it is then
    an extra wait per token: without it the token's own read would wait for the same queue.
    ``holds``: :func:`holds_token_read` of a statement, remembered by the caller (every read of a
    step asks of the statements after it: once each, not once per read before it)."""
    for statement in later:
        if type(statement) in (cst.For, cst.While, cst.FunctionDef, cst.ClassDef):
            continue  # (a read in a loop of its own runs per item of its own, not once beside the read before)
        if holds(statement) if holds is not None else holds_token_read(ctx, statement):
            return True
    return False


def holds_token_read(ctx: FileContext, statement: cst.CSTNode) -> bool:
    """Is a call under ``statement`` a token read (:func:`token_read`)?"""
    return any(type(node) is cst.Call and token_read(ctx, node) for node in ctx.tree.descendants(statement))


def returns_a_token(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Does every ``return`` of ``function`` (one at least) give a token it sampled on the device,
    read (``return int(out)``, ``return torch.multinomial(probs, 1).item()``) or not? A call of it
    in a loop picks the loop's next token from what it is given, as ``torch.multinomial`` would."""
    tree = ctx.tree
    returns = [node for node in tree.descendants(function) if type(node) is cst.Return and tree.enclosing_function(node) is function]
    sampled = [r for r in returns if r.value is not None and _sampled(ctx, read_expression(r.value) or r.value, r, 0)]
    # (a sampler with a host path too, `if probs.device.type == "cpu": ... return int(np.random.choice(...))`: a torch path samples)
    return bool(sampled) and all(r.value is not None for r in returns)


def _sampled(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
    """Is ``expr`` a token sampled on the device: a sampling op's result, indexed or squeezed,
    or a name bound to one before ``at``?"""
    while True:
        if type(expr) is cst.Subscript:
            expr = expr.value
        elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in _SAME_TOKEN:
            expr = expr.func.value
        else:
            break
    if type(expr) is cst.Call:
        func = expr.func
        name = func.attr.value if type(func) is cst.Attribute else dotted(func) or ""
        return name.rsplit(".", 1)[-1] in _SAMPLE_OPS
    if type(expr) is cst.Name and depth < _DEPTH:
        tree = ctx.tree
        bound = ctx.bindings.latest_before(ctx.bindings.lookup(expr.value, at), at, lambda b: not tree.is_inside(at, b.node))
        if bound is not None and bound.kind == "assign" and bound.element is None and bound.value is not None:
            return _sampled(ctx, bound.value, bound.node, depth + 1)
    return False
