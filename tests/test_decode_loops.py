"""Issue 32, items 3-4 as the first unseen-code review found them: decode loops whose model
is of unknown type, reads repeated per beam and candidate within a decoded token, loops around
whole generations, and loops that only look like decode loops. (Guards at helpers' call sites and
the kind of a training loop: test_training_step_loops.py; denoising loops: test_denoising_loops.py.)"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.multiplicity import Where
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


def _ctx(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def _loops(ctx: FileContext) -> list[cst.CSTNode]:
    return sorted((*ctx.tree.nodes(cst.For), *ctx.tree.nodes(cst.While)), key=ctx.tree.index)


DECODES = [
    # whisper: the model is an attribute of unknown type behind a method; the decoder remakes the tokens
    "def run(self, tokens, audio):\n    for i in range(self.sample_len):\n        logits = self.inference.logits(tokens, audio)\n"
    "        logits = logits[:, -1]\n        tokens, done = self.decoder.update(tokens, logits)\n",
    # nanoGPT: an untyped parameter, a cropped context, sampled from and concatenated
    "def generate(model, idx, n, block):\n    for _ in range(n):\n        idx_cond = idx[:, -block:]\n        out = model(idx_cond)[:, -1]\n"
    "        nxt = torch.multinomial(out.softmax(-1), 1)\n        idx = torch.cat([idx, nxt], dim=1)\n    return idx\n",
    # llama: the tokens filled in place, one position per iteration
    "def generate(self, tokens, total):\n    for cur in range(1, total):\n        logits = self.model.forward(tokens[:, cur - 1:cur], cur)\n"
    "        nxt = torch.argmax(logits[:, -1], dim=-1)\n        tokens[:, cur] = nxt\n",
    # a while loop growing a list of token ids
    "def sample(net, seq):\n    while len(seq) < 100:\n        probs = net(torch.tensor(seq)).softmax(-1)\n        seq.append(int(probs.argmax()))\n",
    # the model call and the sampling in a helper of this file that returns the sample
    "def next_token(net, seq):\n    logits = net(seq)[:, -1]\n    choice = torch.multinomial(logits.softmax(-1), 1)\n    return choice\n\n"
    "def write(net, seq, n):\n    for _ in range(n):\n        tok = next_token(net, seq)\n        seq = torch.cat([seq, tok], dim=1)\n    return seq\n",
]
NOT_DECODES = [
    # scoring a list of inputs: the result is collected, never fed back
    "def score(model, xs):\n    best = []\n    for x in xs:\n        logits = model(x)\n        best.append(logits.argmax(-1))\n    return best\n",
    # an RNN over time steps: the state is fed back, but nothing is sampled: no logits
    "def encode(cell, xs, h):\n    for t in range(len(xs)):\n        out, h = cell(xs[t], h)\n    return h\n",
    # the same loop inside a model's forward runs within the step, not as one
    "class M:\n    def forward(self, idx):\n        for _ in range(4):\n            logits = self.head(idx)\n"
    "            idx = torch.cat([idx, logits.argmax(-1)], 1)\n        return idx\n",
    # tensor methods only: no model is called
    "def grow(x):\n    for _ in range(4):\n        probs = x.float().softmax(-1)\n        x = torch.cat([x, probs.argmax(-1)])\n",
    # a helper that samples but returns the model's features, not the sample: nothing sampled is fed back
    "def embed(net, x):\n    feats = net(x)\n    torch.multinomial(feats.softmax(-1), 1)\n    return feats\n\n"
    "def refine(net, x, n):\n    for _ in range(n):\n        h = embed(net, x)\n        x = torch.cat([x, h], dim=1)\n    return x\n",
]


@pytest.mark.parametrize("code", DECODES)
def test_a_loop_feeding_a_model_its_own_samples_is_an_inference_step(code: str) -> None:
    ctx = _ctx("import torch\n" + code)
    [loop] = _loops(ctx)  # (a helper's body has no loop: the one loop is the decode loop)
    assert ctx.loops.decodes(loop) and ctx.loops.is_hot(loop)
    assert ctx.loops.where(loop) is Where.INFER
    assert ctx.places.repeat_of(loop).kind == "decoded token"


@pytest.mark.parametrize("code", NOT_DECODES)
def test_loops_that_do_not_decode(code: str) -> None:
    ctx = _ctx("import torch\n" + code)
    [loop] = _loops(ctx)
    assert not ctx.loops.decodes(loop) and not ctx.loops.is_hot(loop)


def test_a_decode_loop_under_no_grad_is_a_sampling_loop_not_an_evaluation() -> None:
    """A known model in the same file, under ``no_grad``: the decode loop's reads are per
    decoded token (was: "every step of an evaluation loop", low)."""
    code = ("import torch\nmodel = torch.nn.Linear(4, 4).cuda()\n\n@torch.no_grad()\ndef generate(idx, steps):\n"
            "    for _ in range(steps):\n        logits = model(idx)\n        nxt = logits.argmax(-1)\n"
            "        for cand in logits.topk(4).indices:\n            print(cand.item())\n"
            "        idx = torch.cat([idx, nxt], 0)\n    return idx\n")
    [found] = lint_source(code, "gen.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert found.impact == "high"
    assert "in a sampling loop" in found.message and "(per candidate per decoded token)" in found.message


@pytest.mark.parametrize(("loop", "kind"), [
    ("for logprob, token in zip(*logprobs[i].topk(k)):", "candidate"),  # named like tokens: the k best still
    ("for i in range(n_audio):", "batch row"),  # `n_audio = tokens.shape[0] // beam`: the batch's rows
])
def test_what_a_loop_inside_a_decoder_goes_over(loop: str, kind: str) -> None:
    ctx = _ctx(f"def f(tokens, logprobs, beam, k, i):\n    n_audio = tokens.shape[0] // beam\n    {loop}\n        pass\n")
    [node] = ctx.tree.nodes(cst.For)
    assert ctx.places.repeat_of(node).kind == kind


def test_the_untyped_decoder_project_reads_per_candidate_per_beam_per_token() -> None:
    root = FIXTURES / "projects" / "multiplicity"
    found = [f for f in lint_paths([root], from_table({"select": ["TL101"], "min-impact": "low"}, root)).findings
             if Path(f.path).name == "transcribe.py"]
    assert {f.line: f.impact for f in found} == {30: "high", 32: "high", 33: "high"}
    item = next(f for f in found if f.line == 33)
    assert "in `BeamDecoder.update()`" in item.message and "run every step from a sampling loop" in item.message
    assert "per candidate per beam per batch row per decoded token" in item.message


GENERATOR_MODULE = """import torch
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, max_len: int = 20):
        return self._generate(tokens, max_len)

    def _generate(self, tokens, max_len):
        for step in range(max_len):
            logits = self.model(tokens)
            next_token = logits[:, -1].argmax(-1)
            if next_token[0].item() == 2:
                break
            tokens = torch.cat([tokens, next_token[:, None]], 1)
        return tokens
