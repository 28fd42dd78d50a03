"""`.item()` or `.tolist()` on a tensor inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.host_returns import element_of_elsewhere, host_element_here, returned_key
from torchlint.analysis.context import short_code
from torchlint.analysis.values import Kind
from torchlint.analysis.guard_sanity import only_reports_bad_values
from torchlint.analysis.element_reads import ELEMENT_HINT, FORWARD_HINT, TABLE_HINT, indexed_table, walked_tensor
from torchlint.analysis.host_consumers import feeds_environment, feeds_priorities, logged_by_framework
from torchlint.analysis.impact import Cost
from torchlint.analysis.sync_ops import library_read, plainly_python
from torchlint.checks.base import Check

_SCALAR_READS = {"item", "tolist"}


class ScalarSyncInLoop(Check):
    """`.item()`/`.tolist()` on a tensor inside a hot loop; a tensor test or a value-sized tensor repeated within a step, or a decode loop's stop check."""

    code = "TL101"
    name = "scalar-sync-in-loop"
    cost = Cost.SYNC
    message = "`{call}` in {loop} makes the host wait for the device on every step"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Accumulate with `.detach()` on the device and read the value once after the loop (or every N steps)"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        self._repeated_sync(node, node, _SIZE_HINT)
        method = ctx.method_name(node)
        library = library_read(ctx, node) if method not in _SCALAR_READS else None
        if method == "add_scalar":
            library = self._logged_tensor(node)
        if library is None and (method not in _SCALAR_READS or node.args):
            return
        loop = ctx.loops.hot_loop(node)
        if loop is None or ctx.devices.host_only(node):
            return  # not per step, or a file whose tensors never leave the host
        if ctx.guards.rare(node, stop=loop):
            return  # logging every N steps is fine
        # `unpad_input(q, mask)`: the library reads the mask as `.item()` would
        receiver = library[0] if library is not None else node.func.value  # type: ignore[attr-defined]
        if library is not None and plainly_python(receiver):
            return  # `pack_padded_sequence(x, [3, 2])`: no tensor read
        if library is not None and host_element_here(ctx, receiver, node):
            return  # `_, lengths = decoder(x, caplens)`, whose `forward` returns `caplens.tolist()` there: a list, no read
        if ctx.values.kind(receiver, node) in (Kind.HOST, Kind.NUMPY):
            return  # not a tensor: no device to wait for
        if ctx.devices.is_host_batch(receiver, node) or ctx.devices.loader_value(receiver, node):
            return  # a batch straight from the DataLoader is still on the host
        if ctx.devices.moved_to_host(receiver, node):
            return  # built on the host (`torch.randint(0, n, (1,))`) or moved there already
        if feeds_environment(ctx, node):
            return  # `env.step(q.argmax().item())`: the environment runs on the host and needs it
        if library is None and feeds_priorities(ctx, node):
            # `mem.update_priorities(idxs, td.abs().tolist())`: the buffer's NumPy sum tree needs it on the host
            self.report(node, call=f"{short_code(ctx.module, node.func.value)}.{method}()", cost=Cost.NEEDED_READ)  # type: ignore[attr-defined]
            return
        if library is not None:
            hint = _WRITER_HINT if method == "add_scalar" else _LIBRARY_HINT.format(reads=library[1])
            # (unpacked from what another file's model returns: the join knows whether that element is a host list)
            elsewhere = element_of_elsewhere(ctx, receiver, node)
            self.report(node, call=short_code(ctx.module, node, limit=60), hint=hint,
                        unless_host_return=elsewhere[0] if elsewhere else None, returned_element=elsewhere[1] if elsewhere else -1)
            return
        # `self.out_dim.item()` with `self.out_dim = out_dim` in `__init__`: host if every construction passes a host tensor
        # `wav.max().item()` in `write(wav)`: host if every call in the project passes a host tensor
        # `char = tokenizer.sample_logits(out)` (another file's method): host where everything it may run returns host values
        self.report(node, call=f"{short_code(ctx.module, receiver)}.{method}()",
                    unless_host=ctx.devices.constructor_parameter(receiver) or returned_key(ctx, receiver, node)
                    or ctx.devices.host_parameter(receiver, node),
                    hint=self._hint(node, receiver), unless_host_return=ctx.devices.result_of_elsewhere(receiver, node))

    def _logged_tensor(self, node: cst.Call) -> tuple[cst.BaseExpression, str] | None:
        """``writer.add_scalar("loss", loss, step)`` with ``loss`` a device tensor: TensorBoard's
        writer turns it into a number (``.item()`` inside), a read as ``loss.item()`` is."""
        value = node.args[1] if len(node.args) >= 2 else None
        if value is None or value.keyword is not None or value.star or plainly_python(value.value):
            return None  # `add_scalar("loss", loss.item(), step)`: a number already
        if self.ctx.values.kind(value.value, node) is not Kind.TENSOR and not self.ctx.syncs.device_tensor(value.value, node):
            return None  # a Python number, or not known as a tensor (the checks after this one place it on the host or not)
        return value.value, "the tensor's value"

    def _hint(self, node: cst.Call, receiver: cst.BaseExpression) -> str:
        """The fix where the read's shape says more than "accumulate on the device"."""
        ctx = self.ctx
        walked = walked_tensor(ctx, receiver, node)
        if walked is not None:
            return ELEMENT_HINT.format(tensor=short_code(ctx.module, walked, limit=40))
        table = indexed_table(ctx, receiver, node)
        if table is not None:
            return TABLE_HINT.format(table=table)
        if logged_by_framework(ctx, node):
            return _LOGGED_HINT.format(value=short_code(ctx.module, receiver, limit=40))
        function = ctx.tree.enclosing_function(node)
        owner = ctx.tree.enclosing_class(node)
        if function is not None and function.name.value == "forward" and owner is not None and ctx.is_module_class(owner.name.value):
            return FORWARD_HINT
        return ""

    def visit_If(self, node: cst.If) -> None:
        # `if (idx_next == eos).all(): break` in a decode loop reads a scalar as `.item()`
        # would, once per decoded token; elsewhere a tensor condition is TL104's (opt-in)
        # unless it repeats within the step.
        if self.ctx.syncs.per_token_stop(node):
            self.report(node.test, hint=_STOP_HINT, call=short_code(self.ctx.module, node.test))
        else:
            # `if torch.min(y) < -1.: print(...)`: a sanity check whose branch only reports changes nothing
            # the step computes, so its read is waste wherever it runs, once per step too (not TL104's choice)
            sanity = only_reports_bad_values(node)
            self._repeated_sync(node, node.test, _SANITY_HINT if sanity else _TEST_HINT, once_too=sanity)

    def visit_While(self, node: cst.While) -> None:
        self._repeated_sync(node, node.test, _TEST_HINT)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._repeated_sync(node, node.test, _TEST_HINT)

    def visit_Assert(self, node: cst.Assert) -> None:
        self._repeated_sync(node, node.test, _TEST_HINT)

    def visit_CompIf(self, node: cst.CompIf) -> None:
        # `[i for i, w in enumerate(words) if w != end]`: the test runs once per element
        self._repeated_sync(node, node.test, _TEST_HINT)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._repeated_sync(node, node, _SIZE_HINT)

    def _repeated_sync(self, statement: cst.CSTNode, node: cst.BaseExpression, hint: str, once_too: bool = False) -> None:
        """A tensor's truth value (TL104's pattern) or a tensor sized by its values (TL106's)
        where it runs more than once per step: a sync each time, before more device work.
        ``once_too``: once per step as well (a sanity check that only reports)."""
        syncs = self.ctx.syncs
        device_params: tuple[str, ...] = ()
        # a value-sized op: the node is its own statement here
        if statement is node and not syncs.sized_by_values(node):  # type: ignore[arg-type]
            param = syncs.uploaded_mask(node) if type(node) is cst.Subscript else None
            if param is not None:  # `[y[y != pad] for y in padded]`, `padded` uploaded by the step
                self.report(node, hint=hint, condition=param.name, call=short_code(self.ctx.module, node, limit=60), repeated=True)
                return
            # `edge_index[:, edge_type == i]` of parameters: holds where every caller passes device tensors
            device_params = syncs.mask_parameters(node) if type(node) is cst.Subscript else ()
            if not device_params:
                return
        if statement is not node:
            if not syncs.condition_runs(statement, node):
                return  # not per step here (or rare): no read, whatever the callers pass
            if not syncs.reads_truth(node, node):
                # a test of a parameter's value: holds where every caller passes a device tensor
                device_params = syncs.device_parameters(node, lambda: syncs.condition_read(statement, node))
                if not device_params:
                    return
        repeated = None if once_too else syncs.repeated_in_step(node)
        if repeated is False:
            return  # once per step: TL104/TL106 (opt-in) report it
        # Where the join decides, this finding holds only if the line repeats within the step.
        # (`assert wav.isfinite().all()` in `write(wav)`: no wait where every call in the project passes a host tensor, the join knows)
        self.report(node, hint=hint, call=short_code(self.ctx.module, node, limit=60),
                    repeated=True if repeated is None and not once_too else None, if_device=device_params,
                    unless_host="" if device_params else self.ctx.devices.host_parameter(node, node))


