"""Host values the program cannot do without: what an environment's ``step`` takes, and a
prioritised replay buffer's priorities.

An RL loop runs its policy on the device and its environments on the host (gym, Atari,
MuJoCo): ``envs.step(action.cpu().numpy())`` or ``env.step(q.argmax().item())`` copy the
action over once per environment step because the environment needs it there. That read
is the loop's price, not a habit to fix (short of an environment on the device), so the
per-step sync rules leave it alone (the fresh review of cleanrl: four of its DQN, DDPG,
TD3 and Rainbow actions were reported high where nothing could be done).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext
    from torchlint.analysis.tree import Tree

# What may stand between the read and the environment: `.numpy()`, `.tolist()`, `[0]`, ...
_PASS_THROUGH = frozenset({"numpy", "tolist", "item", "cpu", "squeeze", "flatten", "reshape", "astype", "detach", "clip", "copy"})


def feeds_environment(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is the host value ``node`` makes (a ``.cpu()``, an ``.item()``) an argument of an
    environment's ``step``, there or through the one name it is bound to?"""
    value = _outermost(ctx, node)
    parent = ctx.tree.parent(value)
    if type(parent) is cst.Arg:
        return environment_step(ctx.tree.parent(parent))
    if type(parent) is not cst.Assign or len(parent.targets) != 1 or type(parent.targets[0].target) is not cst.Name:
        return False  # a tuple, an attribute, a return: not followed
    for binding in ctx.bindings.bound_to(value):
        for use in ctx.bindings.uses(binding, ordered=True):
            around = ctx.tree.parent(_outermost(ctx, use))
            if type(around) is cst.Arg and environment_step(ctx.tree.parent(around)):
                return True
    return False


def feeds_priorities(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is the host value ``node`` makes handed, there or through the one name it is bound to, to a
    prioritised replay buffer's priority update (``mem.update_priorities(idxs, loss.cpu().numpy())``,
    ``rb.update_priority(...)``)? Such a buffer keeps its sum tree in NumPy on the host: the read is
    what that structure needs, not a habit to fix short of a buffer on the device."""
    value = _outermost(ctx, node)
    uses = [value]
    parent = ctx.tree.parent(value)
    if type(parent) is cst.Assign and len(parent.targets) == 1 and type(parent.targets[0].target) is cst.Name:
        uses = [_outermost(ctx, use) for binding in ctx.bindings.bound_to(value) for use in ctx.bindings.uses(binding, ordered=True)]
    for use in uses:
        around = ctx.tree.parent(use)
        call = ctx.tree.parent(around) if type(around) is cst.Arg else None
        if type(call) is cst.Call and "priorit" in (ctx.method_name(call) or dotted(call.func) or "").lower():
            return True
    return False


def steps_an_environment(ctx: FileContext) -> bool:
    """Does the file call an environment's ``step`` anywhere (else no value of it feeds one)?"""
    return any(environment_step(call) for call in ctx.tree.nodes(cst.Call))


