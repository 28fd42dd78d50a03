"""A device tensor turned into a Python value by a builtin, a list index or a string format inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.element_reads import ELEMENT_HINT, walked_tensor
from torchlint.analysis.host_returns import returned_key
from torchlint.analysis.host_tensors import FACTORIES
from torchlint.analysis.impact import Cost
from torchlint.analysis.kinds import Kind
from torchlint.analysis.multiplicity import Repeat
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.sync_ops import plainly_python
from torchlint.checks.base import Check

# Builtins that read a tensor's value: conversions, and the ones that compare or count with it.
_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
# Builtins that format their first argument: `Tensor.__str__`/`__format__` read the value.
_FORMATTING = frozenset({"str", "repr", "format"})
# String literals a `%` or `.format()` fills in.
_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
_COMPARING = frozenset({"min", "max", "sorted"})
_COUNTING = frozenset({"range"})
# Sizes are Python ints: a tensor given as one is read (`torch.arange(lengths.max())`, `x.view(n, -1)`).
_SIZED_METHODS = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty", "new_full", "narrow"})
_SIZE_KEYWORDS = frozenset({"start", "end", "step", "size", "steps", "high", "low", "fill_value"})
# A fill value is a Python number too: `torch.full(shape, alphas[i])` reads a 0-d tensor first.
_FILLS = frozenset({"torch.full", "torch.full_like"})
# `math` functions convert their argument to a Python float first.
_MATH_PREFIX = "math."


class TensorToPythonInLoop(Check):
    """`int(t)`, `float(t)`, `min(x, t)`, `range(t)`, `math.f(t)`, `items[t]`, `x[a:t]`, a size `torch.arange(t)` or `f"{t:.4f}"` on a device tensor inside a hot loop."""

    code = "TL105"
    name = "tensor-to-python-in-loop"
    cost = Cost.SYNC
    message = "`{expr}` in {loop} reads a device tensor into a Python value: the host waits for the device on every step"
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Keep the value on the device (`torch.clamp`, `torch.minimum`, tensor indexing), or read it once after the loop"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        if self._sorts_device_scalars(node):
            # each comparison reads (about n·log2 n of them); after the first, each waits only for its own small kernel
            self.report(node, hint=_COMPARE_HINT, expr=short_code(ctx.module, node), itself=Repeat("comparison", few=True))
            return
        if type(func) is cst.Name and ctx.qname(func) is None:
            name = func.value
            if name in _CONVERSIONS or name in _FORMATTING:
                read = node.args[:1]  # `int(x, base)` reads a string; a tensor is the first argument
            elif name in _COMPARING or name in _COUNTING or name == "print":  # `print(loss)` formats each argument
                read = node.args
            else:
                return
        elif (ctx.qname(func) or "").startswith(_MATH_PREFIX):
            read = node.args
        elif type(func) is cst.Attribute and func.attr.value == "format" and isinstance(func.value, _STRINGS):
            read = node.args  # `"{:.4f}".format(loss)`: each argument formatted
        elif ctx.qname(func) in FACTORIES or ctx.qname(func) in _FILLS or type(func) is cst.Attribute and func.attr.value in _SIZED_METHODS \
                and ctx.qname(func) is None and dotted(func.value) != "self":  # (`self.repeat(x)`: a block the module keeps, given a tensor to run on)
            read = [a for a in node.args if a.keyword is None or a.keyword.value in _SIZE_KEYWORDS]  # `torch.arange(t)`: a size
            if ctx.qname(func) == "torch.full_like":
                read = [a for a in read if a is not node.args[0]]  # the tensor it copies the shape of is not read
        else:
            return
        # `print(*mloss)`, `"{} {}".format(*mloss)`: each element of a starred tensor formatted (a star elsewhere is no read of it)
        formats = type(func) is cst.Attribute or type(func) is cst.Name and func.value == "print"
        tensors = [arg.value for arg in read if (arg.keyword is None or arg.keyword.value == "fill_value")
                   and (not arg.star or arg.star == "*" and formats) and not plainly_python(arg.value)]
        read_tensor = next((value for value in tensors if ctx.syncs.device_tensor(value, node) and not self._passed_fill(node, value)), None) \
            if tensors and ctx.syncs.in_step(node) else None
        if read_tensor is not None:
            # `alphas_prev[index]` of what another file's function returns: held unless the join finds it a NumPy array
            self.report(node, hint=self._hint(node, read_tensor), expr=short_code(ctx.module, node),
                        unless_host=ctx.devices.constructor_parameter(read_tensor) or returned_key(ctx, read_tensor, node)
                        or ctx.devices.host_parameter(read_tensor, node))
        elif tensors and (type(func) is cst.Name and func.value in _CONVERSIONS | _COUNTING or (ctx.qname(func) or "").startswith(_MATH_PREFIX)):
            # `float(sigmas[i])`, `int(lengths[i])`, `sqrt(sigma ** 2 - sigma_up ** 2)` on a parameter: holds where
            # every caller passes a device tensor (StyleTTS2's ADPM2 sampler, given its schedule's sigmas one by one)
            device_params = ctx.syncs.device_parameters(node, lambda: any(ctx.syncs.device_tensor(v, node) for v in tensors)) \
                if ctx.syncs.in_step(node) else ()
            # (in a hot loop of its own, no per-step call passes an upload: what every caller passes decides;
            # a batch just uploaded is a length counted or converted, not a `math` argument: `math.log(max_period)`)
            if type(func) is cst.Name and func.value in _CONVERSIONS | _COUNTING and ctx.loops.local_hot_loop(node) is None \
                    and self._report_uploaded(node, tensors, device_params):
                return
            if device_params:
                self.report(node, expr=short_code(ctx.module, node), if_device=device_params)

    def _hint(self, call: cst.Call, read: cst.BaseExpression) -> str:
        """The fix for this read: a fill value broadcast, a walked tensor read whole, or the default."""
        if self._fill_value(call, read):
            return _FILL_HINT
        walked = walked_tensor(self.ctx, read, call)
        return ELEMENT_HINT.format(tensor=short_code(self.ctx.module, walked, limit=40)) if walked is not None else ""

    def _sorts_device_scalars(self, call: cst.Call) -> bool:
        """``sorted(hyps, key=lambda h: h["score"])``, ``hyps.sort(key=...)``, ``max(scores)``
        where the keys are device tensors (``hyp["score"] = hyp["score"] + top[0, j]``, a list
        of ``loss`` values): every comparison calls ``__bool__`` on a device tensor."""
        ctx = self.ctx
        func = call.func
        builtin = type(func) is cst.Name and func.value in _COMPARING and ctx.qname(func) is None
        if not builtin and ctx.method_name(call) != "sort":
            return False
        key = ctx.keyword(call, "key")
        if key is not None:
            compared: cst.BaseExpression | None = key.value.body if type(key.value) is cst.Lambda else None
        else:  # `max(scores)`: the items themselves (`max(a, b)` is the reads of `a` and `b` below)
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            compared = positional[0] if builtin and len(positional) == 1 else None
        if compared is None or not ctx.syncs.in_step(call):
            return False
        if key is not None:
            return not plainly_python(compared) and ctx.syncs.device_tensor(compared, compared)
        return ctx.syncs.holds_device_tensors(compared, call)

    def _passed_fill(self, call: cst.Call, value: cst.BaseExpression) -> bool:
        """``torch.full(shape, fill_value=t)`` with ``t`` a bare parameter: a number as often as
        a tensor (``shared_step(batch, t=50)``), so only a known tensor fill is read."""
        if type(value) is not cst.Name or not self._fill_value(call, value):
            return False
        binding = self.ctx.bindings.reaching(value.value, call)
        return binding is not None and binding.kind == "param"

    def _fill_value(self, call: cst.Call, value: cst.BaseExpression) -> bool:
        """Is ``value`` the fill value of ``torch.full``/``full_like``/``new_full``?"""
        name = self.ctx.qname(call.func) or (call.func.attr.value if type(call.func) is cst.Attribute else "")
        if name not in _FILLS and name != "new_full":
            return False
        position = 1  # `torch.full(size, v)`, `torch.full_like(x, v)`, `x.new_full(size, v)`
        return any(arg.value is value and (arg.keyword is not None or i == position) for i, arg in enumerate(call.args))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        """`f"{loss:.4f}"`, `f"{loss}"`: formatting a tensor reads its value."""
        values = [part.expression for part in node.parts if type(part) is cst.FormattedStringExpression]
        self._report_formatted(node, values)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        """`"%.4f" % loss`, `"%d/%d" % (correct, total)`, `("%11s" * 2 + "%11.4g" * 5) % (epoch, mem, *mloss, n, size)`:
        a starred tensor is formatted element by element, each element read."""
        if type(node.operator) is not cst.Modulo or not _format_string(node.left):
            return  # `a % b` on numbers or tensors is arithmetic, not a format
        right = node.right
        values = [e.value for e in right.elements] if type(right) is cst.Tuple else [right]
        self._report_formatted(node, values)

    def _report_formatted(self, node: cst.CSTNode, values: list[cst.BaseExpression]) -> None:
        ctx = self.ctx
        tensors = [value for value in values if not plainly_python(value)]
        if not tensors or not ctx.syncs.in_step(node):
            return  # nothing but Python values (`x.shape`, `loss.item()`), or not per step
        if _error_message(ctx, node):
            return  # `assert ok, f"{t}"`, `raise ValueError(f"{t}")`: made only when the step fails
        read = next((value for value in tensors if ctx.syncs.device_tensor(value, node)), None)
        if read is not None:
            self.report(node, expr=_formatted(ctx.module, node, read))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        read: list[cst.BaseExpression] = []
        for element in node.slice:  # `x[:, start:end]` with tensor bounds: each bound is read
            if type(element.slice) is cst.Slice:
                read.extend(b for b in (element.slice.lower, element.slice.upper, element.slice.step) if b is not None and not plainly_python(b))
        index = node.slice[0].slice.value if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index else None
        if index is not None and not plainly_python(index) and self._python_sequence(node.value, node):
            read.append(index)  # `items[t]` on a list
        if not read or not ctx.syncs.in_step(node):
            return
        walked = next((w for w in (walked_tensor(ctx, v, node) for v in read) if w is not None), None)
        # `[v[i] for i in keep]`: each element of the index tensor read as a Python int
        hint = ELEMENT_HINT.format(tensor=short_code(ctx.module, walked, limit=40)) if walked is not None else ""
        if any(ctx.syncs.device_tensor(value, node) for value in read):
            self.report(node, expr=short_code(ctx.module, node), hint=hint)
            return
        # `x[i, :, start:end]` with `start = ids_str[i]` of a parameter: holds where every caller passes a
        # device tensor, or (`mask[i, lengths[i]:] = 0`) where a per-step call passes a batch it just uploaded
        device_params = ctx.syncs.device_parameters(node, lambda: any(ctx.syncs.device_tensor(v, node) for v in read))
        if not self._report_uploaded(node, read, device_params) and device_params:
            self.report(node, expr=short_code(ctx.module, node), if_device=device_params, hint=hint)

    def _report_uploaded(self, node: cst.CSTNode, read: list[cst.BaseExpression], device_params: tuple[str, ...] = ()) -> bool:
        """``mask[i, lengths[i]:] = 0``, ``int(lengths[i])`` in a helper whose ``lengths`` is a
        parameter: a read of the device when a per-step call passes it a batch just copied
        there, from the training loop down through each ``forward`` that passes it on (the
        join's ``#uploaded:``). A list of lengths, or a size, reads nothing. With ``device_params``
        (what every caller passing a device tensor would read) the finding holds by either."""
        ctx = self.ctx
        if ctx.tree.enclosing_function(node) is None or not ctx.syncs.in_step(node):
            return False
        for value in read:
            if type(value) is cst.Subscript or type(value) is cst.Name:  # `lengths[i]`, or `n` itself
                param = ctx.uploads.parameter_behind(value, node)
                if param is not None:
                    self.report(node, condition=param.name, expr=short_code(ctx.module, node), if_device=device_params, either=bool(device_params))
                    return True
        return False

    def _python_sequence(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python list or tuple (a dict hashes a tensor by identity: no read)."""
        ctx = self.ctx
        if type(value) not in (cst.Name, cst.Attribute, cst.List, cst.Tuple):
            return False
        if type(value) is cst.Name and ctx.guards.sequence_tested(at, value.value):
            return True  # `elif isinstance(v, list): [v[i] for i in keep]`
        return ctx.values.is_sequence_literal(value, at) and ctx.values.kind(value, at) is Kind.HOST


_COMPARE_HINT = ("Each comparison of two device tensors calls `__bool__`, a read that waits for the device: sorting n of "
                 "them reads about n·log2(n) times. Read the keys once (`torch.stack(scores).tolist()`) and compare numbers, "
                 "or pick on the device (`torch.topk`, `argmax`)")
_FILL_HINT = ("A fill value is a Python number, so `torch.full` reads the 0-d device tensor first: broadcast the tensor "
              "instead (`alphas[index].view(1, 1, 1, 1).expand(b, 1, 1, 1)`, or just `alphas[index]` in the arithmetic), "
              "or read the whole schedule once before the loop (`.tolist()`)")


def _format_string(expr: cst.BaseExpression) -> bool:
    """A string literal, or one made of literals by `+` and `*` (`"%11s" * 2 + "%11.4g" * 5`, yolov5's
    progress bar): what a `%` formats into; a number or a tensor on the left is arithmetic."""
    if isinstance(expr, _STRINGS):
        return True
    if type(expr) is not cst.BinaryOperation:
        return False
    if type(expr.operator) is cst.Add:
        return _format_string(expr.left) and _format_string(expr.right)
    # (`"%11s" * 2`: repeated by a count, on either side)
    return type(expr.operator) is cst.Multiply and (_format_string(expr.left) or _format_string(expr.right))


def _error_message(ctx, node: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` part of an assertion's message or of what a ``raise`` raises?"""
    child = node
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.Assert:
            return child is ancestor.msg
        if type(ancestor) is cst.Raise:
            return True
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        child = ancestor
    return False


def _formatted(module: cst.Module, string: cst.CSTNode, read: cst.BaseExpression) -> str:
    """The format for a message: the whole string when short, else the field that reads
    the tensor (`f"…{loss:.4f}…"`, `"…" % loss`)."""
    text = " ".join(plain_code(module, string).split())
    if len(text) <= 40:
        return text
    value = short_code(module, read, 24)
    if type(string) is cst.FormattedString:
        field = next((p for p in string.parts if type(p) is cst.FormattedStringExpression and p.expression is read), None)
        shown = plain_code(module, field) if field is not None and len(plain_code(module, field)) <= 32 else "{" + value + "}"
        return f'{string.prefix}"…{shown}…"'
    if type(string) is cst.BinaryOperation:
        starred = type(string.right) is cst.Tuple and any(type(e) is cst.StarredElement and e.value is read for e in string.right.elements)
        return f'"…" % (…*{value}…)' if starred else f'"…" % {value}'
    return f'"…".format({value})' if type(string) is cst.Call and type(string.func) is cst.Attribute else short_code(module, string)
