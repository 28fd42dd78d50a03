"""Qualified names through imports and aliases (``import torch.nn as nn`` and friends)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.tree import Tree


def dotted(node: cst.BaseExpression | cst.ImportFrom | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    # `type(...) is`, not isinstance: libcst's classes are ABCs, whose failing isinstance
    # is slow, and this runs for most names the analyses meet (no class derives from these).
    node_type = type(node)
    if node_type is cst.Name:  # most questions: a plain name, no list to join
        return node.value  # type: ignore[union-attr]
    if node_type is not cst.Attribute:
        return None
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)  # type: ignore[union-attr]
        node = node.value  # type: ignore[union-attr]
    if type(node) is cst.Name:
        parts.append(node.value)  # type: ignore[union-attr]
        return ".".join(reversed(parts))
    return None


def _module_name(node: cst.ImportFrom) -> str | None:
    if node.relative:
        return None  # a relative import is the user's own package, never torch
    return dotted(node.module) if node.module is not None else None


class Imports:
    """The names a module binds by importing, mapped to what they refer to.

    Imports anywhere in the file count (a function-local ``import torch`` is as
    good as a top-level one for deciding what ``torch.zeros`` means).
    """

    def __init__(self, tree: Tree) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()
        # Names bound by imports at module level (not inside a def or class): usable anywhere.
        self.module_level: dict[str, str] = {}
        for node in tree.nodes(cst.Import):
            top = not any(isinstance(a, (cst.FunctionDef, cst.ClassDef)) for a in tree.ancestors(node))
            for alias in node.names:
                full = dotted(alias.name)
                if full is None:
                    continue
                self.modules.add(full)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.aliases[alias.asname.name.value] = full
                    if top:
                        self.module_level[alias.asname.name.value] = full
                else:
                    head = full.split(".", 1)[0]
                    self.aliases.setdefault(head, head)
                    if top:
                        self.module_level.setdefault(head, head)
        # The user's own modules, for the project-wide step join: `from .metrics import
        # accuracy` (name -> (level, "metrics.accuracy")) and `from m import *` modules.
        self.relative: dict[str, tuple[int, str]] = {}
        self.stars: list[tuple[int, str]] = []
        for node in tree.nodes(cst.ImportFrom):
            if isinstance(node.names, cst.ImportStar):
                self.stars.append((len(node.relative), dotted(node.module) or "" if node.module is not None else ""))
            elif node.relative:
                self._add_relative(node)
            module = _module_name(node)
            if module is None:
                continue
            self.modules.add(module)
            if isinstance(node.names, cst.ImportStar):
                continue
            for alias in node.names:
                name = dotted(alias.name)
                if name is None:
                    continue
                bound = name
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    bound = alias.asname.name.value
                self.aliases[bound] = f"{module}.{name}"
                if not any(isinstance(a, (cst.FunctionDef, cst.ClassDef)) for a in tree.ancestors(node)):
                    self.module_level[bound] = f"{module}.{name}"
        self._forget_own_definitions(tree.module)

    def _forget_own_definitions(self, module: cst.Module) -> None:
        """``from math import log`` then ``def log(t, eps=1e-20): ...`` at the module's top
        level: the code that calls ``log`` runs after the module is loaded, so it calls the
        file's own function, not the import (x-transformers' autoregressive_wrapper.py)."""
        imports_seen = False
        for statement in module.body:
            if type(statement) is cst.SimpleStatementLine:
                imports_seen = imports_seen or any(type(s) in (cst.Import, cst.ImportFrom) for s in statement.body)
            elif imports_seen and type(statement) in (cst.FunctionDef, cst.ClassDef):
                name = statement.name.value  # type: ignore[attr-defined]
                self.aliases.pop(name, None)
                self.module_level.pop(name, None)

    def _add_relative(self, node: cst.ImportFrom) -> None:
        base = dotted(node.module) if node.module is not None else ""
        for alias in node.names:  # type: ignore[union-attr]
            name = dotted(alias.name)
            if name is None:
                continue
            bound = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            self.relative[bound] = (len(node.relative), f"{base}.{name}" if base else name)

    def spelling(self, qualified: str, via: tuple[str, ...] = ("torch",)) -> str | None:
        """Source text that names ``qualified`` anywhere in the file, through a module-level
        import of one of the modules ``via`` (``import torch as th`` → ``th.amp.autocast``)."""
        for module in sorted(via, key=len, reverse=True):
            if qualified != module and not qualified.startswith(module + "."):
                continue
            bound = [name for name, target in self.module_level.items() if target == module]
            if bound:
                name = module if module in bound else sorted(bound)[0]
                return name + qualified[len(module):]
        return None

    def imports_torch(self) -> bool:
        return any(m == "torch" or m.startswith("torch.") for m in self.modules)

    def qualify(self, node: cst.BaseExpression | None) -> str | None:
        """The fully qualified name ``node`` refers to, or None when it is not imported."""
        base = node
        while type(base) is cst.Attribute:  # not isinstance: see `dotted`
            base = base.value  # type: ignore[union-attr]
        # Most names asked about are locals: look the head up before joining the chain.
        target = self.aliases.get(base.value) if type(base) is cst.Name else None  # type: ignore[union-attr]
        if target is None:
            return None
        name = dotted(node)
        if name is None:
            return None
        rest = name.partition(".")[2]
        return f"{target}.{rest}" if rest else target


# Public torch paths that users reach through more than one spelling.
_CANONICAL = {
    "torch.nn.modules": "torch.nn",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    # torchdata's drop-in subclass (same arguments, same worker and pinning behaviour)
    "torchdata.stateful_dataloader.StatefulDataLoader": "torch.utils.data.DataLoader",
    "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader": "torch.utils.data.DataLoader",
    "torch.autograd.variable.Variable": "torch.autograd.Variable",
    "torch.cuda.amp.autocast_mode.autocast": "torch.cuda.amp.autocast",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
}


def is_range(iterable: cst.BaseExpression | None) -> bool:
    """``range(n)`` (or tqdm's ``trange(n)``): a loop over a count."""
    return type(iterable) is cst.Call and dotted(iterable.func) in ("range", "trange") and bool(iterable.args)


def canonical(name: str | None) -> str | None:
    """Fold submodule spellings (``torch.nn.modules.conv.Conv2d``) to the public name."""
    if name is None:
        return None
    if name in _CANONICAL:
        return _CANONICAL[name]
    if name.startswith("torch.nn.modules."):
        return "torch.nn." + name.rsplit(".", 1)[-1]
    if name.startswith("torch.nn.functional."):
        return name
    return name


def last_segment(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def iterated_source(iterable: cst.BaseExpression, element: int | None) -> cst.BaseExpression | None:
    """What a loop target takes its items from: the iterable, or for ``zip(a, b)`` and
    ``enumerate(a)`` the argument at the target's position (None when unknown)."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value in ("zip", "enumerate"):
        positional = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if element is None:
            return None
        if iterable.func.value == "enumerate":
            return positional[0] if element == 1 and positional else None
        return positional[element] if element < len(positional) else None
    return iterable if element is None else None
