"""`.cpu()`, `.numpy(force=True)` or `.to("cpu")` inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.values import Kind
from torchlint.analysis.host_consumers import feeds_environment
from torchlint.analysis.impact import Cost
from torchlint.analysis.positions import plain_code
from torchlint.analysis.sync_ops import plainly_python
from torchlint.checks.base import Check


class DeviceToHostInLoop(Check):
    """`.cpu()`/`.numpy(force=True)`/`.to("cpu")` on a device value inside a hot loop."""

    code = "TL102"
    name = "device-to-host-in-loop"
    cost = Cost.HOST_COPY
    message = "`{call}` in {loop} copies a device value to the host and waits for it on every step"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Keep per-step results on the device (e.g. `torch.cat` them) and move them to the host once after the loop (or every N steps)"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        method = ctx.method_name(node)
        if method == "numpy":
            if not self._numpy_of_device_value(node):
                return
        elif method not in ("cpu", "to") or ctx.devices.move(node) != "host":
            return
        loop = ctx.loops.hot_loop(node)
        if loop is None or ctx.devices.host_only(node):
            return
        if id(node) in ctx.uploads.round_trips:
            return  # moved back to the device in the same pass: TL112 reports the round trip
            return
        if ctx.guards.rare(node, stop=loop):
            return  # every N steps, or once
        receiver = node.func.value  # type: ignore[attr-defined]
        if ctx.values.kind(receiver, node) in (Kind.HOST, Kind.NUMPY):
            return  # not a tensor
        if method != "numpy" and ctx.devices.moved_to_host(receiver, node):
            return  # already on the host: the earlier move is the finding
        if ctx.devices.is_host_batch(receiver, node) or ctx.devices.loader_value(receiver, node):
            return  # a batch straight from the DataLoader is still on the host
        if method == "numpy" and ctx.guards.device_branch(node, stop=loop):
            return  # `t.numpy() if not use_cuda else t.cpu().numpy()`: the host-only path
        if feeds_environment(ctx, node):
            return  # `envs.step(action.cpu().numpy())`: the environment runs on the host and needs it
        arguments = ", ".join(plain_code(ctx.module, a).strip().rstrip(",") for a in node.args)
        self.report(node, call=f"{short_code(ctx.module, receiver)}.{method}({arguments})")

    def visit_Assign(self, node: cst.Assign) -> None:
        """``host[b, i] = scores[b, j]``: an element of a device tensor written into a host tensor
        is a copy to the host that waits for the device (kospeech's beam search, per beam per row
        per decoded token)."""
        ctx = self.ctx
        if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Subscript:
            return
        target = node.targets[0].target
        base = target.value  # type: ignore[attr-defined]
        while type(base) is cst.Subscript:
            base = base.value
        value = node.value
        if type(value) is not cst.Subscript or plainly_python(value):
            return  # (a whole tensor copied in: rare and sized; a Python value: nothing on the device)
        loop = ctx.loops.hot_loop(node)
        if loop is None or ctx.devices.host_only(node) or ctx.guards.rare(node, stop=loop):
            return  # not per step, a host-only file, or every N steps
        if not ctx.devices.moved_to_host(base, node):
            return  # not known to be a host tensor: a write on the device copies nothing
        if not ctx.syncs.device_tensor(value, node) or ctx.devices.moved_to_host(value, node):
            return  # not known to be on the device
        self.report(node, call=short_code(ctx.module, node, limit=70), hint=_ELEMENT_HINT)

    def _numpy_of_device_value(self, node: cst.Call) -> bool:
        """``t.numpy(force=True)`` copies from the device itself. A bare ``t.numpy()``
        raises on a device tensor, so where it runs the value is already on the host."""
        force = self.ctx.keyword(node, "force")
        return force is not None and isinstance(force.value, cst.Name) and force.value.value == "True"


_ELEMENT_HINT = ("Pick the elements on the device in one indexed op (`torch.gather(current_vs, 1, ids)`, "
                 "`beams[torch.arange(b)[:, None], prev]`) and keep the result there: each element written into a "
                 "host tensor is its own copy and wait")
