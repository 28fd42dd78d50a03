"""NumPy arrays versus NumPy scalars (TL203): a mixin of ValueKinds, which supplies
``ctx`` and ``kind``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item
from torchlint.analysis.names import canonical, dotted, last_segment as _last_segment

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# pandas: `frame.values` and `frame.to_numpy()` are NumPy arrays.
_DATAFRAME_TO_NUMPY = {"values", "to_numpy"}


class ArrayFacts:
    """Which NumPy values are arrays (a copy into a tensor), which are scalars."""

    ctx: FileContext

    def is_numpy_array(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0) -> bool:
        """Is ``expr`` a NumPy *array* (Kind.NUMPY, and not one of the NumPy scalars that
        ``np.mean(a)``, ``a.sum()``, ``np.float32(x)``, ``np.random.rand()`` return)?"""
        at = at or expr
        if _depth > 4 or self.kind(expr, at) is not Kind.NUMPY:
            return False
        if isinstance(expr, cst.Call):
            qualified = canonical(self.ctx.qname(expr.func))
            positional = sum(1 for a in expr.args if a.keyword is None and not a.star)
            keywords = {a.keyword.value for a in expr.args if a.keyword is not None}
            if qualified is not None and qualified.startswith("numpy."):
                last = _last_segment(qualified)
                if last in _NUMPY_SCALAR_TYPES:
                    return last in _NUMPY_DTYPES and self._array_argument(expr, at, _depth)  # np.float32(array)
                if last in _NUMPY_REDUCTIONS:
                    return "axis" in keywords or positional > 1 or "keepdims" in keywords
                if qualified.startswith("numpy.random.") and last in _NUMPY_RANDOM_SIZE:
                    return "size" in keywords or positional > _NUMPY_RANDOM_SIZE[last] or any(a.star for a in expr.args)
                return True
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _NUMPY_REDUCTIONS:
                return "axis" in keywords or positional > 0 or "keepdims" in keywords
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _NUMPY_RANDOM_SIZE:
                return "size" in keywords or positional > _NUMPY_RANDOM_SIZE[expr.func.attr.value]
            return True
        if isinstance(expr, cst.Subscript):
            return self.is_numpy_array(expr.value, at, _depth + 1) and not all(self._integer_index(e, at) for e in expr.slice)
        if isinstance(expr, cst.BinaryOperation):
            return any(self.is_numpy_array(side, at, _depth + 1) for side in (expr.left, expr.right))
        if isinstance(expr, (cst.Name, cst.Attribute)) and not (isinstance(expr, cst.Attribute) and expr.attr.value in _DATAFRAME_TO_NUMPY):
            name = dotted(expr)
            if name is None:
                return True
            for binding in self.ctx.bindings.lookup(name, at):
                if binding.kind in ("for", "comp") and self.ctx.tree.is_inside(at, _loop_of(self.ctx, binding.node)) and self._one_dimensional(
                        _unwrapped(iterated_item(binding.value, binding.element, dict_views=False)), binding.node, _depth + 1):
                    return False  # `for v in np.arange(n) + 1`: each item of a one-dimensional array is a NumPy scalar
                if binding.value is None or binding.kind not in ("assign", "augassign"):
                    continue
                value = binding.value
                if binding.element is not None:
                    if not isinstance(value, (cst.Tuple, cst.List)) or binding.element >= len(value.elements):
                        continue
                    value = value.elements[binding.element].value
                if self.kind(value, binding.node) is Kind.NUMPY and not self.is_numpy_array(value, binding.node, _depth + 1):
                    return False  # bound to a NumPy scalar somewhere
        return True

    def _one_dimensional(self, expr: cst.BaseExpression | None, at: cst.CSTNode, depth: int) -> bool:
        """Is ``expr`` a one-dimensional NumPy array on sight: ``np.arange(n)``, ``np.linspace``,
        ``np.random.permutation(n)``, ``np.array([1, 2])``, a slice, ``.copy()``, ``.astype(...)``,
        ``.flatten()`` of one, one plus a number, a name of this function every binding of which is one?"""
        if expr is None or depth > 6:
            return False
        ctx = self.ctx
        if type(expr) is cst.Call:
            qualified = canonical(ctx.qname(expr.func)) or ""
            if qualified in _ONE_DIMENSIONAL:
                return True
            if qualified in ("numpy.array", "numpy.asarray") and expr.args and type(expr.args[0].value) in (cst.List, cst.Tuple):
                return all(type(e) is cst.Element and type(e.value) not in (cst.List, cst.Tuple, cst.ListComp) for e in expr.args[0].value.elements)  # type: ignore[attr-defined]
            if qualified or type(expr.func) is not cst.Attribute:
                return False
            method = expr.func.attr.value
            if method in ("flatten", "ravel"):
                return self.kind(expr.func.value, at) is Kind.NUMPY
            return method in ("copy", "astype") and self._one_dimensional(expr.func.value, at, depth + 1)
        if type(expr) is cst.Subscript:
            return len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Slice and self._one_dimensional(expr.value, at, depth + 1)
        if type(expr) is cst.BinaryOperation:
            # (an array plus a number, or a NumPy scalar: `t0 + np.arange(T)`, still one dimension)
            return any(self._one_dimensional(side, at, depth + 1) and not self.is_numpy_array(other, at, depth + 1)
                       for side, other in ((expr.left, expr.right), (expr.right, expr.left)))
        if type(expr) is cst.Name:
            bound = ctx.bindings.reaching_each(expr.value, at)
            return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None
                                       and ctx.tree.scope_of(b.node) is ctx.tree.scope_of(at)
                                       and self._one_dimensional(b.value, b.node, depth + 1) for b in bound)
        return False

    def _array_argument(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``np.float32(x)`` with a single argument that is an array (or a list literal)."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return False
        value = call.args[0].value
        return self.is_sequence_literal(value, at) or self.is_numpy_array(value, at, depth + 1)

    def _integer_index(self, element: cst.SubscriptElement, at: cst.CSTNode) -> bool:
        """``a[0]``, ``a[-1]``, ``a[i]``: an index that may pick a single element; not
        ``a[mask]`` with an array (or a name that says it holds one: ``mask``, ``indices``)."""
        if not _integer_index(element):
            return False
        value = element.slice.value  # type: ignore[attr-defined]
        if not isinstance(value, cst.Name):
            return True
        if _names_index_array(value.value):
            return False
        return self.kind(value, at) not in (Kind.NUMPY, Kind.TENSOR)

    def is_sequence_literal(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """A list/tuple literal or list comprehension (data, not a size), or a name every
        binding of which is one (``xs = [1.0, 2.0]``)."""
        if isinstance(expr, (cst.List, cst.Tuple, cst.ListComp)):
            return True
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return False
        bound = self.ctx.bindings.lookup(name, at or expr)
        return bool(bound) and all(
            b.kind == "assign" and b.element is None and isinstance(b.value, (cst.List, cst.Tuple, cst.ListComp)) for b in bound
        )


# NumPy functions that return a one-dimensional array (each of its items a NumPy scalar).
_ONE_DIMENSIONAL = frozenset({"numpy.arange", "numpy.linspace", "numpy.logspace", "numpy.geomspace", "numpy.random.permutation", "numpy.flatnonzero"})
# Iterating these iterates what they wrap: `for t in tqdm(np.arange(n))`.
_PASSING = frozenset({"tqdm", "reversed", "list", "sorted"})


def _loop_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The ``for`` statement, or the whole comprehension a ``for`` clause belongs to."""
    while type(node) is cst.CompFor:
        parent = ctx.tree.parent(node)
        if parent is None:
            break
        node = parent
    return node


