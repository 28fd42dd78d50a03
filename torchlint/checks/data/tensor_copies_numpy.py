"""`torch.tensor(a)` on a NumPy array: a copy where `torch.as_tensor` shares the memory."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.device_names import is_cpu_device, legacy_dtype
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

# The copying constructors: torch.tensor, and the legacy ones (which imply a dtype).
_COPYING = {"torch.tensor", "torch.Tensor"} | {
    f"torch.{kind}Tensor" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
}


class TensorCopiesNumpy(Check):
    """`torch.tensor(a)` / `torch.Tensor(a)` / `torch.FloatTensor(a)` on a NumPy array."""

    code = "TL203"
    name = "tensor-copies-numpy"
    cost = Cost.ALLOCATION
    message = "`{call}` copies the NumPy array `{array}` into a new tensor; `torch.as_tensor` (or `torch.from_numpy`) shares its memory"
    fix_hint = "Use `torch.as_tensor(a)` or `torch.from_numpy(a)` (the tensor then shares memory with the array: copy explicitly if either is modified)"
    fix_safety = FixSafety.UNSAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if qualified not in _COPYING or any(arg.star for arg in node.args):
            return
        positional = [arg for arg in node.args if arg.keyword is None]
        if len(positional) != 1:
            return  # torch.FloatTensor(3, 4): sizes, not data
        keywords = {arg.keyword.value: arg for arg in node.args if arg.keyword is not None}
        if "requires_grad" in keywords or "pin_memory" in keywords:
            return  # a new leaf (or pinned buffer) is meant to own its memory
        device = keywords.get("device")
        if device is not None and not is_cpu_device(device.value, ctx):
            return  # the copy to the device happens either way
        if set(keywords) - {"dtype", "device"}:
            return
        array = positional[0].value
        if not ctx.values.is_numpy_array(array, node):
            return  # unknown origin (a parameter, an env's output) or a NumPy scalar
        wanted = _dtype_name(keywords["dtype"].value) if "dtype" in keywords else legacy_dtype(qualified)
        if wanted is not None and wanted != self._array_dtype(array):
            return  # a conversion (`np.ones(n)` is float64, `dtype=torch.float`): `as_tensor` would copy too
        self.report(
            node,
            fix=self._fix(node, qualified),
            call=short_code(ctx.module, node.func) + "(...)",
            array=short_code(ctx.module, array, 30),
        )

    def _array_dtype(self, array: cst.BaseExpression) -> str | None:
        """The dtype an array is built with when the code says so (``np.zeros(n, dtype=np.float32)``)."""
        if type(array) is cst.Name:
            binding = self.ctx.bindings.reaching(array.value, array)
            array = getattr(binding, "value", None) if binding is not None and binding.element is None else None
        if type(array) is not cst.Call:
            return None
        dtype = self.ctx.keyword(array, "dtype")
        if dtype is None and type(array.func) is cst.Attribute and array.func.attr.value == "astype" and array.args:
            dtype = array.args[0]
        if dtype is not None:
            return _dtype_name(dtype.value)
        qualified = self.ctx.qname(array.func)
        if qualified in _FLOAT64_MAKERS:
            return "float64"
        if qualified == "numpy.arange" and all(type(a.value) is cst.Integer for a in array.args):
            return "int64"
        return None

    def _fix(self, node: cst.Call, qualified: str) -> tuple[cst.Call, cst.Call] | None:
        ctx = self.ctx
        spelling = ctx.imports.spelling("torch.as_tensor", via=("torch",))
        if spelling is None:
            return None
        new = node.with_changes(func=cst.parse_expression(spelling))
        dtype = legacy_dtype(qualified)  # None for torch.tensor
        if dtype is not None:
            if ctx.keyword(node, "dtype") is not None:
                return None
            new = with_keyword(new, "dtype", cst.parse_expression(spelling.rsplit(".", 1)[0] + "." + dtype))
        return node, new


# NumPy functions whose arrays are float64 unless told otherwise.
_FLOAT64_MAKERS = frozenset(f"numpy.{name}" for name in (
    "zeros", "ones", "empty", "full", "linspace", "random.rand", "random.randn", "random.random", "random.uniform", "random.normal"))
# torch and NumPy spellings of the same element types.
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32", "short": "int16"}


def _dtype_name(expr: cst.BaseExpression) -> str | None:
    """``torch.float32``, ``np.float32``, ``"float32"``, ``torch.float`` -> "float32"."""
    if type(expr) is cst.SimpleString:
        name = expr.raw_value
    elif type(expr) is cst.Attribute:
        name = expr.attr.value
    else:
        return None
    return _ALIASES.get(name, name)
