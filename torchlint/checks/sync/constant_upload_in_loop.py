"""The same host data, or the tokens a decode loop just read back, copied to the device on every step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.cache_hits import NEVER_HIT_WORDS
from torchlint.analysis.context import short_code
from torchlint.analysis.decoding import grown_names
from torchlint.analysis.host_attributes import moved_attribute, rebound_in
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Repeat
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check, Group


class ConstantUploadInLoop(Check):
    """`torch.from_numpy(CONST).to(device)`, `torch.tensor(self.weights, device=d)`: a constant uploaded inside a hot loop."""

    code = "TL113"
    name = "constant-upload-in-loop"
    cost = Cost.UPLOAD
    message = "`{expr}` in {loop} {copies}, and the host waits for each copy"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Upload it once: move it to the device before the loop, or register it as a buffer (`self.register_buffer(...)`) so it moves with the model"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        data = ctx.uploads.uploaded_data(node)
        if data is None:
            if not self._memoised(node):
                self._other_objects(node)
            return
        if not ctx.syncs.in_step(node):
            return
        listed = data.value if type(data) is cst.Subscript else data
        loop = ctx.loops.statement_loop(node)
        if loop is not None and dotted(listed) in grown_names(ctx, loop) and ctx.syncs.holds_device_tensors(listed, node):
            # `torch.tensor(actions)` with `actions += [sampled_action]` on each pass: the factory reads each device tensor
            # of the list back, one wait per element, before it uploads them again. (Only a list the loop grows: a list
            # made in the step, `[reward, reward * 0.5]`, is the step's own data, a few items whatever they hold.)
            self.report(node, hint=_DEVICE_LIST_HINT, expr=short_code(ctx.module, node, limit=60), itself=Repeat("element"), cost=Cost.SYNC,
                        copies=_DEVICE_LIST_WORDS.format(items=short_code(ctx.module, listed, limit=30)))
            return
        if self._never_cached(node):
            return
        fed = ctx.uploads.decoded_feed(data, node, ctx.loops.local_hot_loop(node))
        if fed is not None:
            # `torch.LongTensor([inputs[-1]]).to(device)`: the token was on the device a moment ago
            self.report(node, hint=_FEED_HINTS[fed], expr=short_code(ctx.module, node, limit=60), copies=_FEED_WORDS[fed])
            return
        condition = None
        if not ctx.uploads.same_every_step(data, node, ctx.loops.hot_loop(node)):
            condition = ctx.uploads.constant_parameter(data, node) if ctx.loops.local_hot_loop(node) is None else None
            if condition is None:
                return  # data of this step: the copy is the step's input
            # `def extract(arr, t): torch.from_numpy(arr).to(t.device)`: holds when a per-step
            # caller passes a constant (`extract(self.alphas, t)`), which the join decides
        in_class = ctx.tree.enclosing_class(node) is not None and ctx.tree.enclosing_function(node) is not None
        hint = "" if in_class or condition is not None else "Upload it once, before the loop, and reuse the device tensor"
        # (a few numbers, `torch.tensor(0., device=d)`, `torch.tensor([0.5, 0.5]).to(d)`: the blocking copy's wait is
        # its cost, tiered as a small upload is; a table's bytes, `torch.tensor(self.weights)`, cost besides)
        self.report(node, hint=hint, condition=condition, expr=short_code(ctx.module, node, limit=60),
                    cost=Cost.SMALL_UPLOAD if _few_numbers(listed) else None,
                    copies="copies the same host data to the device on every step")

    def _never_cached(self, node: cst.Call) -> bool:
        """``mel_basis[str(fmax) + '_' + str(y.device)] = torch.from_numpy(mel).to(y.device)`` under
        ``if fmax not in mel_basis:``: meant to be made once per key, but the key tested is never the
        key stored, so the same data is built and copied on every call (reported, True)."""
        ctx = self.ctx
        keys = ctx.guards.never_hit(node)
        if keys is None:
            return False
        tested, stored = (short_code(ctx.module, k, limit=40) for k in keys)
        self.report(node, hint=_NEVER_HIT_HINT.format(tested=tested), expr=short_code(ctx.module, node, limit=60),
                    copies=_NEVER_HIT_WORDS.format(words=NEVER_HIT_WORDS.format(tested=tested, stored=stored)))
        return True

    def _other_objects(self, node: cst.Call) -> None:
        """``sde.alphas.to(t.device)`` in a step: another object's attribute, which the join finds a host tensor where a
        class that object may be keeps one there, set only where it is built (score_sde's ``VPSDE.alphas``, moved by
        ``LangevinCorrector.update_fn`` in another file on every denoising step)."""
        ctx = self.ctx
        moved = moved_attribute(ctx, node)
        if moved is None or not ctx.syncs.in_step(node):
            return
        hot = ctx.loops.hot_loop(node)
        if type(hot) in (cst.For, cst.While) and rebound_in(ctx, moved, hot):  # type: ignore[arg-type]
            return  # (an object the loop rebinds: each pass's own)
        self.report(node, hint="", expr=short_code(ctx.module, node, limit=60), host_attribute=moved,
                    copies="copies the same host data to the device on every step")

    def _memoised(self, node: cst.Call) -> bool:
        """``mask.type_as(query)`` / ``mask.to(x.device)`` of what a memoised helper made on the host
        (``mask, start_mask = causal_mask(h * w)`` with ``@lru_cache``): the same data, copied on every call."""
        ctx = self.ctx
        if type(node.func) is not cst.Attribute or not (ctx.devices.move(node) == "device" or ctx.uploads.moves_like(node)) \
                or not ctx.syncs.in_step(node):
            return False  # (no move to the device, or none a step runs)
        function = ctx.uploads.memoised_host(node.func.value, node)
        if function is None:
            return False  # not a memoised host tensor: a step's own data, or a cache built on the device already
        self.__dict__.setdefault("_memoised_moves", []).append((node, function))
        return True

    def finish(self) -> None:
        """The moves of one memoised helper's tensors in one function (``mask`` and ``start_mask`` of one
        ``causal_mask(n)``) are one fix's (keep the device copy): one finding, its other lines related."""
        ctx = self.ctx
        groups: dict[tuple[int, str], list[cst.Call]] = {}
        for node, function in self.__dict__.get("_memoised_moves", []):
            groups.setdefault((id(ctx.tree.enclosing_function(node)), function.name.value), []).append(node)
        for (key, name), moves in groups.items():
            group = Group((key, name), f"tensor of `{name}()`", _MEMOISED_GROUP, _MEMOISED_HINT.format(function=name)) \
                if len(moves) > 1 else None
            for node in moves:
                self.report(node, hint=_MEMOISED_HINT.format(function=name), expr=short_code(ctx.module, node, limit=60),
                            copies=_MEMOISED_WORDS.format(function=name), group=group)


