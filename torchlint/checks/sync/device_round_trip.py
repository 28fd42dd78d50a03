"""A value moved to the host and back to the device (or the reverse) in one expression."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.host_tensors import FACTORIES
from torchlint.analysis.device_names import is_cpu_device
from torchlint.analysis.impact import Cost
from torchlint.analysis.uploads import KEEPS_THE_VALUE
from torchlint.checks.base import Check

# Host-side wrappers a round trip may pass through: `torch.from_numpy(x.cpu().numpy()).cuda()`.
_FROM_HOST = {"torch.from_numpy", "torch.as_tensor", "torch.tensor"}


class DeviceRoundTrip(Check):
    """`.cpu().cuda()`, `.cuda().cpu()`, `torch.from_numpy(x.numpy()).cuda()`: a move undone at once, or in the same pass after host work.

    A host buffer filled from a device tensor, then moved, is one too: `pad = torch.zeros(...)`, `pad[:, :n] = x`,
    `pad.to(x.device)`."""

    code = "TL112"
    name = "device-round-trip"
    cost = Cost.ROUND_TRIP
    message = "`{expr}` moves the value {first} and {second}: two copies and a sync {waste}"
    fix_hint = "Drop both moves and keep the value where it is; if a host-only step sits between them, do it on the device instead"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        trip = ctx.uploads.round_trips.get(id(node))
        if trip is not None:
            # `a = x.cpu().numpy()`, host work on `a`, `torch.from_numpy(a).to(d)`: the wait is at the first move
            # (back before it in the source: `xs.append(x.cpu())`, then `xs[-1].cuda()` at the top of the next pass)
            when = "at the loop's next pass" if ctx.tree.index(trip[1]) < ctx.tree.index(node) else "in the same pass"
            self.report(node, related=(trip[1],), expr=short_code(ctx.module, node, limit=60), first="to the host",
                        second=f"back to the device in `{short_code(ctx.module, trip[1], limit=60)}` {when}",
                        waste="that keeping the work on the device saves")
            return
        if ctx.qname(node.func) in FACTORIES and self._filled_from_device(node):
            return
        later = ctx.devices.move(node)
        if later is None:
            self._read_back(node)
            return
        earlier = self._previous_move(node.func.value)  # type: ignore[attr-defined]
        if earlier is None and later == "host":
            self._read_back(node)  # `lengths.cpu()` of an argument its caller just uploaded
            return
        if earlier is None or earlier == later:
            return
        if ctx.guards.export_only(node):
            return  # written for the ONNX exporter or a tracer (a constant it can fold), run once
        words = {"host": "to the host", "device": "to the device"}
        self.report(node, expr=short_code(ctx.module, node, limit=60), first=words[earlier], second=f"straight back {words[later]}",
                    waste="for nothing")

    def _filled_from_device(self, factory: cst.Call) -> bool:
        """``x_pad = torch.zeros(...)``, ``x_pad[:, :, :n] = x`` with ``x`` on the device, then
        ``x_pad.to(x.device)``: the activation copied down into a host buffer and back up."""
        ctx = self.ctx
        device = ctx.keyword(factory, "device")
        if device is not None and not is_cpu_device(device.value, ctx):
            return False  # a buffer made on the device: the fill copies on the device
        trip = ctx.uploads.filled_from_device(ctx.uploads.host_chain(factory)[0])
        if trip is None:
            return False
        fill, move = trip
        self.report(factory, related=(fill, move), hint=_FILLED_HINT, expr=short_code(ctx.module, factory, limit=60),
                    first=f"to the host (`{short_code(ctx.module, fill, limit=50)}` copies a device tensor into this host buffer)",
                    second=f"back to the device in `{short_code(ctx.module, move, limit=40)}`", waste="that a buffer made on the device saves")
        return True

    def _read_back(self, node: cst.Call) -> None:
        """``decode_lengths = (caption_lengths - 1).tolist()`` in a ``forward`` whose caller
        passes ``caplens.to(device)`` of a loader batch: uploaded there, read back here. Holds
        when the join finds a per-step call passing such a batch (``#uploaded:``)."""
        ctx = self.ctx
        if ctx.method_name(node) not in _HOST_READS and ctx.devices.move(node) != "host" or ctx.tree.enclosing_function(node) is None:
            return
        param = ctx.uploads.parameter_behind(node.func.value, node)  # type: ignore[attr-defined]
        if param is not None:
            self.report(node, condition=param.name, hint=_READ_BACK_HINT, expr=short_code(ctx.module, node, limit=60),
                        first=f"to the device (the caller uploads `{param.name.value}` from the host)", second="straight back to the host here",
                        waste="for nothing")

    def _previous_move(self, expr: cst.BaseExpression) -> str | None:
        """The nearest move inside ``expr``'s chain, through calls that keep the same value:
        dtype and shape changes, ``.detach()``, ``.numpy()`` and ``torch.from_numpy(...)``.
        A computation in between (``x.cuda().mm(w).cpu()``) is offloading, not a round trip."""
        ctx = self.ctx
        wrapped = False  # inside torch.from_numpy(...): a `.numpy()` there is a host value
        while True:
            if isinstance(expr, cst.Subscript):
                expr = expr.value
                continue
            if not isinstance(expr, cst.Call):
                return None
            if ctx.qname(expr.func) in _FROM_HOST and ctx.keyword(expr, "device") is None:
                positional = [a for a in expr.args if a.keyword is None and not a.star]
                if len(positional) != 1:
                    return None
                expr = positional[0].value
                wrapped = True
                continue
            if isinstance(expr.func, cst.Attribute):
                moved = ctx.devices.move(expr)
                if moved is not None:
                    return moved
                method = expr.func.attr.value
                if method == "numpy" and wrapped and not expr.args:
                    wrapped = False  # keep looking for the `.cpu()` that brought it there
                    found = self._previous_move(expr.func.value)
                    return found or "host"
                if method not in _SAME_VALUE and not ctx.devices.dtype_only_to(expr):
                    return None
                expr = expr.func.value
                continue
            return None


# Reads that copy a device tensor's value to the host.
_HOST_READS = frozenset({"tolist", "item", "numpy"})
_FILLED_HINT = ("Make the buffer on the device the value lives on (`torch.zeros(..., device=x.device, dtype=x.dtype)`, "
                "or `x.new_zeros(...)`): the fill then copies on the device, and neither copy nor the wait is left")
_READ_BACK_HINT = ("Keep the host copy the loader gave: pass it too (or instead) and read it on the host, "
                   "or keep this work on the device")
_SAME_VALUE = KEEPS_THE_VALUE - {"sort"}  # (a sort gives values and their order: no value to follow back)
