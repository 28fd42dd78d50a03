"""The words of hidden syncs: tensor-only methods, methods whose result is no device tensor or a
boolean one, ops sized by their values, library calls that read a tensor inside them, and the
tests on sight (``torch_op``, ``plainly_python``) that the sync analysis and the checks share."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# torch functions that join tensors into one where they live (every part on the host: a host tensor; every part a mask: a mask).
JOINING_FUNCTIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.hstack", "torch.vstack"})
# Comparisons a tensor makes element by element (not `is`, `in`: a Python truth value).
ELEMENTWISE_TESTS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)

# Methods only a tensor has (NumPy arrays and Python sequences have none of them): a name
# they are called on is a tensor, whatever it was bound to.
TENSOR_ONLY_METHODS = frozenset({
    "unsqueeze", "view", "permute", "contiguous", "detach", "masked_fill", "masked_fill_", "new_zeros",
    "new_ones", "new_full", "new_empty", "new_tensor", "type_as", "index_select", "unbind", "expand",
    "expand_as", "repeat_interleave", "softmax", "log_softmax", "narrow", "size", "dim", "masked_select",
    "nonzero", "long", "bool", "sigmoid", "bmm", "numel", "unique_consecutive",
    # (NumPy arrays have no `.unique()` method: `np.unique(a)` is a function; a pandas column's,
    # `df["c"].unique()`, is not taken: only a plain name's names a tensor, DeviceTensors)
    "unique",
})
# Tensor methods whose result is not a tensor on the device.
# (Counts too: `Tensor._nnz()`, torch_sparse's `SparseTensor.nnz()`, `sparse_dim()` are Python ints.)
NOT_TENSOR_RESULTS = frozenset({"item", "tolist", "cpu", "numpy", "size", "dim", "numel", "data_ptr", "get_device",
                                "is_floating_point", "is_contiguous", "element_size", "nelement", "stride", "keys", "items", "values", "get",
                                "nnz", "_nnz", "sparse_dim", "dense_dim"})


def mask_name(name: str) -> bool:
    """``mask``, ``train_mask``, ``valid_mask``: an attribute named for a boolean mask."""
    return name == "mask" or name.endswith("_mask")


# Methods whose arguments are sizes or dimensions (or another tensor's shape): the result is the
# same values, reshaped, of the same dtype (a mask's view is a mask).
SHAPE_METHODS = frozenset({"unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "repeat", "permute", "transpose", "t",
                           "flip", "flatten", "unflatten", "view_as", "reshape_as", "tril", "triu", "contiguous", "clone", "detach"})
# Methods and functions whose result is a boolean tensor.
BOOL_METHODS = frozenset({"bool", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_not",
                          "logical_and", "logical_or", "logical_xor", "isin", "isclose", "__eq__", "__ne__"})
BOOL_FUNCTIONS = frozenset(f"torch.{name}" for name in (*BOOL_METHODS, "isneginf", "isposinf", "greater", "less", "bitwise_not"))
# Methods (reductions mostly) that Python lists, dicts and numbers do not have: called on something
# else than a Python value, the result is a tensor (or an array, which dynamo traces as one).
ARRAY_METHODS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "any", "all", "norm", "std", "var", "prod",
                           "count_nonzero", "argmax", "argmin", "abs", "sin", "cos", "exp", "log", "sqrt", "tanh",
                           "sigmoid", "relu", "round", "clamp", "clip", "floor", "ceil", "pow", "square", "flatten",
                           "reshape", "matmul", "squeeze", "cumsum", "topk", "argsort", "float", "half", "double"})
# Builtins that take a truth value of each element of what they are given.
TRUTH_BUILTINS = frozenset({"all", "any"})


# Ops whose result has as many elements as the input has non-zeros, distinct values or a
# largest value: the host must learn the size from the device (TL106), dynamo cannot trace it (TL504).
SIZED_BY_VALUES = frozenset({"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount",
                             "masked_select_nnz"})  # (torch_sparse: keeps the entries a mask selects)


# Library functions that read a device tensor's values into Python inside them: the qualified
# name -> (the parameter that must be a device tensor: its position and name; a keyword that,
# given, spares the read; what it reads). flash_attn's `unpad_input` runs `nonzero` and
# `seqlens.max().item()` on the mask (and transformers' `_get_unpad_data`, its copy); `one_hot`
# without `num_classes` reads the largest class; `equal`/`allclose` return a Python bool;
# `pack_padded_sequence` needs its lengths on the host (a list or a CPU tensor: torch/nn/utils/rnn.py).
LIBRARY_READS: dict[str, tuple[int, str, str | None, str]] = {
    "flash_attn.bert_padding.unpad_input": (1, "attention_mask", None, "`nonzero` and `.max().item()` of the mask"),
    "flash_attn.bert_padding.unpad_input_for_concatenated_sequences": (1, "attention_mask_in_length", None, "`nonzero` and `.max().item()` of the mask"),
    "transformers.modeling_flash_attention_utils._get_unpad_data": (0, "attention_mask", None, "`nonzero` and `.max().item()` of the mask"),
    "torch.nn.functional.one_hot": (0, "tensor", "num_classes", "the largest class (`max().item()`)"),
    "torch.equal": (0, "input", None, "a Python bool"),
    "torch.allclose": (0, "input", None, "a Python bool"),
    "torch.nn.utils.rnn.pack_padded_sequence": (1, "lengths", None, "the lengths, copied to the host"),
}


def library_read(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, str] | None:
    """``unpad_input(q, attention_mask)``: a library call that reads a tensor's values into
    Python (:data:`LIBRARY_READS`), with the argument read and the words for what it reads;
    None for any other call, or where the keyword that spares the read is given
    (``F.one_hot(y, num_classes=10)``) or the argument is not there."""
    qualified = ctx.qname(call.func)
    entry = LIBRARY_READS.get(qualified or "")
    if entry is None:
        return None
    position, keyword, spared_by, words = entry
    if spared_by is not None and (ctx.keyword(call, spared_by) is not None or ctx.has_star_kwargs(call)):
        return None  # `num_classes=` given (an explicit -1 is rare, taken as given)
    arg = ctx.keyword(call, keyword) or ctx.argument(call, position)
    if spared_by is not None and arg is not None and ctx.argument(call, position + 1) is not None:
        return None  # `one_hot(y, 10)`: the spared keyword given by position
    return (arg.value, words) if arg is not None and not arg.star else None


def compared_values(comparison: cst.Comparison) -> list[cst.BaseExpression]:
    """The operands of ``comparison`` whose values Python compares and a tensor among them would
    be read: none for identity and membership (``x is None``, ``mode in ("a", "b")``), and none of
    a pair with a string literal (``self._std == "learned"``: a tensor compared with a string is
    False without a read, so such a name holds a string)."""
    found: list[cst.BaseExpression] = []
    left = comparison.left
    for target in comparison.comparisons:
        right = target.comparator
        if type(target.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn):
            return []
        if type(left) not in _STRINGS and type(right) not in _STRINGS:
            found += [o for o in (left, right) if not any(o is f for f in found)]
        left = right
    return found


def string_compared(comparison: cst.Comparison) -> list[cst.BaseExpression]:
    """The operands ``comparison`` tests against string literals: ``dist == "normal"``,
    ``mode not in ("train", "eval")``. Such a value is a string (a tensor never equals one)."""
    found: list[cst.BaseExpression] = []
    left = comparison.left
    for target in comparison.comparisons:
        right, operator = target.comparator, type(target.operator)
        if operator in (cst.Equal, cst.NotEqual):
            found += [a for a, b in ((left, right), (right, left)) if type(b) in _STRINGS and type(a) not in _STRINGS]
        elif operator in (cst.In, cst.NotIn) and type(right) in (cst.Tuple, cst.List, cst.Set) and right.elements \
                and all(type(e.value) in _STRINGS for e in right.elements):
            found.append(left)
        left = right
    return found


def torch_op(ctx: FileContext, call: cst.Call) -> tuple[str | None, cst.BaseExpression | None]:
    """``torch.nonzero(x)`` or ``x.nonzero()``: (op name, the tensor it works on); (None, None)
    for anything but a ``torch.<op>`` function or a method."""
    qualified = ctx.qname(call.func)
    if qualified is not None:
        op = qualified[len("torch."):] if qualified.startswith("torch.") and qualified.count(".") == 1 else None
        return op, call.args[0].value if call.args and not call.args[0].star else None
    if type(call.func) is cst.Attribute:
        return call.func.attr.value, call.func.value
    return None, None


def plainly_python(expr: cst.BaseExpression) -> bool:
    """Is ``expr`` a Python value on sight (a literal, ``-1``, ``x.shape[0]``, ``x.size(1)``,
    ``len(xs)``)? A cheap test that spares the analysis most sizes and indexes."""
    expr_type = type(expr)
    if expr_type is cst.UnaryOperation:
        expr, expr_type = expr.expression, type(expr.expression)
    if expr_type in _LITERALS:
        return True
    if expr_type is cst.Subscript:
        expr, expr_type = expr.value, type(expr.value)
    if expr_type is cst.Attribute:
        return expr.attr.value in ("shape", "ndim", "dtype", "device")
    if expr_type is cst.Call:
        func = expr.func
        return type(func) is cst.Attribute and func.attr.value in ("size", "dim", "numel", "item") or type(func) is cst.Name and func.value in ("len", "int", "float")
    return False


def host_items(value: cst.BaseExpression) -> bool:
    """Is ``value`` a list built of Python values on sight: ``[int(s.item()) for s in sizes]``,
    ``[t.tolist() for t in ts]``, ``[0, n]``? Whatever tensors it was made from were read."""
    if type(value) in (cst.ListComp, cst.GeneratorExp):
        items = [value.elt]  # type: ignore[attr-defined]
    elif type(value) in (cst.List, cst.Tuple):
        items = [e.value for e in value.elements]  # type: ignore[attr-defined]
        if not items or any(type(e) is cst.StarredElement for e in value.elements):  # type: ignore[attr-defined]
            return False  # `[]` is filled later; `[*xs]` holds what `xs` holds
    else:
        return False
    return all(plainly_python(item) or type(item) is cst.Call and type(item.func) is cst.Attribute and item.func.attr.value == "tolist"
               for item in items)


_STRINGS = frozenset({cst.SimpleString, cst.FormattedString, cst.ConcatenatedString})
_LITERALS = frozenset({cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString, cst.Imaginary})
