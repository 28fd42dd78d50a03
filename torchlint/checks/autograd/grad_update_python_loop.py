"""Gradients rescaled, clipped or cleaned one parameter at a time in a Python loop over a model's parameters."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.module_tensors import grad_of, loop_names, model_tensors
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check

# In-place tensor methods that rewrite each gradient (a zeroing is TL303's, a collective TL606's).
_IN_PLACE = frozenset({"mul_", "div_", "add_", "sub_", "clamp_", "clamp_min_", "clamp_max_", "clip_", "nan_to_num_", "masked_fill_"})
# torch functions that write into `out=`: `torch.nan_to_num(p.grad, ..., out=p.grad)` (EDM's training loop).
_OUT_FUNCTIONS = frozenset({"torch.nan_to_num", "torch.clamp", "torch.clip", "torch.mul", "torch.div", "torch.add"})
# In-place operators on a gradient: `p.grad *= scale`, `p.grad /= world_size`.
_AUG_OPERATORS = (cst.MultiplyAssign, cst.DivideAssign, cst.AddAssign, cst.SubtractAssign)


class GradUpdatePythonLoop(Check):
    """`for p in model.parameters(): p.grad *= s`: each gradient rescaled or cleaned by its own kernel."""

    code = "TL313"
    name = "grad-update-python-loop"
    cost = Cost.PER_PARAMETER_LAUNCHES
    per_step = True
    quiet_every_n = True  # (a rescale every N steps costs its launches once per N steps)
    message = ("`{update}` in `{head}` ({loop}) updates each gradient in place one parameter at a time: a kernel launch per "
               "parameter each time it runs, where one multi-tensor call would do")
    fix_hint = ("Update every gradient in one call: `grads = [p.grad for p in params if p.grad is not None]`, then "
                "`torch._foreach_mul_(grads, scale)` (`_foreach_div_`, `_foreach_add_`, `_foreach_clamp_min_`/`_foreach_clamp_max_`) "
                "or `torch.nn.utils.clip_grad_value_(params, c)`; for non-finite values, check the total norm once "
                "(`clip_grad_norm_` returns it) and skip or zero the step when it is not finite")

    def visit_For(self, node: cst.For) -> None:
        ctx = self.ctx
        names = loop_names(node.target)
        if not names or not model_tensors(ctx, node.iter, node):
            return  # not a loop over one model's tensors (layers, metrics, a few named tensors)
        place = ctx.loops.local_hot_loop(node) or ctx.tree.enclosing_function(node)
        if place is None or ctx.guards.rare(node, stop=place):
            return  # module code outside any step (a script's one-off fix-up), or every N steps: paid rarely
        update = next((n for n in ctx.tree.descendants(node.body) if self._updates_a_grad(n, names)), None)
        if update is None:
            return  # the loop does something else with each parameter (a norm: TL311; an average: TL305; a count)
        # At the update: a branch around it that tests the caller's parameter (VITS' `if clip_value is not None:`,
        # every call passing None) is the join's to settle, as for any line under an opt-in switch.
        self.report(update, head=f"for {plain_code(ctx.module, node.target).strip()} in {short_code(ctx.module, node.iter)}",
                    update=short_code(ctx.module, update, limit=50), placed_as=node)

    def _updates_a_grad(self, node: cst.CSTNode, names: set[str]) -> bool:
        """``p.grad *= s``, ``p.grad.data.mul_(s)``, ``torch.nan_to_num(p.grad, out=p.grad)``, ``p.grad = p.grad / n``."""
        ctx = self.ctx
        if type(node) is cst.AugAssign:
            return type(node.operator) in _AUG_OPERATORS and grad_of(ctx, node.target, names, node)
        if type(node) is cst.Assign and len(node.targets) == 1:
            # `p.grad = p.grad * scale` (a new tensor per parameter, written back): the same launches
            target = node.targets[0].target
            return type(node.value) is cst.BinaryOperation and grad_of(ctx, target, names, node) and \
                any(grad_of(ctx, side, names, node) for side in (node.value.left, node.value.right))
        if type(node) is not cst.Call:
            return False
        func = node.func
        if type(func) is cst.Attribute and func.attr.value in _IN_PLACE and ctx.qname(func) is None:
            return grad_of(ctx, func.value, names, node)
        if ctx.qname(func) in _OUT_FUNCTIONS:
            out = ctx.keyword(node, "out")
            return out is not None and grad_of(ctx, out.value, names, node)
        return False