"""


def test_a_generator_modules_decode_loop_is_a_step_though_its_forward_calls_it() -> None:
    """fairseq's SequenceGenerator is an ``nn.Module`` whose ``forward`` calls ``_generate``:
    its loop runs the model once per decoded token, a step of its own (a loop in a method the
    forward calls that does not decode runs within the model's step)."""
    ctx = _ctx(GENERATOR_MODULE)
    decode = next(loop for loop in _loops(ctx) if type(loop) is cst.For)
    assert ctx.loops.within_forward(decode) is False and ctx.loops.is_hot(decode)
    (read,) = lint_source(GENERATOR_MODULE, "generator.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert read.line == 17 and read.impact == "medium" and "in a sampling loop" in read.message


MODEL = """import torch


class Transformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x, pos):
        return self.out(x)
"""

GENERATIONS = """import torch

from model import Transformer


def device_sync(device):
    if "cuda" in device:
        torch.cuda.synchronize(device)


def decode_one_token(model: Transformer, x, pos):
    logits = model(x, pos)
    probs = torch.softmax(logits[:, -1], dim=-1)
    return torch.argmax(probs, dim=-1, keepdim=True), probs


def decode_n_tokens(model: Transformer, cur, pos, num_new_tokens):
    new_tokens = []
    for i in range(num_new_tokens):
        next_token, next_prob = decode_one_token(model, cur, pos)
        pos += 1
        new_tokens.append(next_token.clone())
        cur = next_token.clone()
    return new_tokens


def draft_and_verify(model: Transformer, draft: Transformer, cur, pos, k):
    guesses = []
    for i in range(k):
        next_token, next_prob = decode_one_token(draft, cur, pos)
        guesses.append(next_token)
        cur = next_token
    target = model(torch.cat(guesses, dim=-1), pos)
    accepted = (target.argmax(-1) == torch.cat(guesses, dim=-1)).nonzero()
    return accepted[0].item()


def prefill(model: Transformer, x, pos):
    return decode_one_token(model, x, pos)[0]


@torch.no_grad()
def generate(model: Transformer, prompt, max_new_tokens, draft=None):
    pos = torch.tensor([prompt.size(-1)], device=prompt.device)
    prompt = prefill(model, prompt, pos)
    if draft is not None:
        start = pos.item()
        while start < max_new_tokens:
            start += draft_and_verify(model, draft, prompt, pos, 4)
        return prompt
    decode_n_tokens(model, prompt, pos, max_new_tokens)
    return pos.item()


def main(prompts, num_samples, device):
    model, draft = Transformer().to(device), Transformer().to(device)
{loop}
"""


@pytest.mark.parametrize("loop", [
    "    for i in range(num_samples):\n        device_sync(device)\n        y = generate(model, prompts[i], 200)\n",
    "    for prompt in prompts:\n        y = generate(model, prompt, 200, draft)\n",
])
def test_a_loop_around_whole_generations_is_no_step_its_decode_loops_are(tmp_path: Path, loop: str) -> None:
    """gpt-fast's ``for i in range(num_samples): generate(...)``: the per-sample reads and
    synchronizes run once per generation, not per token; a ``while`` loop around a
    speculative draft loop (the draft-and-verify step) stays the step: its read is per step.
    Before, the loop over samples was the step: `device_sync`'s synchronize (line 8) and
    `generate`'s two `pos.item()` (lines 47, 52) were reported "every step"."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "gen.py").write_text(GENERATIONS.format(loop=loop))
    found = lint_paths([tmp_path], from_table({"select": ["TL101", "TL103"], "min-impact": "low"}, tmp_path)).findings
    assert {(Path(f.path).name, f.line) for f in found} == {("gen.py", 35)}  # `accepted[0].item()`, per draft-and-verify step


# nanochat's Engine: the next input built row by row from the sampled tokens, the model's
# result named logits; and a top-k filter over scores (dgl-ke) whose nested row loop makes
# names from everything, with no model's logits: not a decode loop.
_ROWS = (
    "def generate(self, rows, logits):\n    while True:\n        sampled = sample_next(logits).tolist()\n        column = []\n"
    "        for i, row in enumerate(rows):\n            nxt = row.forced.popleft() if row.forced else sampled[i]\n"
    "            column.append(nxt)\n        ids = torch.tensor(column).unsqueeze(1)\n"
    "        logits = self.model.forward(ids, kv_cache=self.cache)[:, -1, :]\n"
)
_SCORES = (
    "def topk(self, g, score, sidx, idx, head, k, n):\n    cur_k, size, res_head = 0, k, []\n    while cur_k < n:\n"
    "        cur_sidx = sidx[cur_k:cur_k + size]\n        cur_score = score[cur_k:cur_k + size]\n        cur_idx = idx[cur_sidx]\n"
    "        cur_idx = floor_divide(cur_idx, n)\n        cur_head = head[cur_idx]\n        for i in range(cur_head.shape[0]):\n"
    "            h = cur_head[i]\n            if g.has(h):\n                res_head.append(h)\n"
    "        cur_k += size\n        size = k - len(res_head)\n"
)


@pytest.mark.parametrize(("code", "decodes"), [(_ROWS, True), (_SCORES, False)])
def test_a_column_built_row_by_row_from_the_samples_feeds_the_model(code: str, decodes: bool) -> None:
    ctx = _ctx("import torch\n" + code)
    outer = _loops(ctx)[0]
    assert ctx.loops.decodes(outer) is decodes
    if decodes:
        assert ctx.places.repeat_of(outer).kind == "decoded token"


POSITION_CACHE = '''import torch


class Cache:
    def __init__(self):
        self.lengths = torch.zeros(4, dtype=torch.long, device="cuda")

    def position(self):
        return self.lengths[0].item()
'''
POSITION_MODEL = '''import torch


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 16)

    def forward(self, ids, cache=None):
        start = 0 if cache is None else cache.position()
        return self.emb(ids + start)
'''
POSITION_DECODE = '''import torch
from cache import Cache
from model import Decoder


def generate(ids, steps):
    model, cache = Decoder().cuda(), Cache()
    for _ in range(steps):
        logits = model(ids, cache=cache)
        ids = torch.argmax(logits[:, -1], -1, keepdim=True)
        {read}
    return ids
'''
POSITION_TRAIN = '''import torch
from cache import Cache
from model import Decoder


def train(loader):
    model, cache = Decoder().cuda(), Cache()
    opt = torch.optim.SGD(model.parameters())
    for ids in loader:
        model(ids.cuda(), cache=cache).sum().backward()
        opt.step()
'''


@pytest.mark.parametrize("read", ["print(ids[0, 0].item())", "pass"])
def test_a_read_once_per_decoded_token_says_so_wherever_it_is(tmp_path: Path, read: str) -> None:
    """nanochat's `kv_cache.get_pos()`, a read in a cache's method that the model's forward
    calls where it is passed a cache, reached from a decode loop in a third file: once per
    decoded token, which the message says from the loop's kind (the step is a token), as a read
    in the decode loop itself does; the same read from a training loop runs once per step."""
    config = from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)
    (tmp_path / "cache.py").write_text(POSITION_CACHE)
    (tmp_path / "model.py").write_text(POSITION_MODEL)
    (tmp_path / "loops.py").write_text(POSITION_DECODE.replace("{read}", read))
    found = {(Path(f.path).name, f.line): f.message for f in lint_paths([tmp_path], config).findings}
    assert found[("cache.py", 9)].endswith("(per decoded token)") and "sampling loop" in found[("cache.py", 9)]
    if read != "pass":
        assert found[("loops.py", 11)].endswith("in a sampling loop makes the host wait for the device on every step (per decoded token)")
    # Near miss: reached from a training loop, the read is once per step, and no unit is named.
    (tmp_path / "loops.py").write_text(POSITION_TRAIN)
    [trained] = lint_paths([tmp_path], config).findings
    assert "training loop" in trained.message and trained.message.endswith("on every step")


NESTED_FEED = (
    "import torch\n\nclass Pipeline:\n    def pick(self, logits):\n"
    "        return int(torch.multinomial(torch.softmax(logits, -1), 1)[0])\n\n"
    "    def reply(self, prompt, count, chunk, state=None):\n        token = 0\n        for i in range(count):\n"
    "            tokens = prompt if i == 0 else [token]\n            while len(tokens) > 0:\n"
    "                out, state = self.model.forward(tokens[:chunk], state)\n                tokens = tokens[chunk:]\n"
    "            token = self.pick(out)\n"
)


def test_a_model_fed_by_a_nested_loop_and_sampled_in_the_iteration_decodes() -> None:
    """ChatRWKV's ``PIPELINE.generate``: the model runs in a ``while`` nested in the iteration (the
    prompt in chunks, then the one new token); the token is picked in the iteration's own body and
    fed back: the outer loop is the decode loop, the nested one repeats within its token."""
    ctx = _ctx(NESTED_FEED)
    outer, inner = _loops(ctx)
    assert ctx.loops.decodes(outer) and ctx.loops.is_hot(outer) and ctx.places.repeat_of(outer).kind == "decoded token"
    assert not ctx.loops.decodes(inner)


def test_a_nested_feed_with_nothing_picked_fed_back_does_not_decode() -> None:
    """Near-miss: each document fed in chunks with a fresh state, its answer picked but never fed
    to the next document: one document per iteration, no token loop."""
    code = NESTED_FEED.replace("            tokens = prompt if i == 0 else [token]\n",
                               "            state = None\n            tokens = list(prompt[i])\n")
    ctx = _ctx(code)
    outer, inner = _loops(ctx)
    assert not ctx.loops.decodes(outer) and not ctx.loops.decodes(inner)


# Review 17: loops that only look like decode loops. deit's training loop doubles its batch with
# itself (`samples = torch.cat((samples, samples))`, cosub; its backward inside timm's loss scaler): nothing the model made is fed back;
# llm.c's periodic validation draws a batch per iteration from a loader under a bound named for
# steps (`range(args.val_max_steps)`): batches, not tokens. The real decode loops beside them keep theirs.
BATCH_LOOPS = [
    ("def train(model, loader, optimizer, criterion, loss_scaler, cosub):\n    for samples, targets in loader:\n"
     "        samples = samples.cuda()\n        if cosub:\n            samples = torch.cat((samples, samples), dim=0)\n"
     "        loss = criterion(model(samples), targets.cuda())\n        loss_value = loss.item()\n"
     "        optimizer.zero_grad()\n        loss_scaler(loss, optimizer, parameters=model.parameters())\n", Where.TRAIN, 8, "in a training loop"),
    ("def validate(model, val_loader, args):\n    model.eval()\n    with torch.no_grad():\n        val_loss = 0.0\n"
     "        for _ in range(args.val_max_steps):\n            x, y = val_loader.next_batch()\n"
     "            _, loss = model(x.cuda(), y.cuda())\n            val_loss += loss.item()\n    return val_loss\n\n"
     "def main(model, train_loader, val_loader, optimizer, args):\n    for step in range(args.num_iterations):\n"
     "        validate(model, val_loader, args)\n        x, y = train_loader.next_batch()\n"
     "        _, loss = model(x.cuda(), y.cuda())\n        loss.backward()\n        optimizer.step()\n",
     Where.EVAL, 9, "in an evaluation loop"),
]


@pytest.mark.parametrize(("code", "where", "line", "words"), BATCH_LOOPS)
def test_a_batch_doubled_or_drawn_per_iteration_is_no_decoded_token(code: str, where: Where, line: int, words: str) -> None:
    ctx = _ctx("import torch\n" + code)
    loop = _loops(ctx)[0]
    assert not ctx.loops.decodes(loop) and ctx.loops.where(loop) is where
    assert ctx.places.repeat_of(loop).kind != "decoded token"
    [read] = [f for f in lint_source("import torch\n" + code, "m.py", from_table({"select": ["TL101"]}, FIXTURES)) if f.line == line]
    assert words in read.message and "decoded token" not in read.message


@pytest.mark.parametrize("grown", ["torch.cat((samples, nxt), dim=1)", "torch.cat([samples, nxt, nxt], dim=1)"])
def test_a_sequence_grown_by_its_sample_still_decodes(grown: str) -> None:
    code = ("import torch\ndef sample(model, samples, args):\n    for _ in range(args.val_max_steps):\n"
            "        logits = model(samples)[:, -1]\n        nxt = torch.multinomial(logits.softmax(-1), 1)\n"
            f"        samples = {grown}\n    return samples\n")
    ctx = _ctx(code)
    [loop] = _loops(ctx)
    assert ctx.loops.decodes(loop) and ctx.loops.where(loop) is Where.INFER
    assert ctx.places.repeat_of(loop).kind == "decoded token"


def test_a_file_without_a_hot_decode_loop_decodes_nowhere() -> None:
    """``Loops.hot_decoding_anywhere``: the one answer per file that lets the places skip their scan for a
    generation after a read (and ``decodes_within`` its walk of the called functions) where no loop decodes."""
    generate = DECODES[1] + "def main(model, idx):\n    for prompt in prompts:\n        out = generate(model, prompt, 8, 4)\n        print(out[0].tolist())\n"
    ctx = _ctx("import torch\n" + generate)
    assert ctx.loops.hot_decoding_anywhere()
    call = next(c for c in ctx.tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == "generate")
    assert ctx.loops.decodes_within(call)
    training = ("import torch\ndef generate(model, x):\n    return model(x)\n"
                "def train(model, loader, opt):\n    for x, y in loader:\n        loss = (generate(model, x) - y).pow(2).mean()\n"
                "        loss.backward()\n        opt.step()\n        print(loss.item())\n")
    ctx = _ctx(training)
    assert not ctx.loops.hot_decoding_anywhere()
    call = next(c for c in ctx.tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == "generate")
    assert not ctx.loops.decodes_within(call)
