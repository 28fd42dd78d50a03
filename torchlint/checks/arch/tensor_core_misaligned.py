"""Layer sizes or batch sizes that are not multiples of the tensor-core tile."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_CONV = {f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose") for d in (1, 2, 3)}
_RNN = {f"torch.nn.{kind}" for kind in ("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell")}
# qualified callee -> (position, parameter name) of each size argument
_SIZES: dict[str, tuple[tuple[int, str], ...]] = {
    "torch.nn.Linear": ((0, "in_features"), (1, "out_features")),
    # Not num_embeddings: a lookup is a gather, not a matrix multiply (an output layer
    # tied to the vocabulary is a Linear, checked as one).
    "torch.nn.Embedding": ((1, "embedding_dim"),),
    "torch.nn.MultiheadAttention": ((0, "embed_dim"),),
    "torch.utils.data.DataLoader": ((1, "batch_size"),),
    **{name: ((0, "in_channels"), (1, "out_channels")) for name in _CONV},
    **{name: ((0, "input_size"), (1, "hidden_size")) for name in _RNN},
}


_LARGE = 1024  # a misaligned size from here on is a medium-impact finding (docs/impact.md)
# With the layer's share of the file's Linear FLOPs known: medium from this share on, for a
# layer large enough to be bound by its math (a tiny model is bound by its launches).
_SHARE = 0.10
_MATH_BOUND = 256


class TensorCoreMisaligned(Check):
    """Sizes (features, channels, hidden, batch) that are not multiples of 8."""

    code = "TL402"
    name = "tensor-core-misaligned"
    cost = Cost.MISSING_PIECES
    message = "`{call}` has sizes that are not multiples of {multiple}, which keeps tensor cores from being fully used: {sizes}{share}"
    fix_hint = "Pad each size to a multiple of the tensor-core tile (8 for fp16/bf16, 64 on A100 for best results), e.g. round a vocabulary up"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        params = _SIZES.get(qualified or "")
        if params is None:
            return
        multiple = ctx.options.tensor_core_multiple
        floor = ctx.options.min_dimension
        misaligned, largest, assumed, known = [], 0, [], False
        for position, keyword in params:
            arg = ctx.argument(node, position, keyword)
            if arg is None:
                continue
            value, defaults = ctx.constants.int_value_assuming(arg.value, node)
            if value is None or value < floor or value % multiple == 0:
                continue
            assumed.extend(defaults)
            known = known or not defaults
            lower = value - value % multiple
            nearest = f"{lower} or {lower + multiple}" if lower else f"{multiple}"
            misaligned.append(f"{keyword}={value} -> {nearest}")
            largest = max(largest, value)
        if misaligned:
            callee = dotted(node.func) or qualified
            share = ctx.flops.share(node) if qualified == "torch.nn.Linear" else None
            if share is not None:
                # Worth what the layer's share of the model's FLOPs is: a 50257-wide vocabulary
                # projection is a third of a small GPT's; a 1030-wide side layer, a sliver.
                small = share < _SHARE or largest < _MATH_BOUND
            else:
                # A GEMM as large as 1024 is a visible share of a step; a small layer's, or the
                # batch dimension's, padding is not (cuBLAS pads small and odd M itself).
                small = qualified == "torch.utils.data.DataLoader" or largest < _LARGE
            said = f" (about {share:.0%} of the Linear layers' FLOPs in this file)" if share is not None else ""
            # (sizes all from config fields' defaults, where the config is built in another file:
            # the join drops the finding where every construction there passes its own value)
            # (a layer's every forward and backward where the project trains; its forwards only in an inference application)
            self.report(node, where=Where.TRAIN, untrained=Where.INFER, cost=Cost.SMALL_KERNELS if small else None,
                        unless_built=() if known else tuple(assumed),
                        call=f"{callee}(...)", multiple=multiple, sizes=", ".join(misaligned), share=said)
