"""Where a DataLoader's batches are: on the host, straight from a loop over a loader, or
placed on the device by a framework's loader (a part of :class:`devices.Devices`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import looks_like_device_name
from torchlint.analysis.loaders import no_work_for_workers
from torchlint.analysis.loop_shapes import ITER_WRAPPERS
from torchlint.analysis.members import iterated_item
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Methods that move a value (a batch read through them is no longer the loader's).
_MOVE_METHODS = {"to", "cuda"}


def _batch_root(expr: cst.BaseExpression) -> cst.BaseExpression:
    """What ``expr`` reads a batch through: ``batch`` of ``batch[0]`` or ``x.float()``
    (a move, ``.to()``/``.cuda()``, ends the walk: the batch is then elsewhere)."""
    while True:
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value not in _MOVE_METHODS:
            expr = expr.func.value
        else:
            return expr


class BatchPlacement:
    """Loader batches: on the host until moved. Mixed into :class:`devices.Devices`."""

    ctx: FileContext

    def is_host_batch(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """A value straight from iterating a DataLoader that is never moved to a device
        (or computed from one on the host: ``x[0]``, ``y.sum()``; or unpacked from one:
        ``images, labels = batch``)."""
        name = dotted(_batch_root(expr))
        if name is None:
            return False
        bindings = self.ctx.bindings.lookup(name, at)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind == "assign" and binding.value is not None and _depth < 3 and self._unpacks_batch(binding, _depth):
                continue  # `images, labels = batch`, `x = batch["image"]`
            if binding.kind not in ("for", "comp"):
                return False  # rebound, e.g. `x = x.to(device)`
            if not self._iterates_host_batches(binding, _depth):
                return False
        return True

    def _iterates_host_batches(self, binding, depth: int, flow: bool = False) -> bool:  # type: ignore[no-untyped-def]
        """Does a loop target take its items from a loader that leaves them on the host, or from
        a host batch itself (``for c, i in zip(captions, image_ids)``: the rows of a batch that was
        never moved are host tensors too)?"""
        loop = binding.node
        loader = self.loader_iterated(binding.value, loop)
        if loader is not None:
            return not self._places_batches(loader, loop)
        item = iterated_item(binding.value, binding.element, dict_views=False)
        if item is None or depth >= 3:
            return False
        return self.loader_value(item, loop, depth + 1) if flow else self.is_host_batch(item, loop, depth + 1)

    def loader_iterated(self, iterable: cst.BaseExpression | None, at: cst.CSTNode, _depth: int = 0) -> cst.BaseExpression | None:
        """The DataLoader a loop walks (``loops.loader_of``), also through a logging or progress
        wrapper that is handed the loader and no device (``metric_logger.log_every(loader, 50,
        header)``, a generator yielding what it walks); a wrapper given a device
        (``Prefetcher(loader, device)``) or named for one (``CudaPrefetcher(loader)``) moves them."""
        loader = self.ctx.loops.loader_of(iterable, at)
        if loader is not None or not isinstance(iterable, cst.Call):
            return loader
        name = (dotted(iterable.func) or "").lower()
        if name.rsplit(".", 1)[-1] in ITER_WRAPPERS or name.split(".")[0] == "tqdm":
            # `enumerate(metric_logger.log_every(loader, 50))`: the wrapper inside the wrapper
            found = (self.loader_iterated(a.value, at, _depth + 1) for a in iterable.args if a.keyword is None and not a.star)
            return next((f for f in found if f is not None), None) if _depth < 3 else None
        if any(word in name for word in _DEVICE_WORDS):
            return None  # `to_device_loader(...)`, `MpDeviceLoader(...)`: named for the move it makes
        args = [a for a in iterable.args if not a.star]
        if any(self._names_a_device(a, at) for a in args):
            return None
        first = args[0] if args and args[0].keyword is None else None
        if first is None:
            return None
        return self.ctx.loops.loader_of(first.value, at)

    def _places_batches(self, iterable: cst.BaseExpression | None, at: cst.CSTNode, depth: int = 0) -> bool:
        """A loader handed to ``accelerator.prepare(...)`` or ``fabric.setup_dataloaders(...)``
        yields batches already on the device (also through ``active = train_loader`` or
        ``accelerator.skip_first_batches(train_loader, n)``)."""
        name = dotted(iterable) if iterable is not None else None
        if name is None or depth > 3:
            return False
        if depth == 0 and self._built_on_the_device(iterable, at):
            return True
        for binding in self.ctx.bindings.lookup(name, at):
            value = binding.value
            if binding.kind != "assign" or value is None:
                continue
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _PLACING_LOADERS:
                return True
            if binding.element is None and isinstance(value, (cst.Name, cst.Attribute)) and self._places_batches(value, binding.node, depth + 1):
                return True
        return False

    def _built_on_the_device(self, iterable: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A loader this file builds (``DataLoader(ds, ...)``, or returned so by a helper of the file:
        ``dl = create_dataloader(data, device=device)``) whose dataset's ``__getitem__`` or ``collate_fn``
        moves every item to the device (PaLM-rlhf's ``ExperienceDataset``, ``t[ind].to(self.device)``)."""
        ctx = self.ctx
        built = ctx.values.constructed_by(iterable, at)
        if built is None:
            return False
        helper = ctx.functions.called(built, ctx.qname(built.func)) if type(built.func) is cst.Name else None
        calls = [r.value for r in ctx.values.returns_of(helper)] if helper is not None else [built]
        loaders = [ctx.values.constructed_by(c, c) if c is not None else None for c in calls]
        return bool(loaders) and all(c is not None and no_work_for_workers(ctx, c) == "device" for c in loaders)

    def loader_value(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Flow-sensitive (in source order): is ``expr``, where ``at`` stands, still the value a
        DataLoader loop produced (``x`` in ``for x, y in loader: x = x.to(device)``, read on
        the right-hand side), or a part of it (``batch[0]``, ``images, labels = batch``)?"""
        name = dotted(_batch_root(expr))
        if name is None or _depth > 3:
            return False
        tree = self.ctx.tree
        # a loop binds its target before its body runs; an assignment only after its value
        best = self.ctx.bindings.latest_before(
            self.ctx.bindings.lookup(name, at), at, lambda b: b.kind in ("for", "comp") or not tree.is_inside(at, b.node))
        if best is None:
            return False
        if best.kind in ("for", "comp"):
            return self._iterates_host_batches(best, _depth, flow=True)
        if best.kind == "assign" and best.value is not None:
            value = best.value
            if best.element is not None and isinstance(value, (cst.Tuple, cst.List)):
                if best.element >= len(value.elements):
                    return False
                value = value.elements[best.element].value
            if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)) and dotted(value) != name:
                return self.loader_value(value, best.node, _depth + 1)
        return False

    def _names_a_device(self, arg: cst.Arg, at: cst.CSTNode) -> bool:
        """Is a wrapper's argument a device: ``device=``, ``device``, ``"cuda"``, ``torch.device(...)``,
        ``x.device`` (a count such as ``print_freq``, bound to 50, is no CUDA ordinal here)?"""
        if arg.keyword is not None and looks_like_device_name(arg.keyword.value):
            return True
        value = arg.value
        if type(value) in (cst.Integer, cst.Name) and not looks_like_device_name(dotted(value) or ""):
            return False
        return self.device_value(value, at) == "device"  # type: ignore[attr-defined]

    def _unpacks_batch(self, binding, _depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
        value = binding.value
        if binding.element is not None and isinstance(value, (cst.Tuple, cst.List)):
            if binding.element >= len(value.elements):
                return False
            value = value.elements[binding.element].value
        if not isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)):
            return False  # a call may move it: `x = to_device(batch)`
        if dotted(value) == binding.name:
            return False
        return self.is_host_batch(value, binding.node, _depth + 1)


# Words of a wrapper's name that say it moves what it yields (`CUDAPrefetcher`, `DeviceLoader`, `to_gpu`).
_DEVICE_WORDS = ("prefetch", "device", "cuda", "gpu", "accelerat")

# Wrappers whose loaders move every batch to the device (Accelerate, Lightning Fabric).
_PLACING_LOADERS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders", "skip_first_batches"})
