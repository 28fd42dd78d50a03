"""Which branch built the object a call runs: ``self.net.forward(x)`` where ``self.net`` is ``L2()``
only under ``elif self.model in ["L2", "l2"]:`` (LPIPS' ``DistModel.initialize``). The tests are
``Guards.flag_of``'s flags, kept on the call site (``CallSite.flags``), so the settling step follows
only the branches the project's values take (``SettingDefaults.called_switched_off``). A mixin of
ObjectRefs, which supplies ``ctx``, ``_object_of`` and ``_self_attribute``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.summary import Ref
from torchlint.analysis.switch_words import Flag

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class BranchMembers:
    ctx: FileContext

    def _object_of(self, value: cst.BaseExpression | None, at: cst.CSTNode, element: int | None) -> Ref | None:  # pragma: no cover
        raise NotImplementedError

    def _self_attribute(self, cls: cst.ClassDef, attr: str) -> Ref | None:  # pragma: no cover - ObjectAttributes'
        raise NotImplementedError

    def attribute_holder(self, cls: cst.ClassDef, attr: str, depth: int = 0) -> cst.ClassDef | None:  # pragma: no cover - ObjectAttributes'
        raise NotImplementedError

    def member_flags(self, call: cst.Call, target: Ref) -> tuple[Flag, ...]:
        """The tests of a parameter that the object ``target`` runs (``("object", member, method)``,
        the one a ``self`` attribute holds or one of several) was built only under; () where any
        branch building it may run unconditionally."""
        if target[0] != "object" or type(call.func) is not cst.Attribute:
            return ()
        holder = call.func if dotted(call.func.value) == "self" else call.func.value  # `self.net(x)`, `self.net.forward(x)`
        if type(holder) is not cst.Attribute or dotted(holder.value) != "self":
            return ()
        cls = self.ctx.tree.enclosing_class(call)
        # (a base class of the file may build it: OpenNMT's `TransformerDecoderLayerBase.__init__`'s `if num_experts > 0:`)
        cls = self.attribute_holder(cls, holder.attr.value) if cls is not None else None
        if cls is None:
            return ()
        return self._built_under(cls, holder.attr.value).get(target[1], ())

    def _built_under(self, cls: cst.ClassDef, attr: str) -> dict[Ref, tuple[Flag, ...]]:
        memo: dict[tuple[int, str], dict[Ref, tuple[Flag, ...]]] = self.__dict__.setdefault("_built_under_memo", {})
        key = (id(cls), attr)
        if key not in memo:
            held = self._self_attribute(cls, attr)
            # (each object one branch alone builds, one held or one of several: it exists only where that branch ran;
            # a container's members built together are skipped by `_branch_objects`, no branch choosing between them)
            memo[key] = self._branch_objects(cls, attr, held[0] != "each") if held is not None else {}
        return memo[key]

    def _branch_objects(self, cls: cst.ClassDef, attr: str, single: bool) -> dict[Ref, tuple[Flag, ...]]:
        """Each class ``self.<attr>`` may hold that one branch alone builds, and that branch's tests. ``single``: the
        one class the attribute holds, the other branches building none of the project's (OpenNMT's ``MoE`` or a library's
        ``nn.Linear``): none where the attribute is also bound to a name, an object made elsewhere may be held then."""
        tests: dict[Ref, tuple[Flag, ...]] = {}
        seen: set[Ref] = set()
        for binding in self.ctx.bindings.self_attrs.get(id(cls), {}).get("self." + attr, []):
            if binding.kind != "assign" or binding.value is None:
                continue
            if single and type(binding.value) in (cst.Name, cst.Attribute, cst.Subscript) and binding.element is None and dotted(binding.value) != "None":
                return {}  # (`self.ff = ff`, `self.ff = opts.ff`: an object made elsewhere, of any class, may be held)
            ref = self._object_of(binding.value, binding.node, binding.element)
            if ref is None or ref[0] == "each":
                continue
            if ref in seen:
                tests.pop(ref, None)  # built in two branches (LPIPS' "net-lin" and "net"): either may run
            elif flags := self.ctx.guards.flag_of(binding.node):
                tests[ref] = flags
            seen.add(ref)
        return tests
