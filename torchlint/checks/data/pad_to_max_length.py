"""Training samples padded to a fixed maximum length: tokenized with `padding="max_length"`, or padded by hand."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.data_preparation import file_trains, prepares_data
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

_DEPTH = 3  # names followed to the literal they are bound to (`padding = "max_length"`)


class PadToMaxLength(Check):
    """`tokenizer(..., padding="max_length")`, or `ids + [pad] * (max_len - len(ids))`, in training data preparation: every sequence padded to the maximum length."""

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


    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        """``tokens + [pad] * (max_len - len(tokens))`` (or ``[pad for _ in range(...)]``) where a dataset
        prepares its samples: each sample padded by hand to a fixed length (LoRA's ``padding_tokens``,
        called from ``FT_Dataset.__getitem__`` with ``self.max_seq_length``)."""
        if type(node.operator) is cst.Add:
            self._hand_padded(node, next((side for side in (node.right, node.left) if _hand_padding(self.ctx, side, node)), None))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        """``input_ids += [pad] * (self.max_length - len(input_ids))`` (minimind's ``SFTDataset.__getitem__``)."""
        if type(node.operator) is cst.AddAssign:
            self._hand_padded(node, node.value if _hand_padding(self.ctx, node.value, node) else None)

    def _hand_padded(self, node: cst.BinaryOperation | cst.AugAssign, padded: cst.BaseExpression | None) -> None:
        ctx = self.ctx
        if padded is None:
            return
        where_words = prepares_data(ctx, node)
        if where_words is None:
            return  # (a sequence padded outside data preparation: a prompt, a model's own input, a fixed-size table)
        if ctx.references("torch_xla", prefix=True):
            return  # XLA compiles a graph per shape: a fixed length is what it needs
        length = _padded_to(padded)
        self.report(node, where=Where.TRAIN if file_trains(ctx) else Where.BATCH, call=short_code(ctx.module, node, limit=60),
                    place=where_words, length=f"`{short_code(ctx.module, length)}`", hint=_HAND_HINT)


def _padded_to(padding: cst.BaseExpression) -> cst.BaseExpression:
    """The length ``L`` of ``[pad] * (L - len(x))`` or ``[pad for _ in range(L - len(x))]``."""
    count = padding.right if type(padding) is cst.BinaryOperation else padding.for_in.iter.args[0].value  # type: ignore[attr-defined]
    return count.left  # type: ignore[attr-defined]


def _hand_padding(ctx, side: cst.BaseExpression, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Is ``side`` a list of pad items filling a sequence up to a fixed length: ``[pad] * (L - len(x))``
    or ``[pad for _ in range(L - len(x))]``, where ``L`` is no length the code computes where it pads
    (``max_len = max(len(s) for s in batch)``: each batch padded to its own longest, the right way)?"""
    if type(side) is cst.BinaryOperation and type(side.operator) is cst.Multiply and type(side.left) is cst.List \
            and len(side.left.elements) == 1:
        count = side.right
    elif type(side) is cst.ListComp and not side.for_in.inner_for_in and type(side.for_in.iter) is cst.Call \
            and dotted(side.for_in.iter.func) == "range" and len(side.for_in.iter.args) == 1:
        count = side.for_in.iter.args[0].value
    else:
        return False
    if type(count) is not cst.BinaryOperation or type(count.operator) is not cst.Subtract or not _a_length(ctx, count.right, at):
        return False
    return _fixed_length(ctx, count.left, at)


def _a_length(ctx, value: cst.BaseExpression, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """``len(x)``, or a name every binding of which is one (``token_len = len(pad_tokens)``)."""
    if type(value) is cst.Name:
        bound = ctx.bindings.lookup(value.value, at)
        return bool(bound) and all(b.kind == "assign" and b.element is None and _a_length(ctx, b.value, b.node) for b in bound
                                   if type(b.value) is cst.Call)  # (only calls: no name bound to a name followed)
    return type(value) is cst.Call and dotted(value.func) == "len"


def _fixed_length(ctx, length: cst.BaseExpression, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """A length fixed for the run: a literal, a constant or setting, an attribute the object keeps
    (``self.max_seq_length``), or a parameter; not a name bound where it pads from what it pads
    (``max(...)``, ``len(...)``, a shape)."""
    if type(length) is cst.Integer:
        return True
    if type(length) is cst.Attribute:
        return True  # `self.max_len`, `args.max_seq_length`, `cfg.data.max_len`
    if type(length) is not cst.Name:
        return False  # (a computed length, `max(lengths)`, `len(x) + 1`: the sample's or the batch's own)
    bound = ctx.bindings.lookup(length.value, at)
    if not bound:
        return True  # a module constant imported, or a global set elsewhere
    return all(b.kind == "param" or b.kind == "assign" and b.element is None and (type(b.value) is cst.Integer or type(b.value) is cst.Attribute)
               for b in bound)


_HAND_HINT = ("Return each sample unpadded and pad each batch to its own longest sequence in a `collate_fn` "
              "(`torch.nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=pad)`), with a mask from the lengths")

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
