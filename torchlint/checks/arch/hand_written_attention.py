"""Scaled dot-product attention written out by hand instead of `F.scaled_dot_product_attention`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.attention_positions import CROSS, FEATURE_MAP, LATENTS, attention_kind, few_positions, run_once_here, window_attention
from torchlint.analysis.attention_spellings import (
    aliased_into_returned_record, calls_fused, default_softmax, einsum_specs, fused_branch, option_off_by_default, rebound_from,
)
from torchlint.analysis.attention_weights import returned_beside_output
from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost, Unreached
from torchlint.analysis.names import dotted
from torchlint.findings import HIGH, LOW, MEDIUM
from torchlint.checks.base import Check

_SOFTMAX = frozenset({"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"})
_MATMUL = frozenset({"torch.matmul", "torch.bmm", "torch.einsum"})
_DROPOUT = frozenset({"torch.nn.functional.dropout", "torch.dropout"})
# Steps between the scores and the softmax that SDPA takes as arguments (scale, mask), or
# that only reshape them (Swin's `attn.view(B // nW, nW, heads, N, N) + mask`).
_SCORE_METHODS = frozenset({"masked_fill", "masked_fill_", "float", "to", "type_as", "contiguous", "view", "reshape"})
# The same reshapes spelled as functions of torch (score_sde's `w = torch.reshape(w, (B, H, W, H * W))`).
_RESHAPES = frozenset({"torch.reshape", "torch.flatten"})
# What the weights may go through on their way to the values: a transpose, or a reshape back to
# the positions' shape (`w = torch.reshape(w, (B, H, W, H, W))` before `einsum(w, v)`).
_WEIGHT_MOVES = frozenset({"permute", "transpose", "view", "reshape", "flatten", "contiguous"})
_WEIGHT_MOVE_FUNCTIONS = _RESHAPES | {"torch.permute", "torch.transpose"}


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
        scores = _softmax_input(ctx, node)
        if scores is None:
            return
        operands: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        product = _score_product(ctx, scores, node, 0, operands=operands)
        if product is None:
            return  # a softmax over anything but q @ k^T (a classifier's logits, a gate)
        weights = _through_dropout(ctx, node)
        use = _weights_times_values(ctx, weights, node)
        if use is None:
            return  # the weights are not multiplied into values here: no attention, or returned for a plot
        returned: list[cst.CSTNode] = []
        if _weights_used_elsewhere(ctx, weights, use, returned):
            return  # the weights themselves are kept or read: the fused kernel does not give them
        fused = fused_branch(ctx, node)
        if fused is not None:
            off = option_off_by_default(ctx, fused.test, fused) if calls_fused(ctx, fused.body) else None
            if off is None:
                return  # `if self.flash: F.scaled_dot_product_attention(...) else: <by hand>`: the fused kernel runs where it exists
            # (`flash=False` by default: the hand-written path is what runs unless a caller turns it on)
            product += f"; the default path: the fused kernel runs only with `{off}=True`"
        # One attention may spell its softmax in several branches (glide's bias of rank 2, of
        # rank 3, none): one finding for it, reported when the file is done.
        few = any(few_positions(ctx, operand, at) for operand, at in operands)
        kind = attention_kind(ctx, operands[0][0], operands[1][0], operands[0][1]) if len(operands) >= 2 else None
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
# What the attention attends with and over -> its cost, and the words the message adds.
_KINDS = {
    LATENTS: (Cost.LATENT_ATTENTION, "its queries are a few learned latents, a Perceiver's: a thin score matrix"),
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


def _softmax_input(ctx, call: cst.Call) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
    """The tensor a softmax over the last dimension is taken of, or None."""
    if ctx.qname(call.func) in _SOFTMAX:
        args = [a for a in call.args if a.keyword is None]
        dim = ctx.keyword(call, "dim") or (args[1] if len(args) > 1 else None)
        target = args[0].value if args else None
    elif (module := _softmax_module(ctx, call)) is not None and call.args and call.args[0].keyword is None:
        # `self.softmax = nn.Softmax(dim=-1)` in `__init__`, then `self.softmax(attn)`
        dim = ctx.keyword(module, "dim") or (module.args[0] if module.args and module.args[0].keyword is None else None)
        target = call.args[0].value
    elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "softmax" and ctx.qname(call.func) is None:
        dim = ctx.keyword(call, "dim") or (call.args[0] if call.args and call.args[0].keyword is None else None)
        target = call.func.value
    elif _softmax_alias(ctx, call) and call.args and call.args[0].keyword is None:
        # `softmax = torch.softmax if ... else stable_softmax`, then `softmax(dots, dim=-1)`
        args = [a for a in call.args if a.keyword is None]
        dim = ctx.keyword(call, "dim") or (args[1] if len(args) > 1 else None)
        target = args[0].value
    elif call.args and call.args[0].keyword is None and (chosen := default_softmax(ctx, call, _SOFTMAX)) is not None:
        # `self.attn_fn(sim)`, the constructor's chain binding `partial(F.softmax, dim=attn_dim)` in its final `else:`
        return call.args[0].value if _last_dim(chosen) else None
    else:
        return None
    if dim is None or not _last_dim(dim.value):
        return None
    return target


def _softmax_alias(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """A local name every binding of which is a softmax (either branch of a conditional one)."""
    if not isinstance(call.func, cst.Name) or ctx.qname(call.func) is not None:
        return False
    bound = ctx.bindings.lookup(call.func.value, call)
    values = [b.value for b in bound if b.kind == "assign" and b.element is None and b.value is not None]
    if not bound or len(values) != len(bound):
        return False
    branches = [v for value in values for v in ((value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,))]
    return any(ctx.qname(v) in _SOFTMAX for v in branches)


def _softmax_module(ctx, call: cst.Call) -> cst.Call | None:  # type: ignore[no-untyped-def]
    """The ``nn.Softmax(...)`` an attribute of ``self`` is bound to, when it is the only binding."""
    name = dotted(call.func)
    if name is None or not name.startswith("self.") or name.count(".") != 1:
        return None  # (asked of every call: the class only for a `self.x(...)`)
    cls = ctx.tree.enclosing_class(call)
    if cls is None:
        return None
    bound = ctx.bindings.self_attrs.get(id(cls), {}).get(name, [])
    values = [b.value for b in bound if b.kind == "assign" and b.value is not None and b.element is None]
    if len(values) != 1 or len(bound) != 1 or not isinstance(values[0], cst.Call):
        return None
    return values[0] if ctx.qname(values[0].func) in ("torch.nn.Softmax", "torch.nn.modules.activation.Softmax") else None


def _last_dim(expr: cst.BaseExpression) -> bool:
    return (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, cst.Integer) and expr.expression.value == "1") or (
        isinstance(expr, cst.Integer) and expr.value in ("2", "3"))


SECOND_SCORES = " plus a second score matrix (relative positions')"
_PASSED = "the parameter"  # what `_score_product` answers where the scores are a helper's parameter
_ALONG = (cst.Multiply, cst.Divide, cst.Add, cst.Subtract)  # a scale or a bias (`+ rel_pos`, `+ mask`)
_ALONG_IN_PLACE = (cst.MultiplyAssign, cst.DivideAssign, cst.AddAssign, cst.SubtractAssign)


def _score_product(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int, param: cst.Param | None = None,  # type: ignore[no-untyped-def]
                   operands: list | None = None) -> str | None:
    """How the scores were made, when they are ``q @ k^T`` through a scale, a bias, a mask, a
    cast, or a helper of this file that returns the scores it is given with a bias added
    (segment-anything's ``attn = add_decomposed_rel_pos(attn, q, ...)``). Inside such a
    helper, ``param`` is the parameter that holds the scores: reaching it answers ``_PASSED``.
    ``operands`` receives the query and key operands of the product found, with where they stand."""
    if depth > 12:  # each name, cast, reshape, mask and helper on the way counts one
        return None
    if isinstance(expr, cst.Name):
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is not None and param is not None and binding.node is param:
            return _PASSED
        if binding is not None and binding.kind == "augassign" and isinstance(binding.node.operator, _ALONG_IN_PLACE):
            return _score_product(ctx, expr, binding.node, depth + 1, param, operands)  # `attn += bias`: the scores before it
        if binding is None or binding.kind != "assign" or binding.value is None or binding.element is not None:
            return None
        found = _score_product(ctx, binding.value, binding.node, depth + 1, param, operands)
        if found is None:
            # `if rel_pos is not None: weight = rel_pos(weight)` (tortoise-tts's QKVAttentionLegacy), `if self.cog_signed:
            # sim = sim.abs()` (x-transformers): a step this file cannot follow on a branch that may be skipped: the
            # scores of the paths that skip it (the default's, where no option is set), nearest first
            found = next((made for each in ctx.bindings.reaching_each(expr.value, at)[1:]
                          if each.kind == "assign" and each.value is not None and each.element is None
                          and (made := _score_product(ctx, each.value, each.node, depth + 1, param, operands)) is not None), None)
        return found
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.MatrixMultiply):
            if not _transposed(ctx, expr.right):
                return None
            if operands is not None:
                operands.extend(((expr.left, at), (expr.right, at)))
            return "q @ k^T"
        if isinstance(expr.operator, _ALONG):
            left = _score_product(ctx, expr.left, at, depth + 1, param, operands)
            if left is not None and isinstance(expr.operator, cst.Add) and _made_of_scores(ctx, expr.right, at, depth + 1):
                # `content_score + pos_score` (a Conformer's, Transformer-XL's relative attention): a second score matrix
                # of the same size, which a fused kernel would read as a float mask, so it is written anyway
                return left + SECOND_SCORES
            return left or _score_product(ctx, expr.right, at, depth + 1, param, operands)
        return None
    if isinstance(expr, cst.Call):
        name = ctx.qname(expr.func)
        helper = ctx.functions.called(expr, name)
        if helper is not None:
            return _through_helper(ctx, expr, helper, at, depth, param)
        if name in _MATMUL:
            args = [a.value for a in expr.args if a.keyword is None]
            if name == "torch.einsum":
                specs = einsum_specs(ctx, args[0], at) if args else []
                if not specs or not all(_einsum_scores(spec, args[1:]) for spec in specs):
                    return None
                if operands is not None:
                    operands.extend((arg, at) for arg in args[1:])
                return "q @ k^T with einsum"
            # `bmm(q, k.transpose(1, 2))`, or `bmm(q.permute(0, 2, 1), k)` (the query transposed instead)
            shown = f"{name.rsplit('.', 1)[-1]}(q, k^T)"
            if not (len(args) == 2 and any(_transposed(ctx, _bound_value(ctx, a, at)) for a in args)):
                return None
            if operands is not None:
                operands.extend((arg, at) for arg in args)
            return shown
        if name in _RESHAPES:
            # `torch.reshape(w, (B, H, W, H * W))`: the keys' positions flattened into the last dimension
            return _score_product(ctx, expr.args[0].value, at, depth + 1, param, operands) if expr.args and expr.args[0].keyword is None else None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _SCORE_METHODS:
            return _score_product(ctx, expr.func.value, at, depth + 1, param, operands)
    return None


def _made_of_scores(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """Scores of their own, or a helper's rearrangement of them (`pos_score = self._relative_shift(pos_score)`)."""
    if _score_product(ctx, expr, at, depth) is not None:
        return True
    binding = ctx.bindings.reaching(expr.value, at) if isinstance(expr, cst.Name) else None
    value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
    return (isinstance(value, cst.Call) and bool(value.args) and value.args[0].keyword is None and depth < 12
            and _score_product(ctx, value.args[0].value, binding.node, depth + 1) is not None)


def _through_helper(ctx, call: cst.Call, helper: cst.FunctionDef, at: cst.CSTNode, depth: int, param: cst.Param | None) -> str | None:  # type: ignore[no-untyped-def]
    """The scores a call of a function of this file returns: where every ``return`` of it
    gives back one of its parameters through a scale, a bias, a mask or a reshape, what the
    call passes there (a helper that makes something else of its input is no step of it);
    where every ``return`` makes the scores itself (``return q @ k.transpose(-2, -1)``), those."""
    returns = [r.value for r in ctx.tree.nodes(cst.Return) if r.value is not None and ctx.tree.enclosing_function(r) is helper]
    made = {_score_product(ctx, value, value, depth + 1) for value in returns}
    if len(made) == 1 and None not in made:
        return made.pop()
    params = helper.params.params
    if ctx.tree.enclosing_class(helper) is not None and type(call.func) is cst.Attribute:
        params = params[1:]  # `self.add_bias(attn, ...)`: `self` is bound
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    for index, each in enumerate(params[:len(positional)]):
        if returns and all(_score_product(ctx, value, value, depth + 1, each) == _PASSED for value in returns):
            return _score_product(ctx, positional[index], at, depth + 1, param)
    return None


def _bound_value(ctx, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:  # type: ignore[no-untyped-def]
    """What a name is bound to where ``at`` stands (``q = q.permute(0, 2, 1)``), else ``expr``."""
    if isinstance(expr, cst.Name):
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is not None and binding.kind == "assign" and binding.value is not None and binding.element is None:
            return binding.value
    return expr


def _transposed(ctx, expr: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``k.transpose(-2, -1)``, ``k.transpose(1, 2)``, ``k.mT``, ``k.permute(...)``."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("mT", "T"):
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("transpose", "permute", "t")


def _einsum_scores(spec: str, operands: list[cst.BaseExpression]) -> bool:
    """``einsum("bhid,bhjd->bhij", q, k)`` or ``einsum("bct,bcs->bts", q, k)``: two operands
    contracted over an index that leaves, each keeping one index of its own (the query's
    and the key's positions)."""
    if len(operands) != 2:
        return False
    spec = spec.replace(" ", "")
    if "->" not in spec or spec.count(",") != 1:
        return False
    inputs, out = spec.split("->")
    left, right = (set(part) for part in inputs.split(","))
    contracted = (left & right) - set(out)
    return bool(contracted) and bool((left - right) & set(out)) and bool((right - left) & set(out))


# Casts a softmax's weights go through on their way (``softmax(w.float()).type(w.dtype)``).
_CASTS = frozenset({"type", "to", "float", "half", "bfloat16", "type_as"})


def _through_dropout(ctx, softmax: cst.Call) -> cst.BaseExpression:  # type: ignore[no-untyped-def]
    """The softmax call, or what it becomes straight away: a cast back to the input's dtype,
    a dropout applied to it (``self.attn_drop(...)``)."""
    current: cst.BaseExpression = softmax
    while True:
        parent = ctx.tree.parent(current)
        call = ctx.tree.parent(parent) if isinstance(parent, (cst.Arg, cst.Attribute)) else None
        if not isinstance(call, cst.Call):
            return current
        if isinstance(parent, cst.Attribute) and call.func is parent and parent.attr.value in _CASTS:
            current = call
        elif isinstance(parent, cst.Arg) and (ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower()):
            current = call
        else:
            return current


def _weights_times_values(ctx, weights: cst.BaseExpression, at: cst.CSTNode, seen: set[int] | None = None) -> cst.CSTNode | None:  # type: ignore[no-untyped-def]
    """The ``weights @ v`` (or matmul/bmm/einsum) that consumes the weights, directly or
    through the name they are bound to, possibly after a dropout on that name."""
    seen = set() if seen is None else seen
    if id(weights) in seen:
        return None  # `w = w.view(...)` in a loop rebinds the name to itself: followed once
    seen.add(id(weights))
    for use in _uses(ctx, weights):
        parent = ctx.tree.parent(use)
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.MatrixMultiply) and parent.left is use:
            return parent
        rebound = rebound_from(ctx, use)  # `attn = attn.type(dtype)`, `attn = self.attn_dropout(attn)`: the weights again
        moved = _moved(ctx, use) or _masked_if_passed(ctx, use) or (rebound.value if rebound is not None else None)
        if moved is not None and not ctx.tree.is_inside(at, moved):
            found = _weights_times_values(ctx, moved, at, seen)
            if found is not None:
                return found
        call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call):
            if ctx.qname(call.func) in _MATMUL and parent in call.args[:3]:
                return call
            if ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower():
                found = _weights_times_values(ctx, call, at, seen)
                if found is not None:
                    return found
    return None


def _moved(ctx, use: cst.BaseExpression) -> cst.Call | None:  # type: ignore[no-untyped-def]
    """The call that transposes or reshapes ``use`` as its operand (``w.permute(0, 2, 1)``,
    ``torch.reshape(w, shape)``), else None."""
    parent = ctx.tree.parent(use)
    if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _WEIGHT_MOVES:
        call = ctx.tree.parent(parent)
        return call if isinstance(call, cst.Call) and call.func is parent else None
    call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(call, cst.Call) and call.args and call.args[0] is parent and ctx.qname(call.func) in _WEIGHT_MOVE_FUNCTIONS:
        return call
    return None


def _masked_if_passed(ctx, use: cst.BaseExpression) -> cst.BinaryOperation | None:  # type: ignore[no-untyped-def]
    """``weight = weight * mask`` under ``if mask is not None:`` (tortoise-tts's mask applied after the
    softmax): the product, on the weights' way to the values only where a caller passes the mask;
    at the parameter's default the plain weights go on. None for anything else."""
    product = ctx.tree.parent(use)
    statement = ctx.tree.parent(product)
    if not (isinstance(product, cst.BinaryOperation) and isinstance(product.operator, cst.Multiply) and isinstance(use, cst.Name)
            and isinstance(statement, cst.Assign) and len(statement.targets) == 1 and dotted(statement.targets[0].target) == use.value):
        return None
    return product if ctx.guards.opt_in(statement, optional=True) is not None else None


def _uses(ctx, expr: cst.BaseExpression) -> list[cst.BaseExpression]:  # type: ignore[no-untyped-def]
    """``expr`` itself where it is used in place, or the reads of the name it is assigned to."""
    parent = ctx.tree.parent(expr)
    if isinstance(parent, cst.Assign) and parent.value is expr and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        bound = [b for b in ctx.bindings.lookup(name, expr) if b.node is parent]
        return [u for b in bound for u in ctx.bindings.uses(b, ordered=True)]
    return [expr]


def _weights_used_elsewhere(ctx, weights: cst.BaseExpression, matmul: cst.CSTNode,  # type: ignore[no-untyped-def]
                            returned: list[cst.CSTNode]) -> bool:
    """Are the weights read anywhere but the product with the values (stored, appended, averaged
    for a plot)? Returned beside the output (``return output, attn``) is noted in ``returned``."""
    for use in _uses(ctx, weights):
        if use is weights or ctx.tree.is_inside(use, matmul):
            continue
        rebound = rebound_from(ctx, use)
        moved = _moved(ctx, use) or _masked_if_passed(ctx, use) or (rebound.value if rebound is not None else None)
        if moved is not None:
            if _weights_used_elsewhere(ctx, moved, matmul, returned):
                return True  # reshaped, then kept as well as multiplied into the values
            continue  # `w_ = w_.permute(0, 2, 1)` on the way to `bmm(v, w_)`
        parent = ctx.tree.parent(use)
        call = ctx.tree.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call) and (ctx.qname(call.func) in _DROPOUT or "drop" in (dotted(call.func) or "").lower()):
            if call is not weights and _weights_used_elsewhere(ctx, call, matmul, returned):
                return True  # `p_attn = self.drop(p_attn)`, then kept
            continue
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "save_for_backward":
            continue  # kept for an autograd.Function's own backward: a fused kernel brings its backward too
        if returned_beside_output(ctx, use, matmul) or aliased_into_returned_record(ctx, use):
            returned.append(use)
            continue
        return True
    return False