# At most this many numbers written out in the code make a small tensor (a scalar, a pair of weights, a short table).
_FEW_NUMBERS = 64


def _few_numbers(data: cst.BaseExpression, budget: list[int] | None = None) -> bool:
    """Is ``data`` a number literal, or a list or tuple of them (nested too), at most 64 in all?"""
    budget = [_FEW_NUMBERS] if budget is None else budget
    if type(data) in (cst.Integer, cst.Float) or type(data) is cst.UnaryOperation and type(data.expression) in (cst.Integer, cst.Float):
        budget[0] -= 1
        return budget[0] >= 0
    return type(data) in (cst.List, cst.Tuple) and bool(data.elements) \
        and all(type(e) is cst.Element and _few_numbers(e.value, budget) for e in data.elements)  # type: ignore[union-attr]


# A cache whose test never finds the key it stores (hifi-gan's `mel_basis`): its upload runs on every call.
_NEVER_HIT_WORDS = "copies the same host data to the device on every call: {words}"
_NEVER_HIT_HINT = ("Test the key you store: build it once (`key = ...`), then `if key not in cache: cache[key] = ...` and "
                   "read `cache[key]`; as written, `{tested}` is never found, so the data is built and copied each time")

# A memoised helper's host tensor moved on every call (VQ-VAE-2's `causal_mask`).
_MEMOISED_WORDS = ("copies the same host tensor, which `{function}()` builds on the host and memoises, to the device on "
                   "every call")
_MEMOISED_GROUP = " ({count} of its tensors{lines}, each copied on every call)"
_MEMOISED_HINT = ("Keep the device copy instead: register it as a buffer (`self.register_buffer(\"mask\", {function}(n), "
                  "persistent=False)`), or memoise `{function}()` by device too and build it there")

# What a decode loop uploads of the tokens it decoded (uploads.decoded_feed), and how to keep them on the device.
_FEED_WORDS = {
    "last": "builds a host tensor of the token it just decoded and copies it back to the device for every decoded token",
    "prefix": "rebuilds the decoded sequence on the host, one token longer each time, and copies all of it to the device for every decoded token",
}
_FEED_HINTS = {
    "last": "Feed the model's own pick back: the `argmax` (or sampled) token is already a device tensor; "
            "read it to the host only for the stop test, or every few tokens",
    "prefix": "Keep the sequence on the device and append each new token with `torch.cat` (the `argmax` result is already "
              "there); read tokens to the host only for the stop test, or every few tokens",
}

# A list of device tensors (`actions += [sampled_action]`) made a tensor on the host: one read per element.
_DEVICE_LIST_WORDS = ("reads back each element of `{items}` (one read per element of a list of device tensors, as many as "
                      "the loop has added) to copy them to the device again")
_DEVICE_LIST_HINT = ("Keep the items on the device and join them there (`torch.cat(items)`, or write each into a preallocated "
                     "device tensor), or read each one once as it is added (`items.append(x.item())`)")
