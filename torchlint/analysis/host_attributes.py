"""Host tensors an object keeps, moved to the device by code of another class: score_sde's ``VPSDE.__init__``
keeps ``self.alphas = 1. - self.discrete_betas`` (on the host, no buffer) and ``LangevinCorrector.update_fn``,
in another file, runs ``sde.alphas.to(t.device)[timestep]`` on every denoising step (TL113).

This file's side: which of its classes' attributes are such tensors (``FileSummary.host_attributes``, from
``Uploads.host_attribute``), and which moves here are of another object's attribute (``moved_attribute``),
whose class only the join can name (``project_callees.keeps_host_tensor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def host_attributes(ctx: FileContext, class_keys: dict[int, str]) -> tuple[tuple[str, str], ...]:
    """(class key, attribute) for each ``self.<attribute>`` of a class of the file that only the methods building
    the object set, each time to a tensor made on the host (``Uploads.host_attribute``)."""
    if not ctx.imports_torch():
        return ()  # (a file that never imports torch makes no tensors)
    found: set[tuple[str, str]] = set()
    for target in ctx.tree.nodes(cst.AssignTarget):
        attribute = target.target
        if type(attribute) is not cst.Attribute or dotted(attribute.value) != "self":
            continue
        cls = ctx.tree.enclosing_class(target)
        if cls is None or id(cls) not in class_keys or (class_keys[id(cls)], attribute.attr.value) in found:
            continue
        if ctx.uploads.host_attribute(attribute):
            found.add((class_keys[id(cls)], attribute.attr.value))
    return tuple(sorted(found))


def moved_attribute(ctx: FileContext, call: cst.Call) -> cst.Attribute | None:
    """``sde.alphas`` of ``sde.alphas.to(t.device)``: a move to the device of an attribute of another object (a
    local name, a parameter, ``self.sde.alphas``), not ``self``'s own (``Uploads.host_attribute`` decides those) nor
    a module's (``np.pi``), that this file never assigns on any object (``sde.alphas = ...`` may put it on the device)."""
    func = call.func
    if type(func) is not cst.Attribute or ctx.devices.move(call) != "device" or ctx.qname(func) is not None:
        return None
    moved = func.value
    if type(moved) is not cst.Attribute:
        return None
    owner = dotted(moved.value)
    if owner is None or owner == "self" or owner.count(".") > 1 or owner.count(".") == 1 and not owner.startswith("self."):
        return None
    if "." not in owner and ctx.qname(moved.value) is not None:
        return None  # an imported module or class
    if moved.attr.value in ctx.uploads.attributes_set_elsewhere:
        return None
    return moved


def rebound_in(ctx: FileContext, moved: cst.Attribute, loop: cst.For | cst.While) -> bool:
    """Is the object whose attribute ``moved`` is (``sde``, ``self.sde``) bound again inside ``loop`` (each pass's own)?"""
    owner = dotted(moved.value)
    targets = [t.target for t in ctx.tree.nodes_under(loop, cst.AssignTarget)] + [f.target for f in ctx.tree.nodes_under(loop, cst.For)]
    return any(dotted(t) == owner or type(t) in (cst.Tuple, cst.List) and any(dotted(e.value) == owner for e in t.elements) for t in targets)