def _unwrapped(iterable: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """What ``tqdm(x)``, ``reversed(x)``, ``list(x)`` iterate: ``x``."""
    while type(iterable) is cst.Call and (dotted(iterable.func) or "").split(".")[-1] in _PASSING and iterable.args:
        iterable = iterable.args[0].value
    return iterable


# NumPy scalar types: np.float32(x) is a scalar, not an array.
_NUMPY_SCALAR_TYPES = {
    "float16", "float32", "float64", "float_", "double", "single", "half", "longdouble",
    "int8", "int16", "int32", "int64", "int_", "intc", "uint8", "uint16", "uint32", "uint64",
    "bool_", "complex64", "complex128", "str_", "bytes_", "isscalar", "ndim", "size", "shape",
}
# The scalar-type constructors among them: given an array they return an array.
_NUMPY_DTYPES = _NUMPY_SCALAR_TYPES - {"isscalar", "ndim", "size", "shape"}
# Methods of numpy.random.Generator / RandomState that draw samples (NumPy-only names, or
# names whose Python `random.Random` twin returns a scalar anyway).
_GENERATOR_METHODS = {
    "normal", "integers", "standard_normal", "permutation", "uniform", "random", "choice", "binomial",
    "poisson", "exponential", "beta", "gamma", "lognormal", "laplace", "multivariate_normal",
    "dirichlet", "multinomial", "randn", "rand", "randint", "random_sample", "standard_cauchy",
    "standard_t", "logistic", "geometric",
}
# Reductions that return a scalar unless an axis is given.
_NUMPY_REDUCTIONS = {
    "sum", "mean", "max", "min", "std", "var", "prod", "median", "argmax", "argmin", "average",
    "amax", "amin", "nanmean", "nansum", "nanmax", "nanmin", "nanstd", "count_nonzero", "trace",
    "all", "any", "ptp", "norm", "det", "percentile", "quantile", "nanmedian",
}
# np.random functions that return a scalar without `size` (the value: how many positional
# arguments come before `size`).
_NUMPY_RANDOM_SIZE = {
    "rand": 0, "randn": 0, "random": 0, "random_sample": 0, "uniform": 2, "normal": 2, "randint": 2,
    "choice": 1, "beta": 2, "binomial": 2, "poisson": 1, "exponential": 1, "gamma": 2,
    "integers": 2, "standard_normal": 0, "laplace": 2, "lognormal": 2, "geometric": 1,
}


def _names_index_array(name: str) -> bool:
    """``mask``, ``valid_mask``, ``indices``, ``idxs``: a name for an index array."""
    last = name.lower()
    return "mask" in last or last.endswith(("indices", "idxs"))


def _integer_index(element: cst.SubscriptElement) -> bool:
    """``a[0]``, ``a[-1]``, ``a[i]``: an index that may pick a single element."""
    index = element.slice
    if not isinstance(index, cst.Index):
        return False
    value = index.value
    if isinstance(value, cst.UnaryOperation):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Name))
