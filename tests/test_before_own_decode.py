"""What a generation function does on its first lines, before its own token loop, runs once
per generated sequence: ``Position.BEFORE_DECODE`` however fresh the function's step is
(DALLE-pytorch's ``torch.tensor([[0]]).cuda()`` at the top of ``generate_texts``, called once
per prompt; issue 32). The same upload inside the token loop, or before a loop that decodes
nothing, stays mid-step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext
from torchlint.analysis.multiplicity import Position

_CODE = """
import torch


class TextModel(torch.nn.Module):
    @torch.no_grad()
    def generate_texts(self, tokenizer, text=None):
        if text is None:
            tokens = torch.tensor([[0]]).cuda()
        else:
            tokens = torch.tensor(tokenizer.encode(text)).cuda().unsqueeze(0)
        for _ in range(tokens.shape[1], self.seq_len):
            logits = self.to_logits(self.body(self.emb(tokens)))[:, -1]
            sample = torch.multinomial(logits.softmax(-1), 1)
            tokens = torch.cat((tokens, sample), dim=-1)
            stop = torch.tensor([[1]]).cuda()
        return tokens

    def score(self, texts):
        start = torch.tensor([[0]]).cuda()
        total = self.to_logits(self.emb(start))
        for text in texts:
            total = total + self.to_logits(self.emb(text))
        return total
"""


def _positions() -> dict[tuple[str, int], Position | None]:
    ctx = FileContext(cst.parse_module(_CODE), "m.py")
    found = {}
    for call in ctx.tree.nodes(cst.Call):
        if ctx.method_name(call) == "cuda" and "[[" in cst.Module([]).code_for_node(call):
            function = ctx.tree.enclosing_function(call)
            key = (function.name.value, len(found))
            found[key] = ctx.places.position(call, ctx.loops.hot_loop(call) or function)
    return found


def test_an_upload_on_a_generation_functions_first_line_is_once_per_sequence() -> None:
    positions = _positions()
    assert positions[("generate_texts", 0)] is Position.BEFORE_DECODE


def test_the_upload_in_the_token_loop_or_before_a_loop_that_decodes_nothing_is_not() -> None:
    positions = _positions()
    assert positions[("generate_texts", 1)] is not Position.BEFORE_DECODE
    assert positions[("score", 2)] is not Position.BEFORE_DECODE
