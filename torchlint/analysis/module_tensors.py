"""What iterates a module's own tensors one at a time: ``model.parameters()``,
``named_parameters()``, ``state_dict().items()``, or a name bound to one of them.

Shared by the rules that flag per-tensor work in a Python loop (TL305's moving average,
TL606's collectives): the loop over a model's tensors is what multiplies the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# What iterates a module's tensors: `ema.parameters()`, `model.state_dict().values()`...
TENSOR_ITERABLES = frozenset({"parameters", "buffers", "values", "named_parameters", "named_buffers", "items"})
# What a model's own tensors come from, one at a time (`model.named_parameters()`,
# `model.state_dict().items()`), without a name or a zip to follow.
MODULE_TENSORS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "state_dict"})
_DEPTH = 4  # `x = list(x)`: a name bound to itself ends here
# How far the loops over one model's tensors that callers ask about reach (`tensors_method`'s
# `views` and `wrappers`; None: any method):
# - TL305's loop over one model's tensors (`one_models_tensors`): any method called on what the
#   module gives (`.items()`, `.values()`, `.float()`), and a copy of it (`list(...)`, `dict(...)`,
#   `OrderedDict(...)`, DiT's `update_ema`; a dict comprehension over it, `one_models_tensors`); no `zip`,
#   which pairs it with another iterable that the check asks about itself.
COPIES = frozenset({"list", "tuple", "dict", "OrderedDict"})
# - a loop that repeats its body once per parameter (`places`: `Repeat("parameter")`): a dict view
#   of it (`state_dict().items()`), and whatever each iteration gets besides (`zip(ema.parameters(),
#   model.parameters())`, `enumerate(...)`), the same count of iterations.
DICT_VIEWS = frozenset({"items", "values", "keys"})
PER_TENSOR = frozenset({"zip", "enumerate", "list", "reversed"})
# - what a loop variable is bound to (`kind_names.binds_a_parameter`): the call itself only; through
#   `zip` or `enumerate` the variable is a tuple, through `.items()` a pair: no wrapper, no view.
ITSELF: frozenset[str] = frozenset()


def tensors_method(iterable: cst.BaseExpression, *, views: frozenset[str] | None, wrappers: frozenset[str]) -> str | None:
    """The method of a module (``parameters``, ``named_parameters``, ``buffers``, ``named_buffers``,
    ``state_dict``) whose tensors a loop over ``iterable`` goes over, one at a time: called
    through the methods in ``views`` on its result (None: any method) and given first to the
    builtins in ``wrappers`` (``list(m.parameters())``); None for any other iterable."""
    while type(iterable) is cst.Call:
        func = iterable.func
        if _wrapper(func) in wrappers and iterable.args:
            iterable = iterable.args[0].value
        elif type(func) is cst.Attribute:
            if func.attr.value in MODULE_TENSORS:
                return func.attr.value
            if views is not None and func.attr.value not in views:
                return None
            iterable = func.value  # `.items()` of `model.state_dict()`
        else:
            return None
    return None


def _wrapper(func: cst.BaseExpression) -> str | None:
    """The builtin or ``collections`` constructor ``func`` names: ``list``, ``OrderedDict``,
    ``collections.OrderedDict`` (as ``OrderedDict``); None for anything else."""
    if type(func) is cst.Name:
        return func.value
    if type(func) is cst.Attribute and func.attr.value == "OrderedDict" and dotted(func.value) == "collections":
        return "OrderedDict"  # (only the module's own spelling: `self.OrderedDict(...)` is anyone's method)
    return None


def _comprehended(iterable: cst.BaseExpression) -> cst.BaseExpression:
    """What a dict comprehension of one ``for`` goes over (``{n: p for n, p in m.named_parameters()}``,
    ``{k: v.clone() for k, v in m.state_dict().items()}``): one entry per tensor, a filter or not."""
    while type(iterable) is cst.DictComp and iterable.for_in.inner_for_in is None:
        iterable = iterable.for_in.iter  # (two `for`s pair every tensor with something else: not one model's)
    return iterable


def one_models_tensors(iterable: cst.BaseExpression, ctx: FileContext | None = None, at: cst.CSTNode | None = None,
                       depth: int = 0) -> bool:
    """``model.named_parameters()``, ``model.state_dict().items()``, ``list(model.parameters())``;
    a dict of them (``OrderedDict(...)``, ``collections.OrderedDict(...)``, ``{n: p for n, p in ...}``);
    with ``ctx``, also a name bound to one (k-diffusion's ``params = dict(model.named_parameters())``,
    DiT's ``OrderedDict(...)``, then ``for name, p in params.items():``): every binding of it in reach
    of ``at`` must be one."""
    if depth > _DEPTH:
        return False
    iterable = _comprehended(iterable)
    if tensors_method(iterable, views=None, wrappers=COPIES) is not None:
        return True
    while type(iterable) is cst.Call:  # down to what the views and copies are taken of
        func = iterable.func
        if _wrapper(func) in COPIES and iterable.args:
            iterable = iterable.args[0].value
        elif type(func) is cst.Attribute:
            iterable = func.value
        else:
            return False
    if type(iterable) is cst.DictComp:  # `{n: p for n, p in m.named_parameters()}.items()`
        return one_models_tensors(iterable, ctx, at, depth + 1)
    if ctx is not None and at is not None and type(iterable) is cst.Name:
        # (by its bindings, not its spelling: a `params` bound to anything else is no model's tensors)
        bound = [b for b in ctx.bindings.lookup(iterable.value, at) if b.kind == "assign" and b.value is not None]
        return bool(bound) and all(one_models_tensors(b.value, ctx, b.node, depth + 1) for b in bound)
    return False


def iterates_module_tensors(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """``m.parameters()``, ``m.state_dict().values()``, ``list(m.parameters())``, or a
    name bound to one of them (``ema_params = list(ema.parameters())``)."""
    if depth > _DEPTH:
        return False
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted(expr)
        if name is None:
            return False
        if any(word in name.rsplit(".", 1)[-1].lower() for word in ("param", "weight")):
            return True  # `target_params`, `self.ema_weights`: a list of a model's tensors by name
        bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None]
        return bool(bound) and all(iterates_module_tensors(ctx, b.value, b.node, depth + 1) for b in bound)
    if not isinstance(expr, cst.Call):
        return False
    if dotted(expr.func) in ("list", "tuple") and expr.args:
        return iterates_module_tensors(ctx, expr.args[0].value, at, depth + 1)
    return isinstance(expr.func, cst.Attribute) and expr.func.attr.value in TENSOR_ITERABLES


def model_tensors(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
    """One model's tensors and nothing looser (no ``.items()`` of any dict: a dict of metrics
    is not a model): ``model.parameters()``, ``[p for p in model.parameters() if p.requires_grad]``,
    ``filter(f, model.parameters())``, or a name bound to one (``params``, ``self.weights``)."""
    if depth > _DEPTH:
        return False
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
        return model_tensors(ctx, expr.for_in.iter, at, depth + 1)
    if isinstance(expr, cst.Call) and dotted(expr.func) in ("enumerate", "reversed", "filter", "sorted", "zip") and expr.args:
        # (the tensors of `filter(f, tensors)` are its last argument, of the others the first)
        return model_tensors(ctx, expr.args[-1 if dotted(expr.func) == "filter" else 0].value, at, depth + 1)
    if isinstance(expr, cst.Call):
        return one_models_tensors(expr)
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted(expr)
        if name is None:
            return False
        if any(word in name.rsplit(".", 1)[-1].lower() for word in ("param", "weight")):
            return True  # `params`, `self.model_weights`: a model's tensors by name
        bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None]
        return bool(bound) and all(model_tensors(ctx, b.value, b.node, depth + 1) for b in bound)
    return False


def loop_names(target: cst.BaseExpression) -> set[str]:
    """The names a ``for`` binds (``e, p``; ``(name, e), (_, p)`` of named_parameters)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in loop_names(element.value)}
    return {target.value} if isinstance(target, cst.Name) else set()



def grad_of(ctx: FileContext, expr: cst.BaseExpression, names: set[str], at: cst.CSTNode) -> bool:
    """``p.grad``, ``p.grad.data``, ``p.grad.detach()``, ``p.grad.float()`` of a loop name ``p``, or
    a name bound to one in the loop (``g = p.grad.data``)."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and not expr.args:
        expr = expr.func.value  # `p.grad.detach()`, `.float()`
    if type(expr) is cst.Attribute and expr.attr.value == "data":
        expr = expr.value
    if type(expr) is cst.Attribute and expr.attr.value == "grad":
        return dotted(expr.value) in names
    if type(expr) is cst.Name and expr.value not in names:
        binding = ctx.bindings.reaching(expr.value, at)
        value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
        return value is not None and grad_of(ctx, value, names, binding.node)
    return False


__all__ = [
    "COPIES", "DICT_VIEWS", "ITSELF", "MODULE_TENSORS", "PER_TENSOR", "TENSOR_ITERABLES", "grad_of", "iterates_module_tensors", "loop_names",
    "model_tensors", "one_models_tensors", "tensors_method",
]
