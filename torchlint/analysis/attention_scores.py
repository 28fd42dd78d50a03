"""The score matrix an attention's softmax is taken of: ``q @ k^T`` through a scale, a bias, a mask, a cast or a helper (TL405)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.attention_spellings import default_softmax, einsum_specs
from torchlint.analysis.names import dotted

_SOFTMAX = frozenset({"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"})
MATMUL = frozenset({"torch.matmul", "torch.bmm", "torch.einsum"})
# Steps between the scores and the softmax that SDPA takes as arguments (scale, mask), or
# that only reshape them (Swin's `attn.view(B // nW, nW, heads, N, N) + mask`).
_SCORE_METHODS = frozenset({"masked_fill", "masked_fill_", "float", "to", "type_as", "contiguous", "view", "reshape"})
# The same reshapes spelled as functions of torch (score_sde's `w = torch.reshape(w, (B, H, W, H * W))`).
RESHAPES = frozenset({"torch.reshape", "torch.flatten"})


def softmax_input(ctx, call: cst.Call) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
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
_PASSED = "the parameter"  # what `score_product` answers where the scores are a helper's parameter
_ALONG = (cst.Multiply, cst.Divide, cst.Add, cst.Subtract)  # a scale or a bias (`+ rel_pos`, `+ mask`)
_ALONG_IN_PLACE = (cst.MultiplyAssign, cst.DivideAssign, cst.AddAssign, cst.SubtractAssign)


def score_product(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int, param: cst.Param | None = None,  # type: ignore[no-untyped-def]
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
            return score_product(ctx, expr, binding.node, depth + 1, param, operands)  # `attn += bias`: the scores before it
        if binding is None or binding.kind != "assign" or binding.value is None or binding.element is not None:
            return None
        found = score_product(ctx, binding.value, binding.node, depth + 1, param, operands)
        if found is None:
            # `if rel_pos is not None: weight = rel_pos(weight)` (tortoise-tts's QKVAttentionLegacy), `if self.cog_signed:
            # sim = sim.abs()` (x-transformers): a step this file cannot follow on a branch that may be skipped: the
            # scores of the paths that skip it (the default's, where no option is set), nearest first
            found = next((made for each in ctx.bindings.reaching_each(expr.value, at)[1:]
                          if each.kind == "assign" and each.value is not None and each.element is None
                          and (made := score_product(ctx, each.value, each.node, depth + 1, param, operands)) is not None), None)
        return found
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.MatrixMultiply):
            if not _transposed(ctx, expr.right):
                return None
            if operands is not None:
                operands.extend(((expr.left, at), (expr.right, at)))
            return "q @ k^T"
        if isinstance(expr.operator, _ALONG):
            left = score_product(ctx, expr.left, at, depth + 1, param, operands)
            if left is not None and isinstance(expr.operator, cst.Add) and _made_of_scores(ctx, expr.right, at, depth + 1):
                # `content_score + pos_score` (a Conformer's, Transformer-XL's relative attention): a second score matrix
                # of the same size, which a fused kernel would read as a float mask, so it is written anyway
                return left + SECOND_SCORES
            return left or score_product(ctx, expr.right, at, depth + 1, param, operands)
        return None
    if isinstance(expr, cst.Call):
        name = ctx.qname(expr.func)
        helper = ctx.functions.called(expr, name)
        if helper is not None:
            return _through_helper(ctx, expr, helper, at, depth, param)
        if name in MATMUL:
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
        if name in RESHAPES:
            # `torch.reshape(w, (B, H, W, H * W))`: the keys' positions flattened into the last dimension
            return score_product(ctx, expr.args[0].value, at, depth + 1, param, operands) if expr.args and expr.args[0].keyword is None else None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _SCORE_METHODS:
            return score_product(ctx, expr.func.value, at, depth + 1, param, operands)
    return None


def _made_of_scores(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """Scores of their own, or a helper's rearrangement of them (`pos_score = self._relative_shift(pos_score)`)."""
    if score_product(ctx, expr, at, depth) is not None:
        return True
    binding = ctx.bindings.reaching(expr.value, at) if isinstance(expr, cst.Name) else None
    value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
    return (isinstance(value, cst.Call) and bool(value.args) and value.args[0].keyword is None and depth < 12
            and score_product(ctx, value.args[0].value, binding.node, depth + 1) is not None)


def _through_helper(ctx, call: cst.Call, helper: cst.FunctionDef, at: cst.CSTNode, depth: int, param: cst.Param | None) -> str | None:  # type: ignore[no-untyped-def]
    """The scores a call of a function of this file returns: where every ``return`` of it
    gives back one of its parameters through a scale, a bias, a mask or a reshape, what the
    call passes there (a helper that makes something else of its input is no step of it);
    where every ``return`` makes the scores itself (``return q @ k.transpose(-2, -1)``), those."""
    returns = [r.value for r in ctx.tree.nodes(cst.Return) if r.value is not None and ctx.tree.enclosing_function(r) is helper]
    made = {score_product(ctx, value, value, depth + 1) for value in returns}
    if len(made) == 1 and None not in made:
        return made.pop()
    params = helper.params.params
    if ctx.tree.enclosing_class(helper) is not None and type(call.func) is cst.Attribute:
        params = params[1:]  # `self.add_bias(attn, ...)`: `self` is bound
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    for index, each in enumerate(params[:len(positional)]):
        if returns and all(score_product(ctx, value, value, depth + 1, each) == _PASSED for value in returns):
            return score_product(ctx, positional[index], at, depth + 1, param)
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
