"""Training samples tokenized with `padding="max_length"`: every sequence padded to the maximum length."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.data_preparation import file_trains, prepares_data
from torchlint.analysis.impact import Cost, Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_DEPTH = 3  # names followed to the literal they are bound to (`padding = "max_length"`)


class PadToMaxLength(Check):
    """`tokenizer(..., padding="max_length")` in training data preparation: every sequence padded to the maximum length."""

    code = "TL205"
    name = "pad-to-max-length"
    cost = Cost.PADDED_TO_MAX
    message = ("`{call}` pads every sequence to {length} ({place}): each step's forward and backward run over the "
               "padding, however short the batch's sequences are")
    fix_hint = ("Tokenize without padding (or `padding=\"longest\"` per batch) and pad each batch to its longest "
                "sequence in the collator: `DataCollatorWithPadding(tokenizer)` or "
                "`DataCollatorForSeq2Seq(tokenizer, pad_to_multiple_of=8)`")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        padding = ctx.keyword(node, "padding")
        if padding is None or not _max_length(ctx, padding.value, node):
            return  # dynamic padding (`True`, "longest"), none, or a switch the user sets (`"max_length" if a else False`)
        if ctx.references("torch_xla", prefix=True):
            return  # XLA (TPUs) compiles a graph per shape: a fixed length is what it needs
        function = ctx.tree.enclosing_function(node)
        owner = ctx.tree.enclosing_class(function) if function is not None else None
        if owner is not None and ctx.is_module_class(owner.name.value):
            return  # a model's own input (a text encoder's 77 CLIP tokens): the length is the model's contract
        where_words = prepares_data(ctx, node)
        trains = file_trains(ctx)
        # Samples a training run of this file uses: every step pays. Samples of a dataset whose
        # training is in another file: every step of whatever loop takes its batches. Anything
        # else (a prompt padded for generation, an evaluation script): inference, a small matter.
        where = Where.TRAIN if where_words and trains else Where.BATCH if where_words else Where.INFER
        length = ctx.keyword(node, "max_length")
        self.report(node, where=where, call=f"{short_code(ctx.module, node.func)}(..., padding={short_code(ctx.module, padding.value)})",
                    place=where_words or "outside any training data preparation",
                    length=f"`{short_code(ctx.module, length.value)}`" if length is not None else "the tokenizer's `model_max_length`")


def _max_length(ctx, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``"max_length"``, ``PaddingStrategy.MAX_LENGTH``, or a name every binding of which is one."""
    if isinstance(value, cst.SimpleString):
        return value.evaluated_value == "max_length"
    name = dotted(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    if name is None:
        return False
    if name.endswith("PaddingStrategy.MAX_LENGTH"):
        return True
    if not isinstance(value, cst.Name) or depth >= _DEPTH:
        return False
    bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None]
    return bool(bound) and all(_max_length(ctx, b.value, b.node, depth + 1) for b in bound)
