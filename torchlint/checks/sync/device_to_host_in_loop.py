"""`.cpu()`, `.numpy(force=True)` or `.to("cpu")` inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.values import Kind
from torchlint.analysis.host_consumers import feeds_environment, feeds_priorities
from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.sync_ops import plainly_python
from torchlint.analysis.inline_lambdas import host_copy
from torchlint.checks.base import Check, Group


class DeviceToHostInLoop(Check):
    """`.cpu()`/`.numpy(force=True)`/`.to("cpu")` on a device value inside a hot loop."""

    code = "TL102"
    name = "device-to-host-in-loop"
    cost = Cost.HOST_COPY
    message = "`{call}` in {loop} {what} on every step"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Keep per-step results on the device (e.g. `torch.cat` them) and move them to the host once after the loop (or every N steps)"

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._through_lambdas: list[tuple[cst.Call, str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        method = ctx.method_name(node)
        copied = host_copy(ctx, node) if type(node.func) is cst.Name else None
        if copied is not None:
            if self._copies(node, copied[0], "cpu"):
                self._through_lambdas.append((node, copied[1]))
            return
        if method == "numpy":
            if not self._numpy_of_device_value(node):
                return
        elif method not in ("cpu", "to") or ctx.devices.move(node) != "host":
            return
        receiver = node.func.value  # type: ignore[attr-defined]
        if self._copies(node, receiver, method):  # type: ignore[arg-type]
            arguments = ", ".join(plain_code(ctx.module, a).strip().rstrip(",") for a in node.args)
            call = f"{short_code(ctx.module, receiver)}.{method}({arguments})"
            if method != "numpy" and self._module(receiver, node):
                # (a module offloaded between steps, SV4D's `unload_module_gpu(model)`: its weights' bytes, not a read)
                self.report(node, call=call, what=_MODULE_WORDS, cost=Cost.MODULE_OFFLOAD, hint=_MODULE_HINT)
                return
            # (a prioritised replay buffer's priorities, `mem.update_priorities(idxs, loss.cpu().numpy())`: its NumPy sum tree needs them)
            # (`wav.cpu()` in `write(wav)`: no copy where every call in the project passes a host tensor, the join knows)
            back = ctx.uploads.result_sent_back(node)
            if back is not None:  # (VITS' `maximum_path`: the host's result made from the copy, uploaded: one excursion, one fix)
                self.report(node, call=call, what=_BACK_WORDS.format(upload=short_code(ctx.module, back, limit=70)), related=(back,),
                            hint=_BACK_HINT, unless_host=ctx.devices.host_parameter(receiver, node))
                return
            self.report(node, call=call, what=_COPY_WORDS, cost=Cost.NEEDED_READ if feeds_priorities(ctx, node) else None,
                        unless_host=ctx.devices.host_parameter(receiver, node))

    def _copies(self, node: cst.Call, receiver: cst.BaseExpression, method: str) -> bool:
        """Does ``node`` copy ``receiver``, a device value, to the host on every step?"""
        ctx = self.ctx
        loop = ctx.loops.hot_loop(node)
        if loop is None or ctx.devices.host_only(node):
            return False
        if id(node) in ctx.uploads.round_trips:
            return False  # moved back to the device in the same pass: TL112 reports the round trip
        if ctx.guards.rare(node, stop=loop):
            return False  # every N steps, or once
        if ctx.values.kind(receiver, node) in (Kind.HOST, Kind.NUMPY):
            return False  # not a tensor
        if method != "numpy" and ctx.devices.moved_to_host(receiver, node):
            return False  # already on the host: the earlier move is the finding
        if ctx.devices.is_host_batch(receiver, node) or ctx.devices.loader_value(receiver, node):
            return False  # a batch straight from the DataLoader is still on the host
        if method == "numpy" and ctx.guards.device_branch(node, stop=loop):
            return False  # `t.numpy() if not use_cuda else t.cpu().numpy()`: the host-only path
        # `envs.step(action.cpu().numpy())`: the environment runs on the host and needs it
        return not feeds_environment(ctx, node)

    def finish(self) -> None:
        """The reads through a module-level lambda (``to_np(torch.mean(loss))``), one finding per
        call; those of one step through one lambda are one fix's (keep the metrics on the device,
        read them once), one finding repeated once per call in its step (``Group``)."""
        ctx = self.ctx
        groups: dict[tuple[int, str], list[cst.Call]] = {}
        for node, name in self._through_lambdas:
            step = ctx.loops.local_hot_loop(node) or ctx.tree.enclosing_function(node)
            groups.setdefault((id(step), name), []).append(node)
        for (_, name), calls in groups.items():
            for node in calls:
                call = short_code(ctx.module, node)
                if len(calls) < 2:
                    self.report(node, call=call, what=_COPY_WORDS)
                    continue
                self.report(node, call=call, what=_COPY_WORDS, group=Group((id(calls[0]), name), f"read through `{name}`", _GROUP_WORDS.format(name=name),
                                                         _GROUP_HINT.format(name=name)))

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
        self.report(node, call=short_code(ctx.module, node, limit=70), what=_COPY_WORDS, hint=_ELEMENT_HINT)

    def _module(self, receiver: cst.BaseExpression, node: cst.Call) -> bool:
        """Is ``receiver`` a module: of that kind, or a bare name or attribute named for one
        (``model``, ``self.unet``, a helper's ``module`` parameter), moved whole?"""
        if len(node.args) > 1 or self.ctx.method_name(node) == "cpu" and node.args:
            return False  # `.to("cpu", dtype)`, `.cpu(memory_format=...)`: a tensor's options
        if self.ctx.values.kind(receiver, node) is Kind.MODULE:
            return True
        name = (dotted(receiver) or "").rpartition(".")[2].lower()
        # (a tensor is rarely named so: `model`, `unet`, `denoiser`, `text_encoder`, `module`)
        return name in _MODULE_NAMES or name.endswith(("_model", "_module", "_encoder", "_decoder", "_net"))

    def _numpy_of_device_value(self, node: cst.Call) -> bool:
        """``t.numpy(force=True)`` copies from the device itself. A bare ``t.numpy()``
        raises on a device tensor, so where it runs the value is already on the host."""
        force = self.ctx.keyword(node, "force")
        return force is not None and isinstance(force.value, cst.Name) and force.value.value == "True"


_COPY_WORDS = "copies a device value to the host and waits for it"
# (the second leg: what the host computes from the copy goes back to the device in the same pass)
_BACK_WORDS = "copies a device value to the host and waits for it, and what the host computes from it goes back to the device (`{upload}`)"
_BACK_HINT = ("Do the host step on the device (a GPU version of it), or, where it must run on the host, copy both ways through "
              "pinned buffers with `non_blocking=True`")
_MODULE_WORDS = "copies a whole module's weights to the host"
_MODULE_NAMES = frozenset({"model", "module", "unet", "denoiser", "encoder", "decoder", "vae", "net", "network", "backbone", "conditioner"})
_MODULE_HINT = ("Keep the module on the device for the whole loop if it fits (offload once before and after it), or move "
                "weights with `non_blocking=True` from pinned memory, overlapped with the other module's work (accelerate's "
                "`cpu_offload` hooks): each move here sends its weights over the bus and back every step")


_ELEMENT_HINT = ("Pick the elements on the device in one indexed op (`torch.gather(current_vs, 1, ids)`, "
                 "`beams[torch.arange(b)[:, None], prev]`) and keep the result there: each element written into a "
                 "host tensor is its own copy and wait")


_GROUP_WORDS = " ({{count}} reads through `{name}` in this step{{lines}}, each a copy and a wait)"
_GROUP_HINT = ("Keep the step's metrics on the device (stack them, or `torch.stack([...]).cpu()` once) and read "
               "them together once per step, or every N steps: each `{name}(...)` is its own copy and wait")
