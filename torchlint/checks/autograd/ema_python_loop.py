"""An exponential moving average of weights updated one parameter at a time in Python."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.module_tensors import iterates_module_tensors, loop_names, one_models_tensors
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check

# In-place updates that make a moving average (`e.mul_(d).add_(p, alpha=1 - d)`, `e.lerp_(p, w)`).
_AVERAGING = frozenset({"mul_", "add_", "lerp_", "sub_", "addcmul_", "copy_"})
# Out-of-place blends whose result `copy_` writes back (`e.copy_(p.lerp(e, beta))`).
_BLENDS = frozenset({"lerp", "add", "mul", "sub", "addcmul", "torch.lerp", "torch.add", "torch.mul", "torch.addcmul"})


class EmaPythonLoop(Check):
    """`for e, p in zip(ema.parameters(), model.parameters()): e.mul_(d).add_(...)`: an EMA per parameter."""

    code = "TL305"
    name = "ema-python-loop"
    cost = Cost.PER_PARAMETER_LAUNCHES
    per_step = True
    message = "`{head}` in {loop} updates the moving average one parameter at a time: an op or two per parameter (a kernel launch each on a GPU) each time it runs"
    fix_hint = ("Update every parameter in one call: `torch._foreach_lerp_(ema_params, model_params, 1 - decay)` "
                "(or `torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))`)")

    def visit_For(self, node: cst.For) -> None:
        ctx = self.ctx
        targets = loop_names(node.target)
        if not targets or not _averages(ctx, node):
            return  # neither a zip of two sequences of a model's tensors nor one model's tensors blended into another's
        hot = ctx.loops.local_hot_loop(node)
        if hot is None and ctx.tree.enclosing_function(node) is None:
            return  # module code outside any step: a blend made once (loading, exporting)
        # Under `if step % N == 0:` the engine places it every N steps (a low tier), in a loop or a helper alike.
        over = "zip(...)" if _is_zip(node.iter) else short_code(ctx.module, node.iter)
        head = f"for {plain_code(ctx.module, node.target).strip()} in {over}"
        self.report(node, head=head)


def _is_zip(iterable: cst.BaseExpression) -> bool:
    return isinstance(iterable, cst.Call) and dotted(iterable.func) == "zip" and len(iterable.args) >= 2


def _averages(ctx, loop: cst.For) -> bool:  # type: ignore[no-untyped-def]
    """`for e, p in zip(ema.parameters(), model.parameters()): e.lerp_(p, w)`, or
    `for name, p in model.named_parameters(): ema[name].mul_(d).add_(p, ...)`."""
    targets = loop_names(loop.target)
    iterable = loop.iter
    if _is_zip(iterable):
        if not any(iterates_module_tensors(ctx, arg.value, loop) for arg in iterable.args[:2]):
            return False  # zip over anything else (batches, layers) is no weight average
        return _averages_in_place(ctx, loop, targets, blended_with_other=False)
    if not one_models_tensors(iterable, ctx, loop):
        return False  # a dict of statistics, a tuple of buffer names: a handful of tensors, not the model's
    return _averages_in_place(ctx, loop, targets, blended_with_other=True)


def _averages_in_place(ctx, loop: cst.For, targets: set[str], blended_with_other: bool) -> bool:  # type: ignore[no-untyped-def]
    """Does the body update a loop variable (or ``ema[name]`` for a loop name) in place
    (``e.mul_(...)``, ``e.data.lerp_(...)``, ``e.data = d * e.data + ...``, ``e.copy_(...)``
    of a blend)? ``blended_with_other``: only with another tensor of the loop in the update
    (``ema[name].add_(p, ...)``; ``p.mul_(0.9)`` alone decays, it averages nothing)."""
    targets = targets | _key_aliases(ctx, loop, targets)
    for node in ctx.tree.descendants(loop.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _AVERAGING:
            receiver = node.func.value
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
                receiver = receiver.func.value  # `e.mul_(d).add_(...)`: the chain's root
            root = _looped(receiver, targets)
            if root is None or node.func.attr.value == "copy_" and not (node.args and _blend(ctx, node.args[0].value)):
                continue  # not the loop's tensor, or a plain copy (no blend)
            if not blended_with_other or _uses_other(ctx, node, targets, root):
                return True
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and _assigns_blend(ctx, node, targets, blended_with_other):
            return True
        if isinstance(node, cst.AugAssign) and _augments_blend(ctx, loop, node, targets):
            return True
    return False


def _augments_blend(ctx, loop: cst.For, update: cst.AugAssign, targets: set[str]) -> bool:  # type: ignore[no-untyped-def]
    """``v *= d; v += (1 - d) * msd[k].detach()`` (yolov5's ``ModelEMA``), ``e -= w * (e - p)``:
    the loop's tensor moved in place towards a second tensor of the loop. Besides reading the
    other tensor, the update reads the averaged one too, or the body scales it (``v *= d``,
    ``v.mul_(d)``): a decay and an add make the average; an add alone is a step
    (``p -= lr * g``, a hand-written SGD) or a sum (``sums[name] += p.grad ** 2``)."""
    if not isinstance(update.operator, (cst.AddAssign, cst.SubtractAssign)):
        return False  # (the decay `v *= d` alone averages nothing: the add that follows it decides)
    averaged = _looped(update.target, targets)
    if averaged is None or not _mentions_other(ctx, update.value, targets, averaged):
        return False  # not the loop's tensor (`total += ...`), or nothing of another tensor added in
    return _mentions(ctx, update.value, targets, averaged) or any(
        _scales(node, targets, averaged) for node in ctx.tree.descendants(loop.body))


def _mentions(ctx, value: cst.BaseExpression, targets: set[str], averaged: str) -> bool:  # type: ignore[no-untyped-def]
    """Does ``value`` read the averaged tensor itself (``e`` of ``w * (e - p)``)?"""
    return any(_looped(node, targets) == averaged for node in (value, *ctx.tree.descendants(value))
               if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)))


def _scales(node: cst.CSTNode, targets: set[str], averaged: str) -> bool:
    """``v *= d`` or ``v.mul_(d)`` of the averaged tensor: the decay half of the average."""
    if isinstance(node, cst.AugAssign):
        return isinstance(node.operator, cst.MultiplyAssign) and _looped(node.target, targets) == averaged
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "mul_" \
        and _looped(node.func.value, targets) == averaged


def _key_aliases(ctx, loop: cst.For, targets: set[str]) -> set[str]:  # type: ignore[no-untyped-def]
    """Names the body binds to another spelling of a loop key: ``sname = self.m_name2s_name[key]``
    (LitEma's shadow buffers, named without dots), ``sname = key.replace(".", "")``. The shadow
    ``shadow_params[sname]`` is then the loop's entry, as ``shadow_params[key]`` would be."""
    aliases = set()
    for node in ctx.tree.descendants(loop.body):
        if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
            continue
        value = node.value
        if type(value) is cst.Subscript and len(value.slice) == 1 and type(value.slice[0].slice) is cst.Index:
            key = value.slice[0].slice.value  # `mapping[key]`: the key's other name
        elif type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _KEY_SPELLINGS:
            key = value.func.value  # `key.replace(".", "")`
        else:
            continue
        if type(key) is cst.Name and key.value in targets:
            aliases.add(node.targets[0].target.value)
    return aliases


# String methods that respell a parameter's name as a buffer's (`.` is not allowed in a buffer's name).
_KEY_SPELLINGS = frozenset({"replace", "lower", "strip"})


def _assigns_blend(ctx, assign: cst.Assign, targets: set[str], blended_with_other: bool) -> bool:  # type: ignore[no-untyped-def]
    """``e.data = d * e.data + (1 - d) * p.data``, or into a dict of shadows
    (``self.shadow[name].data = (1. - mu) * param.data + mu * self.shadow[name].data``,
    ddim's EMAHelper): a blend written back to the averaged tensor's storage. Only ``.data``:
    ``ema[name] = ...`` rebinds a dict entry (a new tensor each time, a different matter)."""
    target = assign.targets[0].target
    if not (isinstance(target, cst.Attribute) and target.attr.value == "data"):
        return False
    if not isinstance(assign.value, cst.BinaryOperation) and not _helper_blend(ctx, assign.value):
        return False
    averaged = _looped(target, targets)
    if averaged is None:
        return False
    return not blended_with_other or _mentions_other(ctx, assign.value, targets, averaged)


def _helper_blend(ctx, value: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``self.update_average(old, new)``: a function of this file given two tensors that returns
    a blend of them (``return old * self.beta + (1 - self.beta) * new``; decision-diffuser's and
    denoising-diffusion's ``EMA`` class)."""
    if type(value) is not cst.Call or len(value.args) < 2:
        return False  # one tensor in: a transform of it (a clip, a quantization), no average of two
    function = ctx.functions.called(value, ctx.qname(value.func))
    return function is not None and any(
        type(ret.value) is cst.BinaryOperation for ret in ctx.values.returns_of(function))


def _mentions_other(ctx, value: cst.BaseExpression, targets: set[str], averaged: str) -> bool:  # type: ignore[no-untyped-def]
    """Does ``value`` read a loop tensor other than ``averaged`` (``param.data``; not ``p.grad``)?"""
    for node in (value, *ctx.tree.descendants(value)):
        parent = ctx.tree.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value != "data" and not _called(ctx, parent):
            continue  # `p.grad`: a gradient, not the weights (`p.detach()`, `p.to(device)` are the weights)
        if isinstance(parent, cst.Index):
            continue  # `name` of `shadow[name]`: the key, not a tensor
        looped = _looped(node, targets) if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)) else None
        if looped is not None and looped != averaged:
            return True
    return False


def _looped(receiver: cst.BaseExpression, targets: set[str]) -> str | None:
    """The loop name ``receiver`` stands for: ``e``, ``e.data``, or ``ema[name]`` (as
    ``ema[name]``; ``ema[name.replace(".", "")]`` too); None for anything else."""
    if isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
        receiver = receiver.value
    if isinstance(receiver, cst.Name):
        return receiver.value if receiver.value in targets else None
    if isinstance(receiver, cst.Subscript) and len(receiver.slice) == 1 and isinstance(receiver.slice[0].slice, cst.Index):
        index = receiver.slice[0].slice.value
        if type(index) is cst.Call and type(index.func) is cst.Attribute and index.func.attr.value in _KEY_SPELLINGS:
            index = index.func.value  # `shadow[name.replace(".", "")]`: the key respelled
        if isinstance(index, cst.Name) and index.value in targets:
            return f"{dotted(receiver.value)}[{index.value}]"
    return None


def _blend(ctx, value: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``d * e + (1 - d) * p``, ``p.lerp(e, beta)``, ``torch.lerp(e, p, w)``."""
    if isinstance(value, cst.BinaryOperation):
        return True
    if not isinstance(value, cst.Call):
        return False
    name = ctx.qname(value.func) or (value.func.attr.value if isinstance(value.func, cst.Attribute) else None)
    return name in _BLENDS


def _uses_other(ctx, update: cst.Call, targets: set[str], averaged: str) -> bool:  # type: ignore[no-untyped-def]
    """Does the chain of ``update`` read a loop tensor other than the averaged one
    (``ema[name].mul_(d).add_(p, ...)``: ``p``; ``v.add_(params[k])``: ``params[k]``)?"""
    chain: cst.BaseExpression = update
    while isinstance(chain, cst.Call) and isinstance(chain.func, cst.Attribute):
        for arg in chain.args:
            for node in (arg.value, *ctx.tree.descendants(arg.value)):
                parent = ctx.tree.parent(node)
                if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value != "data" and not _called(ctx, parent):
                    continue  # `p.grad`: a gradient summed per parameter (Fisher, accumulation), not the weights
                looped = _looped(node, targets) if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)) else None
                if looped is not None and looped != averaged:
                    return True  # `p` into `ema[name]`, `params[k]` into `v`
        chain = chain.func.value
    return False


def _called(ctx, attribute: cst.Attribute) -> bool:  # type: ignore[no-untyped-def]
    """``p.detach()``, ``v.to(device)``: a method of the tensor itself, called (not ``p.grad``)."""
    call = ctx.tree.parent(attribute)
    return isinstance(call, cst.Call) and call.func is attribute
