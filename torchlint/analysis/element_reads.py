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
    source = iterated_item(binding.value, binding.element)
    if source is None or ctx.values.kind(source, binding.node) is not Kind.TENSOR:
        return None  # a list, a loader, a zip of unknowns: nothing one `.tolist()` would read
    return source
