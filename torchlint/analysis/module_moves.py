"""Modules moved with ``.cpu()``, ``.cuda()`` or ``.to(place)``: ``nn.Module`` moves in
place, so what a moved module computes afterwards lives where it went (a part of
:class:`devices.Devices`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ModuleMoves:
    """Mixed into :class:`devices.Devices`, whose ``move`` it uses."""

    ctx: FileContext
    move: Callable[[cst.Call], str | None]  # Devices.move: "host", "device" or None

    def module_on_host(self, func: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is the callable ``func`` (``model``, ``self.net``) a module whose last move before
        ``at`` in source order took it to the host? ``nn.Module.cpu()`` and ``.to("cpu")``
        move the module in place, so ``model_cpu = model.cpu()`` moves ``model`` too, and
        every call of either runs on the host until a move back."""
        name = dotted(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(func) is not None:
            return False
        tree = self.ctx.tree
        where, scope = tree.index(at), tree.scope_of(at)
        latest: tuple[int, str] | None = None
        for index, placement, moved_in in self._module_moves().get(name, ()):
            # the same name in another function may be another module: moves count in the
            # scope of `at`, or at module level for a name the scope does not bind itself
            same = moved_in is scope or (moved_in is tree.module and not self._bound_in(name, at, scope))
            if same and index < where and (latest is None or index > latest[0]):
                latest = (index, placement)
        reaching = self.ctx.bindings.reaching(name, at)  # `model_cpu = model.cpu()`: the alias
        if reaching is not None and isinstance(reaching.value, cst.Call) and reaching.element is None:
            moved = self.move(reaching.value)
            index = self.ctx.tree.index(reaching.node)
            if moved is not None and (latest is None or index > latest[0]):
                latest = (index, moved)
        return latest is not None and latest[1] == "host"

    def _module_moves(self) -> dict[str, list[tuple[int, str, cst.CSTNode]]]:
        """receiver name -> (pre-order index, "host" or "device", scope) of each ``.cpu()``,
        ``.cuda()`` or ``.to(place)`` made on it (once per file)."""
        if not hasattr(self, "_moves"):
            self._moves: dict[str, list[tuple[int, str, cst.CSTNode]]] = {}
            tree = self.ctx.tree
            for call in self.ctx.method_calls(("cpu", "cuda", "to")):
                receiver = dotted(call.func.value)  # type: ignore[attr-defined]
                placement = self.move(call)
                if receiver is not None and placement is not None:
                    self._moves.setdefault(receiver, []).append((tree.index(call), placement, tree.scope_of(call)))
        return self._moves

    def _bound_in(self, name: str, at: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Does ``scope``, the function around ``at``, bind ``name`` itself (a parameter,
        an assignment), so that the module-level name is not the one ``at`` reads?"""
        return scope is not self.ctx.tree.module and any(
            self.ctx.tree.scope_of(b.node) is scope for b in self.ctx.bindings.lookup(name, at))
