"""A gradient norm computed one parameter at a time in a Python loop over a model's parameters."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.module_tensors import grad_of, loop_names, model_tensors
from torchlint.analysis.multiplicity import Repeat
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check

# Methods and functions that reduce one tensor to its norm.
_NORMS = frozenset({"norm", "vector_norm"})
_NORM_FUNCTIONS = frozenset({"torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm"})
# A sum of squares (`(g ** 2).sum()`, `g.pow(2).sum()`, `g.square().sum()`, `(g * g).sum()`): a norm's square.
_SQUARES = frozenset({"pow", "square"})


class GradNormPythonLoop(Check):
    """`for p in model.parameters(): total += p.grad.norm() ** 2`: a gradient norm, a few kernels per parameter."""

    code = "TL311"
    name = "grad-norm-python-loop"
    cost = Cost.PER_PARAMETER_LAUNCHES
    per_step = True
    quiet_every_n = True  # (a norm logged every N steps costs its launches once per N steps)
    message = ("`{head}` in {loop} computes the gradient norm one parameter at a time{read}: two or three small kernels per "
               "parameter (a kernel launch each on a GPU) each time it runs")
    fix_hint = ("Compute every tensor's norm in one call: `torch.nn.utils.get_total_norm([p.grad for p in params])` "
                "(`torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))`), or use the total norm "
                "`torch.nn.utils.clip_grad_norm_` already returns when the step clips")

    def visit_For(self, node: cst.For) -> None:
        names = loop_names(node.target)
        if not names or not self._per_parameter(node.iter, node):
            return  # not a loop over one model's tensors (layers, metrics, buckets)
        norms = [n for n in self.ctx.tree.descendants(node.body) if type(n) is cst.Call and _norm_of_grad(self.ctx, n, names)]
        if not norms:
            return  # the loop does something else with each parameter (a clip, an update, a count)
        self._report(node, node.target, node.iter, read=any(_read_on_host(self.ctx, n) for n in norms))

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comprehension(node)

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._comprehension(node)

    def _comprehension(self, node: cst.GeneratorExp | cst.ListComp) -> None:
        """``sum(p.grad.norm() ** 2 for p in model.parameters())``, ``torch.stack([p.grad.norm() for p in params])``."""
        comp_for = node.for_in
        names = loop_names(comp_for.target)
        if comp_for.inner_for_in is not None or not names or not self._per_parameter(comp_for.iter, node):
            return  # nested, or not over one model's tensors
        norms = [n for n in (node.elt, *self.ctx.tree.descendants(node.elt)) if type(n) is cst.Call and _norm_of_grad(self.ctx, n, names)]
        if not norms:
            return
        self._report(node, comp_for.target, comp_for.iter, read=any(_read_on_host(self.ctx, n) for n in norms))

    def _per_parameter(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        ctx = self.ctx
        if not model_tensors(ctx, iterable, at):
            return False
        place = ctx.loops.local_hot_loop(at) or ctx.tree.enclosing_function(at)
        if place is None:
            return False  # module code outside any step: a norm taken once (a script's check of its gradients)
        return not ctx.guards.rare(at, stop=place)  # every N steps (a log line), after a NaN, on an error path: paid rarely

    def _report(self, node: cst.CSTNode, target: cst.BaseExpression, iterable: cst.BaseExpression, read: bool = False) -> None:
        ctx = self.ctx
        # (each norm read into Python, consistency_models' `th.norm(p.grad, ...).item()`: a sync per parameter,
        # the host waiting for the device hundreds of times a step, not only the launches)
        self.report(node, head=f"for {plain_code(ctx.module, target).strip()} in {short_code(ctx.module, iterable)}",
                    read=", reading each into Python (a sync per parameter)" if read else "", cost=Cost.SYNC if read else None,
                    itself=Repeat("parameter") if read else None)


def _read_on_host(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """Is the norm ``call`` read into Python where it is made: ``….item()``, ``….tolist()``, ``float(…)``?"""
    parent = ctx.tree.parent(call)
    if type(parent) is cst.Attribute and parent.attr.value in ("item", "tolist"):
        return type(ctx.tree.parent(parent)) is cst.Call
    if type(parent) is cst.Arg:
        outer = ctx.tree.parent(parent)
        return type(outer) is cst.Call and dotted(outer.func) in ("float", "int")
    return False


def _norm_of_grad(ctx, call: cst.Call, names: set[str]) -> bool:  # type: ignore[no-untyped-def]
    """Is ``call`` a norm of a loop variable's gradient: ``p.grad.norm()``, ``p.grad.data.norm(2)``,
    ``torch.norm(p.grad)``, ``p.grad.pow(2).sum()``, ``(p.grad ** 2).sum()`` (or of a name the
    loop bound to it, ``g = p.grad``)?"""
    func = call.func
    qualified = ctx.qname(func)
    if qualified in _NORM_FUNCTIONS:
        return bool(call.args) and grad_of(ctx, call.args[0].value, names, call)
    if type(func) is not cst.Attribute or qualified is not None:
        return False
    method = func.attr.value
    if method in _NORMS:
        return grad_of(ctx, func.value, names, call)
    if method == "sum" and not call.args:
        return _squared_grad(ctx, func.value, names, call)
    return False


def _squared_grad(ctx, expr: cst.BaseExpression, names: set[str], at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """``p.grad ** 2``, ``p.grad.pow(2)``, ``p.grad.square()``, ``p.grad * p.grad``."""
    if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.Power, cst.Multiply):
        return grad_of(ctx, expr.left, names, at)
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in _SQUARES:
        return grad_of(ctx, expr.func.value, names, at)
    return False
