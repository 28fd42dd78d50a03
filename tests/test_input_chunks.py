"""A streaming encoder's loop over chunks of its input frames (wenet's `forward_chunk_by_chunk`):
its own repeat, and a key-value cache grown once per chunk is low, not a decode loop's high."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext
from torchlint.analysis.impact import Cost, assess
from torchlint.analysis.loop_shapes import over_input_chunks
from torchlint.analysis.multiplicity import DECODED_TOKEN, INPUT_CHUNK, Multiplicity, Place, Repeat, Where
from torchlint.findings import HIGH, LOW

_CODE = '''
import torch

def stream(encoder, xs, chunk, left):
    caches, outputs = [], []
    num_frames = xs.size(1)
    for cur in range(0, num_frames, chunk):
        piece = xs[:, cur:cur + chunk, :]
        y, caches = encoder.forward_chunk(piece, caches, left)
        outputs.append(y)
    return torch.cat(outputs, 1)

def minibatches(model, x, mb):
    for i in range(0, x.size(0), mb):
        model(x[i:i + mb])

def plain(model, x, n):
    for t in range(0, n, 2):
        model(x[:, t])
'''


def _loops() -> tuple[FileContext, list[cst.For]]:
    ctx = FileContext(cst.parse_module(_CODE), "m.py")
    return ctx, sorted(ctx.tree.nodes(cst.For), key=ctx.tree.index)


def test_a_strided_slice_of_a_later_axis_is_a_chunk_of_input() -> None:
    ctx, (chunks, rows, indexed) = _loops()
    assert over_input_chunks(ctx.tree, chunks)
    assert ctx.places.repeat_of(chunks).kind == INPUT_CHUNK
    # (rows of a batch, the first axis, and one index per iteration, no slice: no chunks)
    assert not over_input_chunks(ctx.tree, rows)
    assert not over_input_chunks(ctx.tree, indexed)


def test_a_cache_grown_per_chunk_is_low_per_token_high() -> None:
    per_chunk = Place(Where.INFER, Multiplicity((Repeat("layer"),), INPUT_CHUNK))
    tier, reason = assess(Cost.CACHE_GROWN, per_chunk)
    assert tier == LOW and "once per chunk of input frames" in reason
    per_token = Place(Where.INFER, Multiplicity((Repeat("layer"),), DECODED_TOKEN))
    assert assess(Cost.CACHE_GROWN, per_token)[0] == HIGH