_LOGGED_HINT = ("Pass the tensor itself (`{value}`): Lightning keeps it on the device and reads it only when it writes "
                "to the logger (every `log_every_n_steps`, 50 by default); `prog_bar=True` reads it at each progress-bar refresh")
_LIBRARY_HINT = ("The call reads {reads} on the host: compute it once per step and pass it on (the unpadding "
                 "indices and lengths of one mask serve every layer), or give the size it would read")
_WRITER_HINT = ("TensorBoard's writer reads the tensor's value (`.item()` inside): log every N steps, or accumulate "
                "`loss.detach()` on the device and log the mean every N steps; a number already read in the step "
                "(`loss.item()` for the log line) costs nothing more to pass")
_TEST_HINT = ("Keep the decision on the device (`torch.where`, masking), check it once after the loop, "
              "or drop the check (`assert not x.isnan().any()`) outside debugging")
_SANITY_HINT = ("The check only reports: drop it from the step, run it every N steps (`if step % 100 == 0`), or keep it on "
                "the device (`torch._assert_async((y >= -1).all())`) so the host never waits for it")
_SIZE_HINT = ("Sort or group once per step and slice by counts read once, or keep shapes static "
              "(`torch.where(mask, x, 0)`, `index_add_`/`scatter` over all rows)")
_STOP_HINT = ("Test the stop condition every N tokens (`if step % 16 == 0 and done.all(): break`), "
              "or keep a `done` mask on the device and decode to the length limit")
