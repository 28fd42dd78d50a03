"""Whether a module class registers buffers and no weights (a running mean and variance, rl_games'
``RunningMeanStd``): the summary's ``ClassSummary.weights`` ``BUFFERS``, which TL301's join reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.frozen import built_weights
from torchlint.analysis.names import canonical, dotted

if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext

# What registers weights or submodules other than by `self.x = Layer(...)`: not buffers only.
_REGISTERS = frozenset({"register_parameter", "add_module", "register_module"})
_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def buffers_only(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """Does ``cls`` derive from ``nn.Module`` alone, register a buffer, and keep no weights: no
    ``nn.Parameter``, no ``register_parameter``/``add_module``/``setattr``, no attribute set to a layer
    or a module of any class but a torch.nn layer without parameters, and no attribute it calls that
    it was handed (``self.net = net``, then ``self.net(x)``)?"""
    tree = ctx.tree
    # (a project base may register weights: only a direct `nn.Module` subclass is known whole)
    if not cls.bases or any(canonical(ctx.qname(base.value)) != "torch.nn.Module" for base in cls.bases):
        return False
    if not any(tree.is_inside(call, cls) for call in ctx.method_calls("register_buffer")):
        return False  # (a module that registers nothing at all says nothing about itself)
    if any(tree.is_inside(call, cls) for call in ctx.method_calls(_REGISTERS)):
        return False
    # (the class's own calls and assignments: a bisection of the file's, not a scan of them per class)
    calls = tree.nodes_under(cls, cst.Call)
    for call in calls:
        name = canonical(ctx.qname(call.func)) or dotted(call.func) or ""
        if name in _PARAMETER or name in ("Parameter", "setattr"):
            return False  # a weight, or an attribute of any kind by name
    called = {dotted(call.func) for call in calls}
    for node in tree.nodes_under(cls, cst.Assign):
        for target in node.targets:
            name = dotted(target.target) or ""
            if not name.startswith("self."):
                continue
            kind = built_weights(ctx, node.value, node)
            if isinstance(kind, cst.Call) or kind:
                return False  # a layer with weights, a backbone, a frozen module, a class of another file
            if kind is None and name in called:
                return False  # a module it was handed and runs (not a torch.nn layer without weights: `self.act = nn.Identity()`)
    return True



def built_elsewhere(ctx: FileContext, module: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
    """The constructor of another file's class that ``module`` is built as (the join looks the class
    up): a name's (``frozen.built_weights``), or ``self.norm``'s where every binding of it in its class
    builds that one class (``self.norm = RunningMeanStd(shape)``); None where one binding is something
    else (``RunningMeanStd(s) if c else nn.LayerNorm(1)``, a parameter) or the class is known here."""
    built = built_weights(ctx, module, at)
    if isinstance(built, cst.Call) or built is not None:
        return built if isinstance(built, cst.Call) else None
    name = dotted(module)
    cls = ctx.tree.enclosing_class(at)
    if cls is None or name is None or not name.startswith("self.") or name.count(".") != 1:
        return None
    bindings = ctx.bindings.self_attrs.get(id(cls), {}).get(name, [])
    if isinstance(at, cst.Call) and at.func is module and all(_copied(b, name) for b in bindings):
        # set in a subclass or copied from another object (`self.norm = self.model.norm`): the call itself,
        # whose target the join looks up as an attribute of the class (`project_callees.buffers_only`)
        return at
    made = [built_weights(ctx, b.value, b.node) if b.kind == "assign" and b.element is None and b.value is not None else None
            for b in bindings]
    if not made or not all(isinstance(m, cst.Call) for m in made):
        return None
    classes = {dotted(m.func) for m in made}  # type: ignore[union-attr]
    return made[0] if len(classes) == 1 else None  # type: ignore[return-value]


def _copied(binding: Binding, name: str) -> bool:
    """``self.norm = self.model.norm`` (either branch of a conditional expression): a copy under the same name."""
    value = binding.value if binding.kind == "assign" and binding.element is None else None
    branches = (value.body, value.orelse) if type(value) is cst.IfExp else (value,)
    return all(type(b) is cst.Attribute and b.attr.value == name.split(".")[-1] and (dotted(b) or "").startswith("self.") for b in branches)
