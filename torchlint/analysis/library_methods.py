"""What torch's own layer classes run of the modules their subclasses keep: ``nn.TransformerEncoderLayer._sa_block``
calls ``self.self_attn(...)``, so a project subclass that keeps its own attention there (audiocraft's
``StreamingTransformerLayer``: ``self.self_attn = StreamingMultiheadAttention(...)``) runs that module's ``forward``
wherever its ``forward`` calls ``self._sa_block(...)`` (``ProjectClasses.library_method_callees``)."""

from __future__ import annotations

_ENCODER_LAYER = {
    "forward": ("self_attn", "linear1", "linear2", "norm1", "norm2"),
    "_sa_block": ("self_attn",),
    "_ff_block": ("linear1", "linear2"),
}
_DECODER_LAYER = {
    "forward": ("self_attn", "multihead_attn", "linear1", "linear2", "norm1", "norm2", "norm3"),
    "_sa_block": ("self_attn",),
    "_mha_block": ("multihead_attn",),
    "_ff_block": ("linear1", "linear2"),
}
# torch's layer class (its public names and its module's) -> its method -> the attributes of `self` whose modules it calls
LIBRARY_METHODS: dict[str, dict[str, tuple[str, ...]]] = {
    "torch.nn.TransformerEncoderLayer": _ENCODER_LAYER,
    "torch.nn.modules.transformer.TransformerEncoderLayer": _ENCODER_LAYER,
    "torch.nn.TransformerDecoderLayer": _DECODER_LAYER,
    "torch.nn.modules.transformer.TransformerDecoderLayer": _DECODER_LAYER,
}


def called_attributes(base: tuple, method: str) -> tuple[str, ...]:
    """The attributes whose modules ``method`` of the library class ``base`` (a summary's ``("import", 0, name)``) calls."""
    if base[0] != "import" or base[1] != 0:
        return ()
    return LIBRARY_METHODS.get(str(base[2]), {}).get(method, ())