def returned(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is the host value ``node`` makes what its function returns (``return
    self.actor(s).cpu().data.numpy().flatten()``, or the one name it is bound to, returned)?
    Whether a caller hands it to an environment is the join's to say (``CallSite.feeds_env``)."""
    value = _outermost(ctx, node)
    parent = ctx.tree.parent(value)
    if type(parent) is cst.Return:
        return True
    if type(parent) is not cst.Assign or len(parent.targets) != 1 or type(parent.targets[0].target) is not cst.Name:
        return False
    return _returned_name(ctx, value)


def _returned_name(ctx: FileContext, value: cst.CSTNode, depth: int = 0) -> bool:
    """Is the name ``value`` is bound to returned, itself or once wrapped (``depth_pred =
    list(depth_pred)`` then ``return depth_pred``: dinov2's ``aug_test``)?"""
    for binding in ctx.bindings.bound_to(value):
        if not any(_returned_shape(ctx, read, depth) for read in ctx.bindings.reads_in_reach(binding)):
            continue  # no read that may see it is returned or wrapped: its uses (a lookup each) need not be found
        for use in ctx.bindings.uses(binding, ordered=True):
            if type(ctx.tree.parent(use)) is cst.Return:
                return True
            wrapped = _wrapped_by(ctx, use, depth)
            if wrapped is not None and _returned_name(ctx, wrapped, depth + 1):
                return True
    return False


def _returned_shape(ctx: FileContext, read: cst.CSTNode, depth: int) -> bool:
    """Is ``read`` returned as it is, or wrapped as :func:`_returned_name` follows (whichever binding it sees)?"""
    return type(ctx.tree.parent(read)) is cst.Return or _wrapped_by(ctx, read, depth) is not None


def _wrapped_by(ctx: FileContext, use: cst.CSTNode, depth: int) -> cst.Call | None:
    """The ``list(use)`` or ``tuple(use)`` bound to a name, within the depth :func:`_returned_name` follows."""
    parent = ctx.tree.parent(use)
    wrapped = ctx.tree.parent(parent) if type(parent) is cst.Arg else None
    if depth < 2 and type(wrapped) is cst.Call and type(wrapped.func) is cst.Name and wrapped.func.value in ("list", "tuple") \
            and type(ctx.tree.parent(wrapped)) is cst.Assign:
        return wrapped
    return None


def _outermost(ctx: FileContext, expr: cst.CSTNode) -> cst.CSTNode:
    """``expr`` with the conversions, indexing and arithmetic applied to it
    (`a.cpu().numpy()[0]`, `(policy.act(s) + noise).clip(-1, 1)`)."""
    tree = ctx.tree
    while True:
        parent = tree.parent(expr)
        if type(parent) is cst.Subscript and parent.value is expr:
            expr = parent
            continue
        if type(parent) is cst.BinaryOperation:
            expr = parent  # exploration noise added to the action: still the action
            continue
        if type(parent) is cst.IfExp and parent.test is not expr:
            expr = parent  # `rand() if explore else policy(s).item()`: the action either way
            continue
        if type(parent) is cst.Attribute and parent.value is expr and parent.attr.value == "data":
            expr = parent  # `a.cpu().data.numpy()`: the same values
            continue
        if type(parent) is cst.Attribute and parent.value is expr and parent.attr.value in _PASS_THROUGH:
            call = tree.parent(parent)
            if type(call) is cst.Call and call.func is parent:
                expr = call
                continue
        return expr


def device_environment_output(value: cst.BaseExpression, element: int, count: int) -> cst.BaseExpression | None:
    """The action given to an environment's ``step`` whose output ``element`` (of ``count`` targets)
    is: ``next_obs, reward, next_done, info = envs.step(action)``. An environment that takes the
    action as the policy made it (no ``.cpu().numpy()``) runs on the device (Isaac Gym, a batched
    torch simulator) and returns device tensors, all but the ``info`` dict at the end. None where
    ``value`` is no such step or ``element`` is the info."""
    if not environment_step(value) or not value.args or count < 4 or element >= count - 1:  # type: ignore[attr-defined]
        return None  # (gym's `obs, reward, done, info` and `obs, reward, terminated, truncated, info`)
    return value.args[0].value  # type: ignore[attr-defined]


def target_count(statement: cst.CSTNode) -> int:
    """How many names a tuple assignment binds (``a, b, c, d = f()``: 4); 1 for any other."""
    targets = statement.targets if type(statement) is cst.Assign else []  # type: ignore[attr-defined]
    target = targets[0].target if len(targets) == 1 else None
    return len(target.elements) if type(target) in (cst.Tuple, cst.List) else 1  # type: ignore[union-attr]


def environment_info(value: cst.BaseExpression, element: int, count: int) -> cst.BaseExpression | None:
    """The action given to an environment's ``step`` where target ``element`` (of ``count``) of ``value`` is
    the ``info`` dict it returns last (``obs, reward, terminated, truncated, info = env.step(a)``, ``obs,
    reward, done, info``); None otherwise. An environment given its action on the host (``a.cpu().numpy()``)
    fills it with Python and NumPy values (gymnasium's ``info["is_success"]``); one given a device tensor
    may keep device tensors there (cleanrl's Isaac Gym wrapper's ``info["r"]``)."""
    if not environment_step(value) or not value.args or count < 4 or element != count - 1:  # type: ignore[attr-defined]
        return None
    return value.args[0].value  # type: ignore[attr-defined]


def environment_step(call: cst.CSTNode | None, tree: Tree | None = None) -> bool:
    """An environment's step (an RL rollout runs one per iteration): ``env.step(a)``, ``envs.step(a)``, ``self.env.step(a)``,
    ``train_env.step(a)``; given the ``tree``, also each environment's of a list of them (dreamerv3's
    ``[e.step(a) for e, a in zip(envs, action)]``: ``e`` is one of ``envs``)."""
    if type(call) is not cst.Call or type(call.func) is not cst.Attribute or call.func.attr.value != "step":
        return False
    return names_an_environment(call.func.value) or tree is not None and _one_of_environments(tree, call.func.value)


def _one_of_environments(tree: Tree, owner: cst.BaseExpression) -> bool:
    """Is ``owner`` a name a comprehension or loop around it binds to each item of a list of environments
    (``for e in envs``, ``for e, a in zip(envs, actions)``, ``for i, e in enumerate(envs)``)?"""
    if type(owner) is not cst.Name:
        return False
    for around in tree.ancestors(owner):
        loop = around if type(around) in (cst.For, cst.CompFor) else getattr(around, "for_in", None)
        if loop is None:
            continue
        iterable, target = loop.iter, loop.target
        if type(iterable) is cst.Call and dotted(iterable.func) in ("zip", "enumerate") and type(target) is cst.Tuple:
            offset = 1 if dotted(iterable.func) == "enumerate" else 0  # (`enumerate`'s first item is the index)
            pairs = [(element.value, iterable.args[i - offset].value) for i, element in enumerate(target.elements)
                     if 0 <= i - offset < len(iterable.args)]
        else:
            pairs = [(target, iterable)]
        # (the name rebound by the nearest loop that binds it decides: an inner `for e in batch:` shadows)
        bound = [source for name, source in pairs if type(name) is cst.Name and name.value == owner.value]
        if bound:
            return names_an_environment(bound[0])
        if any(type(name) is cst.Name and name.value == owner.value for name in tree.descendants(target)):
            return False
    return False


def names_an_environment(owner: cst.BaseExpression) -> bool:
    """``env``, ``self.env``, ``train_envs``, ``envs.venv`` (the environment a vectorised wrapper
    holds): an environment by its name, whose ``step``/``eval()``/``train()`` are not a model's."""
    name = (dotted(owner) or "").rsplit(".", 1)[-1].lower()
    return name in ("env", "envs", "venv", "environment", "environments") or name.endswith(("_env", "_envs"))


# Lightning's logging calls take a tensor and read it only when they write it out.
_FRAMEWORK_LOGGERS = frozenset({"self.log", "self.log_dict", "pl_module.log", "pl_module.log_dict"})


def logged_by_framework(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is the host value ``node`` makes handed straight to Lightning's ``self.log``
    (``self.log("acc", acc.item())``), which would take the tensor itself?"""
    parent = ctx.tree.parent(_outermost(ctx, node))
    if type(parent) is not cst.Arg:
        return False
    call = ctx.tree.parent(parent)
    return type(call) is cst.Call and dotted(call.func) in _FRAMEWORK_LOGGERS
