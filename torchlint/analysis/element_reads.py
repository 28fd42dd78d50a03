"""A tensor read one element at a time: the variable of a loop that walks a tensor."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.members import iterated_item

# The fix for any read of a walked tensor's elements (`{tensor}`: the tensor walked).
ELEMENT_HINT = ("Each element read waits for the device again: read the whole tensor once before the loop "
                "(`{tensor}.tolist()`) and walk Python numbers, one wait instead of one per element")


def walked_tensor(ctx, receiver: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:  # type: ignore[no-untyped-def]
    """The tensor a loop walks when ``receiver`` is that loop's variable: ``top_ix[0]`` for
    ``ix`` in ``for lp, ix in zip(top_lp[0], top_ix[0]): ix.item()``; None otherwise.

    Each element read waits for the device again; one ``.tolist()`` before the loop waits once.
    """
    if type(receiver) is not cst.Name:
        return None  # `h.score.item()`: an attribute of an element, not the element itself
    binding = ctx.bindings.reaching(receiver.value, at)
    if binding is None or binding.kind not in ("for", "comp"):
        return None  # bound by an assignment: not a walk over a tensor
    source = iterated_item(binding.value, binding.element, dict_views=True)
    if source is None or ctx.values.kind(source, binding.node) is not Kind.TENSOR:
        return None  # a list, a loader, a zip of unknowns: nothing one `.tolist()` would read
    return source


# Element-wise methods: `betas[t].sqrt()` is `betas.sqrt()[t]`, so the whole table can be read once.
_ELEMENTWISE = frozenset({"sqrt", "rsqrt", "exp", "log", "float", "double", "half", "abs", "neg", "reciprocal", "sigmoid", "clone", "detach"})

# The fix for a read of one entry of a tensor the loop never changes (`{table}`: the table read whole).
TABLE_HINT = ("The table does not change inside the loop: read it whole once before the loop "
              "(`{table}.tolist()`) and index the Python list, or keep the value on the device in the arithmetic")
# The fix for a read inside a module's forward: it waits once per call, per layer.
FORWARD_HINT = ("Keep the value on the device inside `forward` (tensor arithmetic, `torch.clamp`/`torch.where` "
                "instead of Python `max`/`if`): each call of the module waits here once")


def indexed_table(ctx, receiver: cst.BaseExpression, at: cst.CSTNode) -> str | None:  # type: ignore[no-untyped-def]
    """The code of a whole table when ``receiver`` reads one entry of a tensor bound outside
    the loop and never rebound in it (``betas[t].sqrt()`` → ``betas.sqrt()``); else None."""
    methods: list[str] = []
    while type(receiver) is cst.Call and type(receiver.func) is cst.Attribute and not receiver.args:
        if receiver.func.attr.value not in _ELEMENTWISE:
            return None  # `x[t].sum()`: reading a reduction of the entry, not the entry
        methods.append(receiver.func.attr.value)
        receiver = receiver.func.value
    if type(receiver) is not cst.Subscript or type(receiver.value) is not cst.Name:
        return None
    table = receiver.value
    loop = ctx.loops.hot_loop(at)
    bindings = ctx.bindings.lookup(table.value, at)
    if not bindings or loop is None or any(ctx.tree.is_inside(b.node, loop) for b in bindings):
        return None  # rebound within the loop (or unknown): the table may change each step
    if ctx.values.kind(table, at) is not Kind.TENSOR:
        return None  # a Python list is indexed without a read
    return table.value + "".join(f".{m}()" for m in reversed(methods))
