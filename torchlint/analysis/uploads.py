"""Tensors made on the host and then copied to the device: where a host tensor comes from,
how far it travels on the host (arithmetic, views, torch functions, a few statements,
a helper's return), and the move that uploads it. Shared by the create-then-move,
constant-upload and host-index rules.

This module holds uploads of data that does not change between steps and indexes built on the
host; where a host tensor comes from is ``host_tensors.py``, how far it travels and its move ``host_moves.py``."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.bounded import Bounded
from torchlint.analysis.decoding import grown_names
from torchlint.analysis.device_reach import DTYPE_CONVERSIONS
from torchlint.analysis.host_moves import HostMoves
from torchlint.analysis.host_tensors import ARITHMETIC, FACTORIES, FROM_DATA, HostTensors
from torchlint.analysis.loaders import is_dataloader, no_work_for_workers
from torchlint.analysis.loop_invariants import attribute_unchanged
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class Uploads(HostTensors, HostMoves):
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
        made = self.made_on_host(call.func.value, call)  # type: ignore[attr-defined]
        if made is None or ctx.qname(made.func) not in FROM_DATA or not made.args or made.args[0].keyword is not None:
            return None
        return made.args[0].value

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
            return all(_building(ctx.tree.enclosing_function(b.node)) for b in bound)
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
        (``caplens.to(device)``, or a name bound to that: ``caplens = caplens.to(device)``)?"""
        ctx = self.ctx
        if type(value) is cst.Name:
            binding = ctx.bindings.reaching(value.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None:
                return False
            value, at = binding.value, binding.node
        if type(value) is not cst.Call or type(value.func) is not cst.Attribute or ctx.devices.move(value) != "device":
            return False
        receiver = value.func.value
        return ctx.devices.is_host_batch(receiver, at) or ctx.devices.loader_value(receiver, at)

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

    # --- indexes built on the host -----------------------------------------------------------
    def host_index(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``index`` an index array that lives on the host: a tensor made there
        (``torch.arange(n)``, ``torch.tensor(ids)``), a NumPy array, or a Python list of
        positions (each is copied to the device when it indexes a device tensor)?"""
        ctx = self.ctx
        if self.made_on_host(index, at, filled=True) is not None:
            # (filled or not: `cycle_index(n, 1)` writes into its `torch.arange` and returns it, on the host)
            return not self.host_scalar(index, at)  # one element of it is taken as an int: nothing to copy
        if ctx.values.is_numpy_array(index, at):
            return True
        if type(index) is cst.ListComp or self.listed_index(index, at):
            return True
        return self.index_loader_batch(index, at) or (type(index) is cst.Name and self._batch_sampler_batch(index, at))

    def host_scalar(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is ``expr`` one element of a one-dimensional host tensor, a 0-dim host tensor (``ind =
        perm[start + offset]`` with ``perm = torch.randperm(n)``, or with a number added)? As an
        index, PyTorch takes it as an int (``applySelect(t.item())``): read on the host, no copy."""
        ctx = self.ctx
        if depth > 5:
            return False
        expr_type = type(expr)
        if expr_type is cst.Subscript:
            if len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
                return False  # a slice, or two positions: more than one element
            position = expr.slice[0].slice.value
            return self._integer_position(position, at) and self._one_dimensional(expr.value, at, depth + 1)
        if expr_type is cst.BinaryOperation and type(expr.operator) in ARITHMETIC:
            # (a number added to an element is still one element: `perm[i] + 1`)
            return any(self.host_scalar(side, at, depth + 1) and self.python_number(other, at)
                       for side, other in ((expr.left, expr.right), (expr.right, expr.left)))
        if expr_type is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in DTYPE_CONVERSIONS:
            return self.host_scalar(expr.func.value, at, depth + 1)  # `perm[i].long()`
        if expr_type is cst.Name:
            binding = ctx.bindings.reaching(expr.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
                return False  # (a loop over the tensor binds its elements too, but is no upload to begin with)
            return self.host_scalar(binding.value, binding.node, depth + 1)
        return False

    def _integer_position(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python int (``start + offset``, ``step % n``, ``-1``), not a list of positions
        (``[i, j]``, a name bound to one): Python's numbers say "int" of lists too."""
        values = self.ctx.values
        parts = [expr]
        while parts:
            part = parts.pop()
            if type(part) in (cst.List, cst.Tuple, cst.ListComp, cst.Set, cst.SetComp, cst.GeneratorExp):
                return False
            if type(part) is cst.BinaryOperation:
                parts += (part.left, part.right)
            elif type(part) is cst.UnaryOperation:
                parts.append(part.expression)
            elif type(part) is cst.Name and values.is_sequence_literal(part, at):
                return False
        return self.python_number(expr, at)

    def _one_dimensional(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """A host tensor of one dimension: a permutation, a range (``torch.randperm(n)``,
        ``torch.arange(n)``), a factory given one size, a slice of one, ``.flatten()``,
        ``.view(-1)``, element-wise work on one, through names bound in the function."""
        ctx = self.ctx
        if depth > 8:
            return False
        expr_type = type(expr)
        if expr_type is cst.Call:
            qualified = ctx.qname(expr.func)
            if qualified in FACTORIES:
                sizes = [a.value for a in expr.args if a.keyword is None and not a.star]
                if qualified in _ONE_DIMENSIONAL or qualified in _SIZED and len(sizes) == 1 and self.python_number(sizes[0], at):
                    return self.host_factory(expr)
                return False  # (`torch.zeros(n, m)`: its element is a row)
            func = expr.func
            if qualified is not None or type(func) is not cst.Attribute:
                return False
            method = func.attr.value
            if method == "flatten" and not expr.args or method in ("view", "reshape") and len(expr.args) == 1 and _minus_one(expr.args[0].value):
                return self.made_on_host(func.value, at) is not None
            if method in _ELEMENTWISE and all(self.python_number(a.value, at) for a in expr.args if a.keyword is None):
                return self._one_dimensional(func.value, at, depth + 1)
            return False
        if expr_type is cst.Subscript:
            # a slice of it keeps its one dimension: `perm[start:end]`
            return len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice and self._one_dimensional(expr.value, at, depth + 1)
        if expr_type is cst.BinaryOperation and type(expr.operator) in ARITHMETIC:
            return any(self._one_dimensional(side, at, depth + 1) and self.python_number(other, at)
                       for side, other in ((expr.left, expr.right), (expr.right, expr.left)))
        if expr_type is cst.Name:
            binding = ctx.bindings.reaching(expr.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
                return False
            if ctx.tree.scope_of(binding.node) is not ctx.tree.scope_of(at):
                return False  # (as `made_on_host`: a name of this function only)
            return self._one_dimensional(binding.value, binding.node, depth + 1)
        return False

    def listed_index(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python list of positions written in the code (``q[[0, 1, 2]]``,
        ``logits[:, [-1], :]``, a name bound to one): a few bytes, whose copy costs only
        its wait for the device's queue."""
        ctx = self.ctx
        if type(index) is cst.List:
            return bool(index.elements) and all(_position(e.value) for e in index.elements if not isinstance(e, cst.StarredElement))
        if type(index) is cst.Attribute:
            return self._listed_attribute(index, at)
        return type(index) is cst.Name and ctx.values.is_sequence_literal(index, at) and not any(
            type(b.value) is cst.Tuple for b in ctx.bindings.lookup(index.value, at))

    def listed_parameter(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A parameter of the function, of no kind known (no annotation, no default but None), that
        ``index`` alone names: what its callers pass decides (a finding held where every call passes
        a Python list, ``LISTED``)."""
        if type(index) is not cst.Name or index.value in ("self", "cls"):
            return False
        bound = self.ctx.bindings.lookup(index.value, at)
        if len(bound) != 1 or bound[0].kind != "param" or type(bound[0].node) is not cst.Param:
            return False
        param = bound[0].node
        return param.annotation is None and (param.default is None or type(param.default) is cst.Name and param.default.value == "None")

    def python_list(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``value`` a Python list: one written or comprehended, ``list(...)``/``sorted(...)``, or
        a name every binding of which is one, ``[]`` appended to included (``source_indices`` in
        ``next_tokens, source_indices = [], []``)?"""
        if type(value) is cst.List or _list_value(value):
            return True
        if type(value) is not cst.Name:
            return False
        bound = self.ctx.bindings.lookup(value.value, at)
        return bool(bound) and all(b.kind == "assign" and _list_value(_element(b), empty=True) for b in bound)

    def _listed_attribute(self, index: cst.Attribute, at: cst.CSTNode) -> bool:
        """``self.suppress_tokens`` where every binding of it sets a Python list where the object
        is built (whisper's ``SuppressTokens.__init__``: ``self.suppress_tokens = list(suppress_tokens)``,
        read as ``logits[:, self.suppress_tokens] = -np.inf`` per decoded token)."""
        name = dotted(index)
        if name is None or not name.startswith("self.") or name.count(".") != 1:
            return False
        bound = self.ctx.bindings.lookup(name, at)
        return bool(bound) and all(
            b.kind == "assign" and b.element is None and _list_value(b.value) and _building(self.ctx.tree.enclosing_function(b.node))
            for b in bound)  # (set anywhere else, or once to a tuple or a tensor: it may not be a list when read)

    def index_loader_batch(self, index: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A batch of a DataLoader over indices (``for perm in DataLoader(range(n), b,
        shuffle=True)``): the loader collates the Python ints into a host tensor each step."""
        if type(index) is not cst.Name:
            return False
        binding = self.ctx.bindings.reaching(index.value, at)
        if binding is None or binding.kind != "for" or binding.element is not None or binding.value is None:
            return False
        loader = self.ctx.values.constructed_by(binding.value, binding.node)
        return loader is not None and is_dataloader(self.ctx, loader) and no_work_for_workers(self.ctx, loader) == "indices"

    def _batch_sampler_batch(self, index: cst.Name, at: cst.CSTNode) -> bool:
        """``indices`` in ``for indices in BatchSampler(SubsetRandomSampler(range(n)), mb, ...)``
        (the sampler made there or bound to a name first): a ``BatchSampler`` yields Python
        lists of positions, each copied to the device when it indexes a device tensor."""
        for binding in self.ctx.bindings.lookup(index.value, at):
            if binding.kind != "for" or binding.element is not None:
                continue
            sampler = binding.value
            if type(sampler) is cst.Name:
                made = [b.value for b in self.ctx.bindings.lookup(sampler.value, binding.node) if b.kind == "assign" and b.element is None]
                sampler = made[-1] if len(made) == 1 else None
            if type(sampler) is cst.Call and _BATCH_SAMPLER.match(self.ctx.qname(sampler.func) or dotted(sampler.func) or ""):
                return True
        return False


# Host factories whose tensor has one dimension, whatever they are given.
_ONE_DIMENSIONAL = frozenset({"torch.randperm", "torch.arange", "torch.linspace", "torch.logspace"})
# Factories whose dimensions are their sizes: one size given as a number makes one dimension.
_SIZED = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
# Tensor methods whose result has the shape of the tensor they are called on (given numbers).
_ELEMENTWISE = DTYPE_CONVERSIONS | frozenset({"clone", "detach", "flip", "cumsum", "add", "sub", "mul", "remainder", "fmod", "abs", "neg"})


def _minus_one(value: cst.BaseExpression) -> bool:
    """``-1``: the one size of ``.view(-1)``."""
    return type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus and type(value.expression) is cst.Integer and value.expression.value == "1"


# torch's sampler that groups another sampler's positions into lists (`torch.utils.data.BatchSampler`).
_BATCH_SAMPLER = re.compile(r"(?:torch\.utils\.data\.(?:sampler\.)?)?BatchSampler$")


def _element(binding) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
    """The value a binding gives its name: the right-hand side, or its element for a tuple target."""
    if binding.element is None:
        return binding.value
    value = binding.value
    if type(value) in (cst.Tuple, cst.List) and binding.element < len(value.elements) and not isinstance(value.elements[binding.element], cst.StarredElement):
        return value.elements[binding.element].value
    return None


def _list_value(value: cst.BaseExpression | None, empty: bool = False) -> bool:
    """A Python list of positions: a written one (``[]`` too with ``empty``: filled by appends), a
    comprehension, or ``list(...)``/``sorted(...)``."""
    if type(value) is cst.List:
        if empty and not value.elements:
            return True
        return bool(value.elements) and all(_position(e.value) for e in value.elements if not isinstance(e, cst.StarredElement))
    return type(value) is cst.ListComp or type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in ("list", "sorted") \
        and len(value.args) == 1 and not value.args[0].star


def _position(value: cst.BaseExpression) -> bool:
    """An element of an index list: a number (``-1`` too) or a name."""
    if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
        value = value.expression
    return type(value) is cst.Integer or type(value) is cst.Name


def _building(function: cst.FunctionDef | None) -> bool:
    """A method that builds the object (runs once, not per step)."""
    return function is not None and (function.name.value in ("__init__", "setup", "build", "reset_parameters", "__post_init__")
                                     or function.name.value.startswith(("_build", "build_", "_init", "init_")))
# Calls whose result is still the value they are called on, as far as where it lives goes.
KEEPS_THE_VALUE = DTYPE_CONVERSIONS | {"detach", "clone", "squeeze", "unsqueeze", "view", "reshape", "flatten", "astype", "copy", "sort"}
