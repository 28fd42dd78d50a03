"""`@torch.jit.script` on a small pointwise function, to fuse its kernels."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

# Elementwise torch functions and tensor methods: what TorchScript fusion is used for.
_POINTWISE = {
    "abs", "add", "addcmul", "addcdiv", "clamp", "clamp_min", "clamp_max", "clip", "cos", "cosh", "div", "erf", "erfc",
    "exp", "expm1", "floor", "ceil", "round", "frac", "lerp", "log", "log1p", "log2", "log10", "logit", "maximum",
    "minimum", "mul", "neg", "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "square",
    "sub", "tan", "tanh", "where", "gelu", "silu", "mish", "softplus", "hardtanh", "hardsigmoid", "hardswish",
    "leaky_relu", "elu", "selu", "celu", "relu6", "dropout", "float", "half", "bfloat16", "to", "type_as", "mul_",
    "add_", "sub_", "div_", "clamp_", "sigmoid_", "tanh_", "exp_", "zeros_like", "ones_like", "full_like",
    "masked_fill", "logical_and", "logical_or", "logical_not", "eq", "ne", "gt", "ge", "lt", "le", "fmod", "remainder",
}
_BUILTINS = {"float", "int", "abs", "min", "max"}


class JitScriptFusion(Check):
    """`@torch.jit.script` used to fuse a pointwise function; `torch.compile` does it now."""

    code = "TL503"
    name = "jit-script-fusion"
    cost = Cost.API_AGE
    message = "`@{decorator}` on pointwise function `{function}` relies on TorchScript fusion, which is in maintenance mode"
    fix_hint = "Decorate the function with `@torch.compile` instead (it fuses pointwise ops with Triton kernels)"
    default = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        ctx = self.ctx
        for decorator in node.decorators:
            if ctx.qname(decorator.decorator) == "torch.jit.script":
                if self._pointwise(node):
                    self.report(decorator.decorator, decorator=dotted(decorator.decorator), function=node.name.value)
                return

    def _pointwise(self, function: cst.FunctionDef) -> bool:
        """Only arithmetic and elementwise calls: no loops, branches on data, or other calls."""
        ctx = self.ctx
        if ctx.tree.enclosing_class(function) is not None:
            return False  # a method of a scripted module
        arithmetic = False
        for node in ctx.tree.descendants(function.body):
            if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Subscript)):
                return False
            if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
                arithmetic = True
            if isinstance(node, cst.Call):
                qualified = ctx.qname(node.func)
                last = (qualified or dotted(node.func) or "").rsplit(".", 1)[-1]
                if qualified is not None:
                    if not qualified.startswith(("torch.", "math.")) or last not in _POINTWISE:
                        return False
                elif isinstance(node.func, cst.Attribute):
                    if last not in _POINTWISE:
                        return False
                elif not (isinstance(node.func, cst.Name) and node.func.value in _BUILTINS):
                    return False
                arithmetic = True
        return arithmetic
