"""Whose gradients a backward pass is for (TL310): the optimizer stepped after it, whether a
network's gradients are zeroed before its own optimizer steps, and whether the file switches
a network's gradients off around another network's step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.frozen import chain_root, related
from torchlint.analysis.grad import is_backward_call
from torchlint.analysis.kind_names import looks_like_optimizer
from torchlint.analysis.names import dotted, last_segment

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Words in the name of a project helper that switches gradients on and off
# (`set_requires_grad(nets, False)`, `requires_grad(D, False)`, `freeze(D)`, `toggle_grad`).
# (Not any "grad": `compute_gradient_penalty(D, ...)` is handed the network too.)
_TOGGLE_WORDS = ("requires_grad", "set_grad", "toggle", "freez", "frozen", "trainable")


def stepped_after(ctx: FileContext, backward: cst.Call) -> tuple[str, list[cst.Call]] | None:
    """The optimizer that the first ``step()`` after ``backward`` in its scope steps
    (``opt_g.step()``, ``scaler.step(opt_g)``), as written and as the constructions that may
    have built it; None when there is no such step in sight, another backward comes first, or
    the stepped optimizer is not one this file builds."""
    tree = ctx.tree
    scope, start = tree.scope_of(backward), tree.index(backward)
    built = {id(call) for call in ctx.trained.optimizers}
    for call in ctx.method_calls({"step", "backward", "manual_backward"}):
        if tree.index(call) <= start or tree.scope_of(call) is not scope:
            continue
        if is_backward_call(ctx, call):
            return None  # gradients summed with the next backward's: whose step they feed is not this one's alone
        optimizer = _stepped_optimizer(ctx, call)
        if optimizer is None:
            continue  # `scheduler.step()`, `env.step(action)`
        made = ctx.values.constructors_passed(optimizer, call)
        if not made or any(id(chain_root(m)[0]) not in built and id(m) not in built for m in made):
            return None
        return dotted(optimizer) or "?", [m if id(m) in built else chain_root(m)[0] for m in made]  # type: ignore[misc]
    return None


def _stepped_optimizer(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """What ``call`` steps: the receiver of ``opt.step()``, the optimizer of ``scaler.step(opt)``."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if looks_like_optimizer(dotted(receiver) or ""):
        return receiver
    if "scaler" in last_segment(dotted(receiver) or "").lower() and call.args:
        return call.args[0].value
    return None


def grads_discarded(ctx: FileContext, module: str, owners: list[cst.Call], backward: cst.Call) -> bool:
    """Are the gradients ``backward`` leaves in ``module`` zeroed before any of its optimizers
    steps? The first of its optimizers' ``step()`` and the ``zero_grad()`` of one of them (or
    of the module: ``netD.zero_grad()``) after the backward in its function, going round the
    step loop to its top when none follows: a ``zero_grad`` first throws them away, a step
    first uses them (``loss_ge.backward(); opt_e.step(); loss.backward(); opt_g.step()``
    steps the generator with both losses' gradients). A ``zero_grad`` under a branch that
    does not hold the backward may not run: not known."""
    tree = ctx.tree
    scope = tree.scope_of(backward)
    owned = {id(call) for call in owners}
    events = []
    for call in ctx.method_calls({"step", "zero_grad"}):
        if tree.scope_of(call) is not scope:
            continue
        kind = _owner_event(ctx, call, module, owned)
        if kind is not None:
            events.append((tree.index(call), kind, call))
    at = tree.index(backward)
    after = [e for e in events if e[0] > at]
    loop = ctx.loops.local_hot_loop(backward)
    if not after and loop is not None:
        after = [e for e in events if e[0] < at and tree.is_inside(e[2], loop)]  # the next pass of the loop
    if not after:
        return False
    _, kind, call = min(after, key=lambda e: e[0])
    if kind == "step":
        return False
    return not any(isinstance(a, cst.If) and not tree.is_inside(backward, a) for a in _ancestors_within(ctx, call, loop or scope))


def _owner_event(ctx: FileContext, call: cst.Call, module: str, owned: set[int]) -> str | None:
    """"step" or "zero" when ``call`` steps or zeroes one of the module's optimizers (or
    zeroes the module itself), else None."""
    method = call.func.attr.value  # type: ignore[attr-defined]
    target = _stepped_optimizer(ctx, call) if method == "step" else call.func.value  # type: ignore[attr-defined]
    if target is None:
        return None
    if method == "zero_grad" and related(dotted(chain_root(target)[0]) or "", module):
        return "zero"
    made = ctx.values.constructors_passed(target, call)
    if any(id(m) in owned or id(chain_root(m)[0]) in owned for m in made):
        return "step" if method == "step" else "zero"
    return None


def _ancestors_within(ctx: FileContext, node: cst.CSTNode, container: cst.CSTNode) -> list[cst.CSTNode]:
    """``node``'s ancestors up to (not including) ``container``."""
    found = []
    for ancestor in ctx.tree.ancestors(node):
        if ancestor is container:
            break
        found.append(ancestor)
    return found


def toggles_grad(ctx: FileContext, module: str) -> bool:
    """Does the file switch ``module``'s gradients off or on anywhere: ``requires_grad_``, a
    ``.requires_grad = ...`` on it or in a loop over its parameters, a helper named for it
    (``set_requires_grad([netD], False)``), Lightning's ``toggle_optimizer``?"""
    tree = ctx.tree
    for call in ctx.method_calls({"requires_grad_", "toggle_optimizer", "untoggle_optimizer"}):
        if call.func.attr.value != "requires_grad_":  # type: ignore[attr-defined]
            return True  # Lightning switches off every parameter its optimizer is not given
        receiver = dotted(chain_root(call.func.value)[0])  # type: ignore[attr-defined]
        if receiver is not None and (related(receiver, module) or _loop_over_parameters(ctx, call, module)):
            return True  # (`(alpha * real + (1 - alpha) * fake).requires_grad_(True)`: a tensor, not a network)
    for attr in tree.attributes_named("requires_grad"):
        if not isinstance(tree.parent(attr), cst.AssignTarget):
            continue
        holder = dotted(attr.value)
        if holder is not None and (related(holder, module) or _loop_over_parameters(ctx, attr, module)):
            return True
    for call in tree.nodes(cst.Call):
        name = last_segment(dotted(call.func) or "").lower()
        if any(word in name for word in _TOGGLE_WORDS) and _passes(ctx, call, module):
            return True
    return False


def _loop_over_parameters(ctx: FileContext, node: cst.CSTNode, module: str) -> bool:
    """Is ``node`` in a ``for`` over ``module``'s parameters (or a helper's parameter's)?"""
    for ancestor in ctx.tree.ancestors(node):
        if isinstance(ancestor, cst.For):
            names = {dotted(n) for n in (ancestor.iter, *ctx.tree.descendants(ancestor.iter)) if isinstance(n, (cst.Name, cst.Attribute))}
            if any(n is not None and related(n, module) for n in names):
                return True
            if ctx.tree.enclosing_function(ancestor) is not None and any(
                    b.kind == "param" for n in names if n is not None and "." not in n
                    for b in ctx.bindings.lookup(n, ancestor)):
                return True  # `def freeze(net): for p in net.parameters(): ...`: any network may be passed
    return False


def _passes(ctx: FileContext, call: cst.Call, module: str) -> bool:
    """Is ``module`` among ``call``'s arguments, alone or in a list/tuple?"""
    for arg in call.args:
        for node in (arg.value, *ctx.tree.descendants(arg.value)):
            if isinstance(node, (cst.Name, cst.Attribute)) and dotted(node) is not None and related(dotted(node) or "", module):
                return True
    return False
