"""Tensors sized by their values: a boolean mask index, ``nonzero()``, ``unique()``, ``torch.where(c)``,
``repeat_interleave(t)`` on a device tensor, whose size the host must learn from the device; and
what a boolean mask is (a part of ``HiddenSyncs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.sync_ops import BOOL_FUNCTIONS, BOOL_METHODS, JOINING_FUNCTIONS, SHAPE_METHODS, SIZED_BY_VALUES, compared_values, mask_name, plainly_python, torch_op

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# torch functions that make a tensor like their argument (of its dtype unless told another).
_LIKE = frozenset({"torch.ones_like", "torch.zeros_like", "torch.empty_like"})


# What a name bound to a comparison may hold: one, or a logical join or negation of them (`a & b`, `~m`).
_COMPARED_KINDS = (cst.Comparison, cst.BinaryOperation, cst.UnaryOperation)


class SizedByValues:
    """Which indexes and ops of one file make a tensor sized by its values."""

    ctx: FileContext

    def sized_by_values(self, node: cst.Call | cst.Subscript) -> bool:
        """``x[mask]``, ``nonzero()``, ``unique()``, ``masked_select()``, ``torch.where(c)``,
        ``repeat_interleave(t)`` on a device tensor where it may run every step: a tensor
        whose size the host must learn from the device. A mask write of a Python value
        (``x[m] = 0``: ``masked_fill_``) makes none; an update through a mask (``l[m] -= 1``:
        read, then written back) or a write of a device tensor (``x[m] = y``: ``index_put_``
        with the mask's ``nonzero``) does."""
        ctx = self.ctx
        if type(node) is cst.Subscript:
            if self._filled_in_place(node):
                return False  # `x[mask] = 0` writes in place: no new tensor of unknown size
            masks = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
            mask = next((m for m in masks if self.bool_mask(m, node)), None)
            if mask is not None:
                return self.in_step(node) and (self.device_tensor(mask, node) or self._kept_on_device(mask, node, node.value))
            # `x[node_type == i]` with `node_type` a parameter: a tensor indexed by a comparison
            # is indexed by a mask (a Python bool index would only add a dimension).
            return any(self._compared(m, node) for m in masks) and self.in_step(node) and self.device_tensor(node.value, node)
        op, subject = torch_op(ctx, node)
        function = ctx.qname(node.func) is not None
        if op is None or subject is None or not self._op_sized_by_values(op, node, function):
            return False
        if op == "repeat_interleave":
            subject = self._repeats(node, function) or subject
        return self.in_step(node) and self.device_tensor(subject, node)

    def _filled_in_place(self, node: cst.Subscript) -> bool:
        """``x[m] = 0.0``, ``del d[k]``: a write that learns no size (torch fills through a mask
        where the value is one number on the host). ``l[m] -= 1`` reads ``l[m]`` first; ``x[m] =
        y`` of a device tensor indexes through the mask's positions."""
        parent = self.ctx.tree.parent(node)
        if type(parent) is cst.Del:
            return True
        if type(parent) is not cst.AssignTarget:
            return False
        value = self.ctx.tree.parent(parent).value  # type: ignore[union-attr]
        return plainly_python(value) or not self.device_tensor(value, node)

    def uploaded_mask(self, node: cst.Subscript) -> cst.Param | None:
        """``[y[y != pad] for y in padded]`` in a helper whose ``padded`` is a parameter: a
        mask index sized by its values when a per-step call passes that parameter a batch just
        copied to the device (the join's ``#uploaded:``); the parameter, else None."""
        ctx = self.ctx
        if self._filled_in_place(node) or ctx.tree.enclosing_function(node) is None:
            return None  # `x[m] = 0` writes in place
        for element in node.slice:
            test = element.slice.value if isinstance(element.slice, cst.Index) else None
            if type(test) is not cst.Comparison or any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in test.comparisons):
                continue
            for operand in (test.left, *(c.comparator for c in test.comparisons)):
                param = self._parameter_of_item(operand, node)
                if param is not None and self.in_step(node):
                    return param
        return None

    def mask_parameters(self, node: cst.Subscript) -> tuple[str, ...]:
        """``edge_index[:, edge_type == i]`` in a ``forward`` whose tensors are its parameters: the
        parameters that, taken for device tensors, make it a mask index sized by its values (the join
        keeps it where every call passes device tensors there, ``device_parameters``); () where none
        does, or where it is one as it is (``sized_by_values``)."""
        if not any(self._compared(e.slice.value, node) for e in node.slice if isinstance(e.slice, cst.Index)):
            return ()  # (no comparison among the indexes: asked of every subscript, so cheaply first)
        if not self.in_step(node) or self._filled_in_place(node):
            return ()  # not per step here; `x[m] = 0` writes in place
        return self.device_parameters(node, lambda: self.sized_by_values(node))  # type: ignore[attr-defined]

    def _parameter_of_item(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Param | None:
        """The parameter ``expr`` is, or a row of (``y`` in ``for y in padded``)."""
        uploads = self.ctx.uploads
        if type(expr) is cst.Name:
            binding = self.ctx.bindings.reaching(expr.value, at)
            if binding is not None and binding.kind in ("for", "comp") and binding.element is None and binding.value is not None:
                return uploads.parameter_behind(binding.value, binding.node) if type(binding.value) is cst.Name else None
        return uploads.parameter_behind(expr, at) if type(expr) in (cst.Name, cst.Subscript) else None

    def _kept_on_device(self, mask: cst.BaseExpression, at: cst.CSTNode, indexed: cst.BaseExpression) -> bool:
        """``data.train_mask`` of a graph moved to the device (``data = dataset[0].to(device)``),
        or indexing a device tensor (``out[data.train_mask]``, the graph maybe remade by a
        transform) where nothing says the graph is on the host; or a name bound to one
        (``mask = graph["paper"].train_mask``)."""
        if type(mask) is cst.Name:
            bound = self.ctx.bindings.reaching(mask.value, at)
            return bound is not None and bound.kind == "assign" and bound.element is None and type(bound.value) is cst.Attribute \
                and self._kept_on_device(bound.value, at, indexed)
        if type(mask) is not cst.Attribute or not mask_name(mask.attr.value):
            return False
        devices, owner = self.ctx.devices, mask.value
        if devices.on_device(owner, at):
            return True
        on_host = devices.is_host_batch(owner, at) or devices.loader_value(owner, at) or devices.moved_to_host(owner, at) \
            or type(owner) is cst.Name and self._bound_unmoved(owner, at)
        return not on_host and self.device_tensor(indexed, at)

    def _bound_unmoved(self, owner: cst.Name, at: cst.CSTNode) -> bool:
        """``data = dataset[0]`` and never moved: every binding that reaches ``owner`` indexes a
        dataset or calls nothing that could move it (a transform might)."""
        bound = self.ctx.bindings.reaching_each(owner.value, at)
        return bool(bound) and all(b.kind == "assign" and b.value is not None and type(b.value) is cst.Subscript for b in bound)

    def _compared(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """A value comparison (``a == i``, ``t > 0``), a logical join of them (VITS' ``(inputs >= -tail_bound) &
        (inputs <= tail_bound)``, ``~inside``), or a name bound only to one where it is used."""
        if depth > 4:
            return False  # (a chain of names and joins deeper than code writes: not followed)
        if type(expr) is cst.Name:
            bound = self.ctx.bindings.reaching_each(expr.value, at)
            return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None
                                       and type(b.value) in _COMPARED_KINDS and self._compared(b.value, b.node, depth + 1) for b in bound)
        if type(expr) is cst.BinaryOperation and type(expr.operator) in (cst.BitAnd, cst.BitOr):
            return self._compared(expr.left, at, depth + 1) and self._compared(expr.right, at, depth + 1)
        if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.BitInvert:
            return self._compared(expr.expression, at, depth + 1)
        return type(expr) is cst.Comparison and not any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons)

    def _op_sized_by_values(self, op: str, call: cst.Call, function: bool) -> bool:
        if op in SIZED_BY_VALUES:
            return True
        if op == "where":  # `torch.where(cond)`: the indices of the true elements
            return function and len(call.args) == 1 and call.args[0].keyword is None
        if op == "repeat_interleave":  # with a tensor of repeats and no `output_size=`
            return self.ctx.keyword(call, "output_size") is None and not self.ctx.has_star_kwargs(call) and self._repeats(call, function) is not None
        return False

    def _repeats(self, call: cst.Call, function: bool) -> cst.BaseExpression | None:
        """The repeats of ``repeat_interleave`` when they are a tensor (an int repeats
        every element the same number of times: a known size)."""
        ctx = self.ctx
        arg = ctx.keyword(call, "repeats") or ctx.argument(call, 1 if function else 0)
        if arg is None and function and len(call.args) == 1:
            arg = call.args[0]  # `torch.repeat_interleave(counts)`
        if arg is None:
            return None
        return arg.value if self.tensorish(arg.value, call) else None

    def bool_mask(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, traced: bool = False) -> bool:
        """Is ``expr`` a boolean tensor: a comparison with a tensor, ``~m``, ``a & b``,
        ``x.isnan()``, ``torch.isfinite(x)``, ``m.bool()``, or a name bound to one?
        ``traced``: a tensor as :meth:`traced_tensor` knows one."""
        if depth > 6:
            return False
        ctx = self.ctx
        expr_type = type(expr)
        if expr_type is cst.Comparison:  # (`mode == "train"` is a Python bool whatever `mode` is)
            is_tensor = self.traced_tensor if traced else self.tensorish
            return any(is_tensor(o, at) for o in compared_values(expr))
        if expr_type is cst.UnaryOperation and type(expr.operator) is cst.BitInvert:
            return self.bool_mask(expr.expression, at, depth + 1, traced)
        if expr_type is cst.BinaryOperation and type(expr.operator) in (cst.BitAnd, cst.BitOr, cst.BitXor):
            return self.bool_mask(expr.left, at, depth + 1, traced) or self.bool_mask(expr.right, at, depth + 1, traced)
        if expr_type is cst.BinaryOperation and type(expr.operator) is cst.Multiply:  # `(u > 0) * (l == u)`: a logical and
            return self.bool_mask(expr.left, at, depth + 1, traced) and self.bool_mask(expr.right, at, depth + 1, traced)
        if expr_type is cst.Subscript:  # `mask[..., k]`: any part of a mask is one
            return self.bool_mask(expr.value, at, depth + 1, traced)
        if expr_type is cst.Attribute and expr.attr.value in ("T", "mT"):
            return self.bool_mask(expr.value, at, depth + 1, traced)
        if expr_type is cst.Call:
            func = expr.func
            qname = ctx.qname(func)
            if qname in BOOL_FUNCTIONS:
                return True
            if qname in JOINING_FUNCTIONS:  # `torch.stack((j, k, left, right))`: masks joined are one
                parts = expr.args[0].value if expr.args else None
                return type(parts) in (cst.Tuple, cst.List) and bool(parts.elements) and all(  # type: ignore[union-attr]
                    type(e) is cst.Element and self.bool_mask(e.value, at, depth + 1, traced) for e in parts.elements)  # type: ignore[union-attr]
            if qname in _LIKE:  # `torch.ones_like(j)` of a mask: a mask (its dtype kept unless one is given)
                return len(expr.args) == 1 and expr.args[0].keyword is None and self.bool_mask(expr.args[0].value, at, depth + 1, traced)
            if type(func) is cst.Attribute and func.attr.value in SHAPE_METHODS and qname is None:
                return self.bool_mask(func.value, at, depth + 1, traced)  # `mask[..., k].contiguous().view(-1)`: a view of a mask
            helper = ctx.functions.called(expr, ctx.qname(func))
            if helper is not None:  # `mask = lengths_to_mask(lengths)`: a helper of this file returning one
                returns = [r.value for r in ctx.values.returns_of(helper) if r.value is not None]
                return bool(returns) and all(self.bool_mask(value, value, depth + 1) for value in returns)
            return type(func) is cst.Attribute and func.attr.value in BOOL_METHODS and ctx.qname(func) is None and self.tensorish(func.value, at)
        if expr_type is cst.Name:
            # The bindings that may reach `at` (`j = iou.argsort()` earlier in the function is
            # another value, not this one), each a mask or a row of one (`j, k = mask.T`).
            bound = [b for b in ctx.bindings.reaching_each(expr.value, at) if b.kind != "augassign"]
            if len(bound) == 1 and bound[0].kind == "param" and mask_name(expr.value):
                # `def _compute_cross_entropy(self, logits, targets, mask)`: a parameter named for a mask, as an
                # attribute so named is one (audiocraft's per-codebook `targets_k[mask[:, k, ...].view(-1)]`)
                return True
            return bool(bound) and all(b.kind == "assign" and b.value is not None and self._bound_mask(b, depth, traced) for b in bound)
        if expr_type is cst.Attribute and mask_name(expr.attr.value):
            # `data.train_mask`: a mask kept on a graph or a batch (PyG's splits), unless this
            # file binds that attribute to something that is no mask (a view of itself,
            # `data.train_mask = data.train_mask[:, 0]`, stays one)
            name = dotted(expr) or ""
            bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None
                     and not (type(b.value) is cst.Subscript and dotted(b.value.value) == name)]
            return all(self.bool_mask(b.value, b.node, depth + 1, traced) for b in bound)
        return False

    def _bound_mask(self, binding, depth: int, traced: bool) -> bool:  # type: ignore[no-untyped-def]
        """An assignment of a mask: ``m = x > 0``; unpacked, an item of a tuple of masks or a row of a
        mask (``j, k = ((gxy % 1 < g) & (gxy > 1)).T``)."""
        value = binding.value
        if binding.element is not None and type(value) in (cst.Tuple, cst.List):
            if binding.element >= len(value.elements) or type(value.elements[binding.element]) is not cst.Element:
                return False  # (a starred item: a list of rows)
            value = value.elements[binding.element].value
        elif binding.element is not None and type(binding.node) is not cst.Assign:
            return False  # (`for m in masks`: iterated, not unpacked)
        return self.bool_mask(value, binding.node, depth + 1, traced)

