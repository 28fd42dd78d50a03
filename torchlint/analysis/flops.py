"""Each ``nn.Linear``'s share of its file's matrix-multiply FLOPs, from sizes known statically.

A ``Linear(in, out)`` costs ``in * out`` multiply-adds per row, forward and backward alike,
so its share of the file's Linear layers is its ``in * out`` times how many of it a model
builds, over the sum of those. How many: one per construction of its class, times the
``range(N)`` a construction sits in (``nn.ModuleList([Block(config) for _ in
range(config.n_layer)])``), up the classes that build it (a ``Block`` built by a ``GPT``).

The share is only an estimate, and only where it can be one: None when a Linear of the file
has a size the constants do not know, or when the file builds convolutions or recurrent
layers (their FLOPs are not counted, so a classifier head would look like the whole model).
The attention products (``q @ k^T``) are not counted either: a transformer's Linear layers
hold most of its FLOPs at moderate sequence lengths.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_LINEAR = "torch.nn.Linear"
# Layers whose FLOPs this estimate does not count: with them in the file there is no share.
_UNCOUNTED = frozenset({
    *(f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose") for d in (1, 2, 3)),
    *(f"torch.nn.{kind}" for kind in ("RNN", "LSTM", "GRU", "MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer")),
})
_MAX_DEPTH = 6


class LinearFlops:
    """The share of the file's Linear FLOPs that one ``nn.Linear(...)`` call makes."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def share(self, call: cst.Call) -> float | None:
        """``call``'s share (0-1), or None where the file's layers are not all known."""
        weights = self._weights
        if weights is None or id(call) not in weights:
            return None
        total = sum(weights.values())
        return weights[id(call)] / total if total > 0 else None

    @cached_property
    def _weights(self) -> dict[int, float] | None:
        """``id(call) -> in * out * copies`` for every Linear of the file; None when one is unknown."""
        ctx = self.ctx
        weights: dict[int, float] = {}
        for call in ctx.tree.nodes(cst.Call):
            qualified = ctx.qname(call.func)
            if qualified in _UNCOUNTED:
                return None  # FLOPs this estimate does not count
            if qualified != _LINEAR:
                continue
            sizes = [ctx.argument(call, position, keyword) for position, keyword in ((0, "in_features"), (1, "out_features"))]
            values = [ctx.constants.int_value(arg.value, call) if arg is not None else None for arg in sizes]
            if values[0] is None or values[1] is None:
                return None  # a size the constants do not know: no share to compare with
            weights[id(call)] = float(values[0] * values[1]) * self._copies(call, 0)
        return weights if len(weights) > 1 else None

    def _copies(self, node: cst.CSTNode, depth: int) -> float:
        """How many times a model builds what ``node`` builds: the ``range(N)`` loops and
        comprehensions around it, times the constructions of its class."""
        if depth > _MAX_DEPTH:
            return 1.0
        copies = self._repeats(node)
        cls = self.ctx.tree.enclosing_class(node)
        if cls is None:
            return copies
        sites = self._constructions.get(cls.name.value, [])
        if not sites:
            return copies  # built elsewhere (another file, a factory): once
        return copies * sum(self._copies(site, depth + 1) for site in sites)

    def _repeats(self, node: cst.CSTNode) -> float:
        """The product of the known ``range(N)`` iterations around ``node`` in its function."""
        repeats = 1.0
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            iterables = []
            if isinstance(ancestor, cst.For):
                iterables.append(ancestor.iter)
            elif isinstance(ancestor, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
                comp: cst.CompFor | None = ancestor.for_in
                while comp is not None:
                    iterables.append(comp.iter)
                    comp = comp.inner_for_in
            for iterable in iterables:
                if isinstance(iterable, cst.Call) and dotted(iterable.func) == "range" and len(iterable.args) == 1:
                    n = self.ctx.constants.int_value(iterable.args[0].value, iterable)
                    repeats *= max(n, 0) if n is not None else 1
        return repeats

    @cached_property
    def _constructions(self) -> dict[str, list[cst.Call]]:
        """Class name -> the calls of it in this file (``Block(config)``)."""
        classes = {cls.name.value for cls in self.ctx.tree.nodes(cst.ClassDef)}
        found: dict[str, list[cst.Call]] = {}
        for call in self.ctx.tree.nodes(cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value in classes:
                found.setdefault(call.func.value, []).append(call)
        return found
