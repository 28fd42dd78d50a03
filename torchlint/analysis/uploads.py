"""Tensors made on the host and then copied to the device: where a host tensor comes from,
how far it travels on the host (arithmetic, views, torch functions, a few statements,
a helper's return), and the move that uploads it. Shared by the create-then-move,
constant-upload and host-index rules.

This module holds uploads of data that does not change between steps and round trips through the host;
where a host tensor comes from is ``host_tensors.py``, how far it travels and its move ``host_moves.py``,
indexes built on the host ``host_indexes.py``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.bounded import Bounded
from torchlint.analysis.decoding import grown_names
from torchlint.analysis.device_reach import DTYPE_CONVERSIONS
from torchlint.analysis.host_indexes import HostIndexes, builds_the_object
from torchlint.analysis.host_moves import HostMoves
from torchlint.analysis.host_tensors import ARITHMETIC, FROM_DATA, ONE_TENSOR_FUNCTIONS, PLACE_KEEPING, HostTensors
from torchlint.analysis.loop_invariants import attribute_unchanged
from torchlint.analysis.names import dotted
from torchlint.analysis.results_back import ResultsBack

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class Uploads(HostTensors, HostMoves, HostIndexes, ResultsBack):
    """Host tensors and their uploads, for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._depth = Bounded()  # helpers that return other helpers' results
        self._asking: set[int] = set()  # the helpers whose returns are being read

    # --- uploads of data that does not change between steps ------------------------------
    def uploaded_data(self, call: cst.Call) -> cst.BaseExpression | None:
        """The host data ``call`` copies to the device: ``torch.tensor(data, device=d)``,
        ``torch.from_numpy(data).to(d)``, ``torch.as_tensor(data).float().cuda()``."""
        ctx = self.ctx
        qualified = ctx.qname(call.func)
        if qualified in FROM_DATA:
            device = ctx.keyword(call, "device")
            if device is None or ctx.devices.device_value(device.value, call) != "device":
                return None
            return call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None
        if qualified is not None or ctx.devices.move(call) != "device":
            return None
        if self.host_attribute(call.func.value):  # type: ignore[attr-defined]
            return call.func.value  # type: ignore[attr-defined]
        made = self.made_on_host(call.func.value, call)  # type: ignore[attr-defined]
        if made is None or ctx.qname(made.func) not in FROM_DATA or not made.args or made.args[0].keyword is not None:
            return None
        return made.args[0].value

    def host_attribute(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Is ``expr`` ``self.betas`` that only the methods building the object set, each time to a
        tensor made on the host (``torch.linspace(b0, b1, n)``, ``1. - self.betas``, ``torch.cumprod(
        self.alphas, 0)``)? A plain attribute, no buffer: moving the object leaves it on the host."""
        ctx = self.ctx
        name = dotted(expr) if type(expr) is cst.Attribute else None
        if name is None or not name.startswith("self.") or name.count(".") != 1 or depth > 4:
            return False
        if expr.attr.value in self.attributes_set_elsewhere:
            return False  # `sde.betas = sde.betas.to(device)` outside the class: it may live on the device
        bound = ctx.bindings.lookup(name, expr)
        return bool(bound) and all(
            b.kind == "assign" and b.element is None and b.value is not None
            and builds_the_object(ctx.tree.enclosing_function(b.node)) and self._host_valued(b.value, b.node, depth + 1)
            for b in bound)

    def _host_valued(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """A tensor made on the host, or arithmetic, a place-keeping method or a one-tensor torch
        function of host attributes (``1. - self.discrete_betas``)."""
        ctx = self.ctx
        if self.made_on_host(value, at) is not None:  # type: ignore[attr-defined]
            return True
        value_type = type(value)
        if value_type is cst.Attribute:
            return self.host_attribute(value, depth)
        if value_type is cst.UnaryOperation:
            return self._host_valued(value.expression, at, depth)
        if value_type is cst.BinaryOperation and type(value.operator) in ARITHMETIC:
            sides = (value.left, value.right)
            hosted = [self._host_valued(side, at, depth) for side in sides]
            return any(hosted) and all(h or self.python_number(side, at) for h, side in zip(hosted, sides))  # type: ignore[attr-defined]
        if value_type is cst.Call and value.args and value.args[0].keyword is None and not value.args[0].star:
            if ctx.qname(value.func) in ONE_TENSOR_FUNCTIONS:
                return self._host_valued(value.args[0].value, at, depth)  # `torch.cumprod(self.alphas, dim=0)`
        if value_type is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in PLACE_KEEPING \
                and ctx.qname(value.func) is None:
            return self._host_valued(value.func.value, at, depth)
        return False

    @cached_property
    def attributes_set_elsewhere(self) -> frozenset[str]:
        """The attribute names this file assigns on an object other than ``self`` (``sde.betas = ...``)."""
        names = set()
        for target in self.ctx.tree.nodes(cst.AssignTarget):
            if type(target.target) is cst.Attribute and not (type(target.target.value) is cst.Name and target.target.value.value == "self"):
                names.add(target.target.attr.value)
        return frozenset(names)

    def same_every_step(self, data: cst.BaseExpression, at: cst.CSTNode, step: cst.CSTNode | None) -> bool:
        """Does ``data`` hold the same value on every step: a literal of numbers, a module
        constant, an attribute set only where the object is built (``self.window`` from
        ``__init__``), or a name bound before the step loop ``step`` and never inside it?"""
        ctx = self.ctx
        data_type = type(data)
        if data_type in (cst.Integer, cst.Float) or data_type is cst.UnaryOperation and type(data.expression) in (cst.Integer, cst.Float):
            return True
        if data_type in (cst.List, cst.Tuple):
            return bool(data.elements) and all(self.same_every_step(e.value, at, step) for e in data.elements)
        if data_type is cst.BinaryOperation:  # `1.0 - self.alphas_cumprod`
            return self.same_every_step(data.left, at, step) and self.same_every_step(data.right, at, step)
        name = dotted(data) if data_type in (cst.Name, cst.Attribute) else None
        if name is None or ctx.qname(data) is not None:
            return False
        bound = ctx.bindings.lookup(name, at)
        loop = step if type(step) in (cst.For, cst.While) else None
        if loop is not None and bound and all(b.kind == "param" for b in bound):
            return True  # a parameter of the function that runs the loop: the same on every pass
        if loop is not None and data_type is cst.Attribute and name.count(".") == 1 and not name.startswith("self."):
            return attribute_unchanged(ctx, data, loop)  # `obs_rms.mean`, `obs_rms.update(...)` only after the loop
        if not bound or any(b.kind not in ("assign", "augassign") for b in bound):
            return False  # a parameter, a loop variable: it may change
        if name.startswith("self.") and name.count(".") == 1:
            return all(builds_the_object(ctx.tree.enclosing_function(b.node)) for b in bound)
        if "." in name:
            return False
        if loop is not None and any(b.node is loop or ctx.tree.is_inside(b.node, loop) for b in bound):
            return False  # `obs = next_obs` in the loop: each step's data
        if loop is not None and name in grown_names(ctx, loop):
            return False  # `tokens.append(tok)` in the loop: longer on each pass
        if all(ctx.tree.enclosing_function(b.node) is None for b in bound) and ctx.tree.enclosing_function(at) is not None:
            return True  # a module constant, read in a function
        return loop is not None  # bound before the loop, never inside it

    def decoded_feed(self, data: cst.BaseExpression, at: cst.CSTNode, loop: cst.CSTNode | None) -> str | None:
        """In a decode loop that appends each token it decodes to a host list (``inputs.append(
        output.argmax(-1).item())``), is ``data`` that list read back: ``"last"`` for its newest
        token (``[inputs[-1]]``, ``inputs[-1]``), ``"prefix"`` for the list or a slice of it
        (``trg_indexes``, ``tokens[-block:]``)? None otherwise."""
        ctx = self.ctx
        if type(loop) not in (cst.For, cst.While) or not ctx.loops.decodes(loop):
            return None
        grown = grown_names(ctx, loop)
        parts = list(data.elements) if type(data) in (cst.List, cst.Tuple) else [data]  # type: ignore[attr-defined]
        kinds = set()
        for part in parts:
            value = part.value if type(part) is cst.Element else part
            if type(value) is cst.Subscript and dotted(value.value) in grown:
                sliced = any(type(e.slice) is cst.Slice for e in value.slice)
                kinds.add("prefix" if sliced and value is data else "last")
            elif dotted(value) in grown:
                kinds.add("prefix" if value is data else "last")
            elif not self.same_every_step(value, at, loop):
                return None  # something else of the step rides along: not only the tokens
        return None if not kinds else "prefix" if "prefix" in kinds else "last"

    def uploaded_batch(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``value`` a batch from the loader the step just copied to the device
        (``caplens.to(device)``, or a name bound to that: ``caplens = caplens.to(device)``), or
        a tensor built on the host and copied (``torch.as_tensor(lengths).to(device)``)?"""
        ctx = self.ctx
        if type(value) is cst.Name:
            binding = ctx.bindings.reaching(value.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None:
                return False
            value, at = binding.value, binding.node
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute or ctx.devices.move(value) != "device":
            return False
        receiver = value.func.value
        # (or a tensor the step built on the host, kospeech's `torch.as_tensor(target_lengths).to(self.device)`)
        return ctx.devices.is_host_batch(receiver, at) or ctx.devices.loader_value(receiver, at) or ctx.devices.moved_to_host(receiver, at)

    def constant_parameter(self, data: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """``def extract(arr, t): torch.from_numpy(arr).to(t.device)``: the parameter ``data``
        names, when that is all it is bound to (the callers decide whether it is constant)."""
        if type(data) is not cst.Name:
            return None
        bound = self.ctx.bindings.lookup(data.value, at)
        if len(bound) != 1 or bound[0].kind != "param":
            return None
        return bound[0].node  # type: ignore[return-value]

    @cached_property
    def round_trips(self) -> dict[int, tuple[cst.Call, cst.Call]]:
        """id(move to the host) -> (that move, the move that takes its value back to the device)
        in the same pass of the same function, across statements: ``a = logits.cpu().numpy()``,
        host work on ``a`` (``a[order[k:]] = -inf``), then ``torch.from_numpy(a).to(d)`` (TL112;
        TL102 leaves such a copy to it)."""
        ctx = self.ctx
        found: dict[int, tuple[cst.Call, cst.Call]] = {}
        for call in ctx.tree.nodes(cst.Call):
            if type(call.func) is not cst.Attribute or ctx.devices.move(call) != "device" or ctx.tree.enclosing_function(call) is None:
                continue
            back = self._moved_to_host_before(call.func.value, call)
            if back is not None and id(back) not in found and self._same_pass(back, call):
                found[id(back)] = (back, call)
        return found

    def _moved_to_host_before(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The move to the host (``x.cpu()``) whose value ``expr`` still is, through NumPy and
        back (``.numpy()``, ``torch.from_numpy``), dtype changes and names bound in between
        (not one made in the same expression: that is the one-expression round trip)."""
        ctx = self.ctx
        named = False  # only across statements: a name bound in between
        for _ in range(8):
            if type(expr) is cst.Name:
                binding = ctx.bindings.reaching(expr.value, at)
                if binding is None or binding.kind != "assign" or binding.value is None or binding.element is not None:
                    return None
                expr, at, named = binding.value, binding.node, True
            elif type(expr) is cst.Subscript:
                appended = self._appended_last(expr, at)
                if appended is None:
                    return None
                expr, at, named = appended, appended, True
            elif type(expr) is cst.Call and ctx.qname(expr.func) in ("torch.from_numpy", "torch.as_tensor", "torch.tensor"):
                if ctx.keyword(expr, "device") is not None or len(expr.args) != 1 or expr.args[0].keyword is not None:
                    return None
                expr = expr.args[0].value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                moved = ctx.devices.move(expr)
                if moved is not None:
                    return expr if moved == "host" and named else None
                if expr.func.attr.value not in KEEPS_THE_VALUE | {"numpy", "type"}:
                    return None
                expr = expr.func.value
            else:
                return None
        return None

    def _appended_last(self, item: cst.Subscript, at: cst.CSTNode) -> cst.BaseExpression | None:
        """``xs[-1]`` in a loop whose body also does ``xs.append(value)``: the value the last pass
        appended (DDIM's sampler: ``xs.append(xt_next.to('cpu'))``, then ``xt = xs[-1].to('cuda')``
        at the next step). None for another index, or a list the loop does not append to."""
        ctx = self.ctx
        index = item.slice[0].slice if len(item.slice) == 1 else None
        if type(index) is not cst.Index or type(index.value) is not cst.UnaryOperation or type(index.value.expression) is not cst.Integer \
                or index.value.expression.value != "1" or type(index.value.operator) is not cst.Minus:
            return None
        name = dotted(item.value)
        loops = ctx.loops.enclosing_loops(at)
        if name is None or not loops or type(loops[0]) not in (cst.For, cst.While):
            return None
        appends = [call for call in ctx.method_calls("append") if dotted(call.func.value) == name  # type: ignore[attr-defined]
                   and ctx.tree.is_inside(call, loops[0]) and ctx.loops.enclosing_loops(call)[:1] == loops[:1]]
        if len(appends) != 1 or len(appends[0].args) != 1 or ctx.guards.rare(appends[0], stop=loops[0]):
            return None  # appended in several places, or only now and then: not the step's value
        return appends[0].args[0].value

    def _same_pass(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Do both run in the same pass: in one function, and in each loop around the second?"""
        tree, loops = self.ctx.tree, self.ctx.loops
        return tree.enclosing_function(first) is tree.enclosing_function(second) and all(
            tree.is_inside(first, loop) for loop in loops.enclosing_loops(second))

    def parameter_behind(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """The parameter whose value ``expr`` still is, give or take a shape, a sort or a
        constant offset: ``(lengths - 1)``, ``lengths.squeeze(1)``, after ``lengths, order =
        lengths.squeeze(1).sort(...)`` (TL112: an argument its caller uploaded, read back)."""
        ctx = self.ctx
        for _ in range(6):
            if type(expr) is cst.BinaryOperation and type(expr.right) in (cst.Integer, cst.Float):
                expr = expr.left
            elif type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in KEEPS_THE_VALUE:
                expr = expr.func.value
            elif type(expr) is cst.Name:
                binding = ctx.bindings.reaching(expr.value, at)
                if binding is None:
                    return None
                if binding.kind == "param":
                    return binding.node if type(binding.node) is cst.Param else None  # type: ignore[return-value]
                if binding.kind != "assign" or binding.value is None or binding.element not in (None, 0):
                    return None
                expr, at = binding.value, binding.node
            else:
                return None
        return None


# Calls whose result is still the value they are called on, as far as where it lives goes.
KEEPS_THE_VALUE = DTYPE_CONVERSIONS | {"detach", "clone", "squeeze", "unsqueeze", "view", "reshape", "flatten", "astype", "copy", "sort"}
