"""Index arrays built on the host (a part of ``Uploads``): a tensor made there, a NumPy array, a Python list
of positions, a DataLoader's or BatchSampler's batch of them, each copied to the device when it indexes a
device tensor; and one element of a host tensor, which PyTorch reads as an int (no copy)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_reach import DTYPE_CONVERSIONS
from torchlint.analysis.host_tensors import ARITHMETIC, FACTORIES
from torchlint.analysis.loaders import is_dataloader, no_work_for_workers
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class HostIndexes:
    """One file's index arrays that live on the host."""

    ctx: FileContext

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
            b.kind == "assign" and b.element is None and _list_value(b.value) and builds_the_object(self.ctx.tree.enclosing_function(b.node))
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


def builds_the_object(function: cst.FunctionDef | None) -> bool:
    """A method that builds the object (runs once, not per step)."""
    return function is not None and (function.name.value in ("__init__", "setup", "build", "reset_parameters", "__post_init__")
                                     or function.name.value.startswith(("_build", "build_", "_init", "init_")))
