"""An attribute of an object that a loop reads and never changes: the same data on every pass.

``obs_rms = RunningMeanStd(...)`` before the rollout loop, ``torch.from_numpy(obs_rms.mean).to(device)``
in it, and ``obs_rms.update(...)`` only after it (cleanrl's ``ppo_rnd_envpool``): every pass of the
loop uploads the same statistics. Any other use of the object inside the loop (a method call,
an attribute written, the object handed to a call) may change them, and then they are no constant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def attribute_unchanged(ctx: FileContext, data: cst.Attribute, loop: cst.For | cst.While) -> bool:
    """Is ``data`` (``obs_rms.mean``) an attribute of a name bound only by assignments outside
    ``loop``, which the loop uses only to read attributes (see the module's docstring)?"""
    owner = data.value
    if type(owner) is not cst.Name or owner.value == "self":
        return False
    bound = ctx.bindings.lookup(owner.value, data)
    if not bound or any(b.kind != "assign" or b.node is loop or ctx.tree.is_inside(b.node, loop) for b in bound):
        return False  # bound in the loop (each pass's object), or a parameter, a loop variable
    uses = [n for n in ctx.tree.descendants(loop) if type(n) is cst.Name and n.value == owner.value]
    return all(_read_only(ctx, use) for use in uses)


def _read_only(ctx: FileContext, use: cst.Name) -> bool:
    """``obj.attr`` read as a value: not called (``obj.update(x)``), not written (``obj.mean = m``,
    ``obj.count += 1``, ``obj.mean[0] = 0``), and not ``obj`` itself handed on."""
    attribute = ctx.tree.parent(use)
    if type(attribute) is not cst.Attribute or attribute.value is not use:
        return False
    above = ctx.tree.parent(attribute)
    if type(above) is cst.Call and above.func is attribute:
        return False
    while type(above) is cst.Subscript and above.value is attribute:
        attribute, above = above, ctx.tree.parent(above)
    return type(above) not in (cst.AssignTarget, cst.AugAssign, cst.Del) and not (type(above) is cst.Attribute and above.attr.value.endswith("_"))
