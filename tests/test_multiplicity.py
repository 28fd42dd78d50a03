"""How often the host waits (issue 32): how many times per step a flagged line runs, where
it sits in its step, the guards at the call sites of helpers, and decode loops as steps."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.multiplicity import Position
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

PROJECT = FIXTURES / "projects" / "multiplicity"
RULES = ["TL101", "TL102", "TL103"]


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("project") / "multiplicity"
    shutil.copytree(PROJECT, root)
    result = lint_paths([root], from_table({"select": RULES, "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_the_project_findings_and_tiers_match_the_markers(findings) -> None:  # type: ignore[no-untyped-def]
    root, found = findings
    actual = {(Path(f.path).relative_to(root).as_posix(), f.line, f.code): f.impact for f in found}
    expected_codes = {(p.relative_to(root).as_posix(), line, code) for p in root.rglob("*.py") for line, code in expected_markers(p.read_text())}
    assert set(actual) == expected_codes
    tiers = {(p.relative_to(root).as_posix(), line, code): tier for p in root.rglob("*.py") for (line, code), tier in expected_impacts(p.read_text()).items()}
    assert {key: actual[key] for key in tiers} == tiers


def _one(found, name: str, code: str = "TL101"):  # type: ignore[no-untyped-def]
    return next(f for f in found if Path(f.path).name == name and f.code == code)


def test_a_read_in_every_block_says_how_many_times_per_step(findings) -> None:  # type: ignore[no-untyped-def]
    block = _one(findings[1], "model.py")
    assert block.impact == "high"
    assert "(24 times per step: once in each `Block.forward()`)" in block.message
    assert "24 times per step" in block.impact_reason


def test_a_decoder_reads_per_candidate_per_beam_per_token(findings) -> None:  # type: ignore[no-untyped-def]
    decoder = _one(findings[1], "decoder.py")
    assert decoder.impact == "high"
    assert "in a sampling loop" in decoder.message
    assert "per candidate per beam per decoded token" in decoder.message


def test_position_in_the_step(findings) -> None:  # type: ignore[no-untyped-def]
    found = findings[1]
    sync = _one(found, "train.py", "TL103")
    assert sync.impact == "medium" and "one sync per step" in sync.impact_reason and "about 1 %" in sync.impact_reason
    after = _one(found, "train.py")
    assert after.impact == "low" and "right after a sync" in after.impact_reason
    # read before the helper's optimizer step: device work follows it in the step, one wait per step (medium, issue 32)
    update = next(f for f in found if Path(f.path).name == "checkpoint.py" and f.line == 29)
    assert update.impact == "medium" and "run every step from a training loop" in update.message
    assert "once per step, mid-step" in update.impact_reason


def test_helpers_called_now_and_then_are_not_per_step(findings) -> None:  # type: ignore[no-untyped-def]
    """Every N steps (`i % k`, `step in save_steps`, `control.should_save`, a helper handed
    the optimizer to save it), once on the way out of the loop (`...; break`), after the
    loop, per epoch: none of the helpers' reads is a per-step finding."""
    root, found = findings
    text = (root / "checkpoint.py").read_text().splitlines()
    reported = {text[f.line - 1].strip() for f in found if Path(f.path).name == "checkpoint.py"}
    for quiet in ("print(\"loss\", loss.item())", "return sum(p.grad.norm().item() for p in model.parameters())",
                  "print(\"final\", sum(p.norm().item() for p in model.parameters()))", "return [p.detach().cpu() for p in model.parameters()]"):
        assert quiet not in reported
    assert not any("save_state" in f.message or f.line > 45 for f in found if Path(f.path).name == "checkpoint.py")


LOOP = """import torch
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, x in enumerate(loader):
    out = model(x.cuda())
    loss = out.sum()
    loss.backward()
    opt.step()
{body}
"""


@pytest.mark.parametrize(("body", "expected"), [
    ("    if step in save_steps:\n        print(loss.item())", []),  # a few chosen steps
    ("    if step >= max_steps:\n        print(loss.item())\n        break", []),  # once, on the way out
    ("    if control.should_log:\n        print(loss.item())", []),  # a trainer's every-N flag
    ("    if step > 10:\n        print(loss.item())", [("TL101", "medium")]),  # every step after the tenth
    ("    for p in model.parameters():\n        print(p.grad.norm().item())", [("TL101", "high")]),  # per parameter
    ("    for i in range(x.size(0)):\n        print(out[i].sum().item())", [("TL101", "high")]),  # per batch row
    # the first few times per run: the body moves the counter or the flag its test reads
    ("    if shown < 3:\n        print(loss.item())\n        shown += 1", []),
    ("    if not printed:\n        print(loss.item())\n        printed = True", []),
    ("    if loss.isfinite().all() and shown < 3:\n        print(loss.item())\n        shown += 1", []),
    # ... but the tensor test before the count runs on every row of every step: TL101's (high)
    ("    for i in range(x.size(0)):\n        if out[i].argmax() != 0 and shown < 5:\n            shown += 1\n            print(out[i].sum().item())", [("TL101", "high")]),
    # near-misses: the count is set back every step, the body never moves it, the flag is cleared
    ("    shown = 0\n    for i in range(x.size(0)):\n        if shown < 3:\n            print(out[i].sum().item())\n            shown += 1", [("TL101", "high")]),
    ("    if shown < 3:\n        print(loss.item())", [("TL101", "medium")]),
    ("    if not printed:\n        print(loss.item())\n        printed = False", [("TL101", "medium")]),
])
def test_guards_and_loops_in_a_training_loop(body: str, expected: list[tuple[str, str]]) -> None:
    found = lint_source(LOOP.format(body=body), "train.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert [(f.code, f.impact) for f in found] == expected


@pytest.mark.parametrize(("body", "expected"), [
    # a read waits for everything queued before it: a second read with only host work
    # between waits for almost nothing, whichever value it reads (in one print, or the next line)
    ("    a = loss.item()\n    b = out.mean().item()", [("TL101", "medium"), ("TL101", "low")]),
    ("    print(loss.item(),\n          out.max().item())", [("TL101", "medium"), ("TL101", "low")]),
    # a call that may queue device work stands between them
    ("    print(loss.item(), log_metrics(out))\n    c = out.max().item()", [("TL101", "medium"), ("TL101", "medium")]),
    # a host tensor's read drains no device queue
    ("    a = counter.item()\n    b = loss.item()", [("TL101", "medium")]),
    # the read's own value is a helper's work: it waits for that work
    ("    a = loss.item()\n    b = helper(out).tolist()", [("TL101", "medium"), ("TL101", "medium")]),
    # the earlier read is in a branch that may not run
    ("    if verbose:\n        a = loss.item()\n    b = out.max().item()", [("TL101", "medium"), ("TL101", "medium")]),
    # device work queued between the two reads: the second waits for it again
    # (the first is mid-step, one wait per step: medium, issue 32; neither is the low of a drained queue)
    ("    a = loss.item()\n    y = model(x.cuda())\n    b = y.sum().item()", [("TL101", "medium"), ("TL101", "medium")]),
])
def test_a_read_after_another_device_read_waits_for_almost_nothing(body: str, expected: list[tuple[str, str]]) -> None:
    code = LOOP.replace("for step, x", "counter = torch.zeros(1)\nfor step, x").format(body=body)
    found = lint_source(code, "train.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert [(f.code, f.impact) for f in found] == expected


def _ctx(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


@pytest.mark.parametrize(("loop", "kind", "count"), [
    ("for p in model.parameters():", "parameter", None),
    ("for name, p in model.state_dict().items():", "parameter", None),
    ("for i in range(x.size(0)):", "batch row", None),
    ("for t in range(max_len):", "decoded token", None),
    ("for b in range(beam_size):", "beam", None),
    ("for cand in candidates:", "candidate", None),
    ("for token in candidates:", "token", None),  # tokens already there: no model runs in it
    ("for tok in range(max_tokens_left):", "decoded token", None),  # a range of token positions
    ("for k in range(12):", "iteration", 12),
    ("while not done:", "iteration", None),
])
def test_what_a_loop_goes_over(loop: str, kind: str, count: int | None) -> None:
    ctx = _ctx(f"def f(model, x, max_len, beam_size, candidates, done):\n    {loop}\n        pass\n")
    node = next(iter((*ctx.tree.nodes(cst.For), *ctx.tree.nodes(cst.While))))
    repeat = ctx.places.repeat_of(node)
    assert (repeat.kind, repeat.count) == (kind, count)


def test_blocks_of_a_module_list_are_counted() -> None:
    ctx = _ctx("import torch.nn as nn\nN = 6\nclass M(nn.Module):\n    def __init__(self):\n        self.blocks = nn.ModuleList([B() for _ in range(N)])\n"
               "    def forward(self, x):\n        for blk in self.blocks:\n            x = blk(x)\n        return x\n")
    repeat = ctx.places.repeat_of(ctx.tree.nodes(cst.For)[0])
    assert (repeat.kind, repeat.count) == ("block", 6)


def test_position_after_a_sync_ends_at_device_work() -> None:
    code = ("import torch\ndef f(model, loader, opt):\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n"
            "        torch.cuda.synchronize()\n        a = loss.item()\n        y = model(x)\n        b = y.sum().item()\n        opt.step()\n")
    ctx = _ctx(code)
    loop = ctx.tree.nodes(cst.For)[0]
    reads = [c for c in ctx.tree.nodes(cst.Call) if ctx.method_name(c) == "item"]
    assert [ctx.places.position(r, loop) for r in reads] == [Position.AFTER_SYNC, Position.MID_STEP]


def test_the_summary_stays_plain_picklable_data(findings) -> None:  # type: ignore[no-untyped-def]
    from torchlint.engine.runner import run_checks
    from torchlint.engine.source import Source
    from torchlint.checks import all_checks

    root, _ = findings
    text = (root / "decoder.py").read_text()
    result = run_checks(Source(str(root / "decoder.py"), text), [c for c in all_checks() if c.code == "TL101"], Options())
    summary = pickle.loads(pickle.dumps(result.summary))
    assert summary == result.summary
    # The decode loop is a step in its own file (its beams rebound from what the model scored):
    # the call in it repeats per beam, each step a decoded token.
    repeats = [(c.unit, [r.kind for _, r in c.repeats]) for c in summary.calls if c.repeats]
    assert ("decoded token", ["beam"]) in repeats


BLOCK = """import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()
"""
NET = """import torch
import torch.nn as nn
from block import Block


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.layers = nn.ModuleList([Block(d), nn.Linear(d, d)])
{extra}
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return {ret}


model = Net(8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    model(x.cuda()).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize(("extra", "ret", "words"), [
    ("", "x", None),  # a list of several classes: each member's forward runs once
    ("        self.stack = nn.Sequential(*[Block(d) for _ in range(6)])\n", "self.stack(x)", "6 times per step: once in each `Block.forward()`"),
])
def test_containers_of_one_class_repeat_its_forward(tmp_path: Path, extra: str, ret: str, words: str | None) -> None:
    (tmp_path / "block.py").write_text(BLOCK)
    (tmp_path / "net.py").write_text(NET.format(extra=extra, ret=ret))
    found = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    [block] = found
    # inside forward: mid-step, one wait per step (medium); six blocks of one class: six waits per step (high)
    assert block.impact == ("high" if words else "medium") and "mid-step" in block.impact_reason or words
    assert (words in block.message) if words else "times per step" not in block.message and "per step)" not in block.message


GLOBAL_MODEL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        scale = y.abs().max().item()
        return self.fc(y / scale)


MODEL = Net().cuda()


def predict(x):
    return MODEL(x)


def shape_of(x):
    return tuple(x.shape)
"""


def test_a_loop_calling_a_function_of_a_module_level_model_is_an_inference_step(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(GLOBAL_MODEL)
    (tmp_path / "serve.py").write_text("import torch\nimport net\n\nfor x in requests:\n    y = net.predict(x.cuda())\n")
    found = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    [read] = found
    assert read.line == 12 and read.impact == "medium" and "mid-step" in read.impact_reason  # mid-forward: more layers follow it, once per step
    assert "called from `predict()`, run every step from a sampling loop" in read.message
    # a loop over a function that never runs the model is no step: the forward is not reached
    # (the forward's read still holds on every call of the model, once per call: medium, from no step)
    (tmp_path / "serve.py").write_text("import torch\nimport net\n\nfor x in requests:\n    y = net.shape_of(x.cuda())\n")
    [unreached] = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    assert unreached.line == 12 and unreached.impact == "medium" and "run every step" not in unreached.message
    assert "(every call of the model; no loop that runs it is visible)" in unreached.message


def test_functions_stored_in_a_dict_are_followed(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(GLOBAL_MODEL + "\n\ndef classify(x):\n    return MODEL(x).argmax().item()\n")
    (tmp_path / "serve.py").write_text("import torch\nfrom net import classify, shape_of\n\nHANDLERS = {'cls': classify, 'shape': shape_of}\n\n"
                                       "for x in requests:\n    out = HANDLERS[kind](x.cuda())\n")
    found = {f.line: f for f in lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings}
    assert set(found) == {12, 28}
    assert found[28].impact == "medium" and "in `classify()`" in found[28].message  # the handler's last work: the step's end


def test_a_read_after_a_helper_that_synchronizes_is_low() -> None:
    """gpt-fast's ``device_sync(device)`` wraps ``torch.cuda.synchronize``: the read after it
    waits for nothing; without the helper's call the same read is a step-end read."""
    helper = "def device_sync(device):\n    if 'cuda' in device:\n        torch.cuda.synchronize(device)\n"
    code = LOOP.replace("model = ", helper + "model = ", 1)
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    synced = lint_source(code.format(body="    device_sync('cuda')\n    t = out.argmax(-1).tolist()"), "train.py", config)
    plain = lint_source(code.format(body="    t = out.argmax(-1).tolist()"), "train.py", config)
    assert [(f.code, f.impact) for f in synced] == [("TL101", "low")]
    assert [(f.code, f.impact) for f in plain] == [("TL101", "medium")]



@pytest.mark.parametrize(("alias", "impact"), [
    ("synchronize = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None\n", "low"),  # nanochat's
    ("synchronize = torch.cuda.synchronize\n", "low"),
    ("synchronize = print\n", "medium"),  # a name of something else: the read still waits at the step's end
    ("synchronize = torch.cuda.synchronize if fast else torch.cuda.empty_cache\n", "medium"),  # either may run
])
def test_a_read_after_a_name_bound_to_synchronize_is_low(alias: str, impact: str) -> None:
    """nanochat's ``synchronize = torch.cuda.synchronize if device_type == "cuda" else lambda: None``:
    a read after ``synchronize()`` finds the queue drained."""
    code = LOOP.replace("model = ", alias + "model = ", 1)
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    found = lint_source(code.format(body="    synchronize()\n    t = out.argmax(-1).tolist()"), "train.py", config)
    assert [(f.code, f.impact) for f in found] == [("TL101", impact)]



@pytest.mark.parametrize(("body", "impact"), [
    ("    t = out.argmax(-1).tolist()\n    torch.cuda.synchronize()\n    print(t)", "low"),
    ("    t = out.argmax(-1).tolist()\n    dt = time.time() - t0\n    synchronize()", "low"),  # host work between; an alias
    # near-misses: device work between, or a sync that may not run
    ("    t = out.argmax(-1).tolist()\n    y = model(x.cuda())\n    torch.cuda.synchronize()", "medium"),  # mid-step: one wait per step
    ("    t = out.argmax(-1).tolist()\n    if step % 2:\n        torch.cuda.synchronize()", "medium"),
])
def test_a_read_right_before_an_explicit_synchronize_is_low(body: str, impact: str) -> None:
    """nanochat's base_train: ``train_loss.item()`` then ``synchronize()`` for its step timer: the
    sync waits for the queue anyway, so the read adds almost nothing."""
    alias = "import time\nsynchronize = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None\nt0 = 0\n"
    code = LOOP.replace("model = ", alias + "model = ", 1)
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    found = lint_source(code.format(body=body), "train.py", config)
    assert [(f.code, f.impact) for f in found][:1] == [("TL101", impact)], [(f.line, f.impact, f.impact_reason) for f in found]

ACCUMULATION = """import torch
model = torch.nn.Linear(8, 8).cuda()
optim = torch.optim.Adam(model.parameters())
for i in range(1000):
    for _ in range({inner}):
        loss = model(next(train_loader).cuda()).sum()
        loss.backward(){inner_step}
        total = loss.item()
    optim.step()
    optim.zero_grad()
"""


def test_a_read_per_micro_batch_of_gradient_accumulation_repeats_within_the_step() -> None:
    """x-transformers' ``for __ in range(gradient_accumulate_every)``: the optimizer steps
    after the micro-batches, so the read runs 4 times a step, each before the next forward."""
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    (found,) = lint_source(ACCUMULATION.format(inner="4", inner_step=""), "train.py", config)
    assert (found.impact, "(4 times per step)" in found.message) == ("high", True)
    # the near-miss: an inner loop that steps itself is the step (an epoch loop around batches)
    stepping = ACCUMULATION.format(inner="4", inner_step="\n        optim.step()")
    (found,) = lint_source(stepping, "train.py", config)
    assert found.impact == "medium" and "times per step" not in found.message



RL_PASSES = """import torch

model = torch.nn.Linear(8, 1).cuda()
optimizer = torch.optim.AdamW(model.parameters())


def train(batches, num_steps, examples_per_step):
    for step in range(num_steps):
        examples_per_rank = examples_per_step // 2
        for example_step in range(examples_per_rank):
            inputs_all = next(batches).cuda()
            num_passes = inputs_all.size(0) // 4
            for pass_idx in range(num_passes):
                loss = model(inputs_all[pass_idx * 4:(pass_idx + 1) * 4]).mean()
                loss.backward()
                print(loss.item())
        optimizer.step()
"""


def test_loops_of_backward_passes_repeat_micro_batches_whatever_their_bounds_are_named() -> None:
    """nanochat's chat_rl: ``range(examples_per_rank)`` (bound from ``examples_per_step``) and
    ``range(num_passes)`` (from ``inputs_all.size(0) // ...``) each run forward and backward on
    part of the step's batch: micro-batches, not decoded tokens or batch rows."""
    (found,) = lint_source(RL_PASSES, "train.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert "(per inner micro-batch per micro-batch per step)" in found.message, found.message
    assert "token" not in found.message and "batch row" not in found.message


DECODE_MODEL = """import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        return self.head(x)


def next_token(model, tokens):
    return model(tokens).argmax(-1)
"""
DECODE = """import torch
from model import LM, next_token
from rerank import rerank

model = LM().cuda().eval()


@torch.no_grad()
def generate(prompts, max_returned_tokens, max_prompt_size):
    tokens = prompts
    for current_idx in range(max_returned_tokens - max_prompt_size):
        tokens = next_token(model, tokens)
        ids = [token.item() for token in tokens]
        rerank(tokens)
    return tokens
"""
RERANK = "import torch\n\n\ndef rerank(logits):\n    for beam in logits.topk(4).values:\n        print(beam.sum().item())\n"


def test_a_loop_over_the_tokens_of_a_decode_step_is_named_once(tmp_path: Path) -> None:
    """litgpt's `[token.item() for token in tokens]` inside its decode loop (a step loop the
    join finds through `next_token(model, ...)`): the loop goes over the step's tokens, one per
    sequence, not over decoded tokens; a helper the decode step calls keeps the step's unit."""
    (tmp_path / "model.py").write_text(DECODE_MODEL)
    (tmp_path / "gen.py").write_text(DECODE)
    (tmp_path / "rerank.py").write_text(RERANK)
    found = {Path(f.path).name: f for f in lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings}
    assert found["gen.py"].message.endswith("(per token per decoded token)")
    assert found["rerank.py"].message.endswith("(per candidate per decoded token)")  # a loop over a topk: its k best
    assert {f.impact for f in found.values()} == {"high"}  # repeated within each decoded token


def test_two_rules_on_one_line_are_both_reported_and_one_rule_once() -> None:
    """The engine keeps one finding per rule per line, never one per line: a host-built index
    (TL114) and a read (TL101) on one line are two problems; two reads on it are one finding."""
    config = from_table({"select": ["TL101", "TL114"], "min-impact": "low"}, Path("."))
    both = lint_source(LOOP.format(body="    y = out[torch.tensor([0, 1])] * loss.item()"), "train.py", config)
    assert sorted((f.line, f.code) for f in both) == [(9, "TL101"), (9, "TL114")]
    reads = lint_source(LOOP.format(body="    y = loss.item() + out.mean().item()"), "train.py", config)
    assert [(f.line, f.code) for f in reads] == [(9, "TL101")]


GUARDED_HELPER = """import torch
import torch.nn.functional as F

model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def probe(q, k, v, step):
{guard}        w = F.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1)
        return w @ v
    return v


for step, x in enumerate(loader):
    q = model(x.cuda())
    loss = probe(q, q, q, step).sum()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(("guard", "impact", "reason"), [
    ("    if step % 100 == 0:\n", "low", "every 100 steps (`step % 100`)"),  # a guard in the helper: as in the loop itself
    ("    if q.requires_grad:\n", "high", "every step of a training loop"),  # a test that holds on every step
])
def test_a_guard_in_a_helper_lowers_its_findings_as_in_the_loop(guard: str, impact: str, reason: str) -> None:
    config = from_table({"select": ["TL405"], "min-impact": "low"}, Path("."))
    (found,) = lint_source(GUARDED_HELPER.format(guard=guard), "train.py", config)
    assert found.impact == impact and reason in found.impact_reason


def test_a_loop_running_the_model_through_a_method_and_a_held_predictor_is_an_inference_step(findings) -> None:  # type: ignore[no-untyped-def]
    """segment-anything's automatic masks: ``for (points,) in batch_iterator(...)`` calls
    ``self._process_batch``, which runs ``self.predictor.predict_torch`` and that
    ``self.model.mask_decoder(...)``, a module the model keeps: each batch of prompts is a
    step, and the per-mask reads after it repeat within it."""
    root, found = findings
    text = (root / "masks.py").read_text().splitlines()
    loop_call = next(i for i, line in enumerate(text, 1) if "self._process_batch(batch)" in line)
    reads = [f for f in found if Path(f.path).name == "masks.py"]
    assert {f.code for f in reads} == {"TL101", "TL102"} and len(reads) == 3
    for read in reads:
        assert f"in `masks_to_runs()` (called from `MaskGenerator._process_batch()`, run every step from a sampling loop at line {loop_call})" in read.message
        assert "per iteration per step" in read.message
    # the held predictor's other method runs no model: a loop over it is no step
    assert not any("scale_all" in f.message or "PointScaler" in f.message for f in found)


HEADS = """import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()


class Decoder(nn.Module):
    def __init__(self, d, n=4):
        super().__init__()
        self.n = n
        self.heads = nn.ModuleList([Head(d) for _ in range(n)])
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.predict(self.proj(x))

    def predict(self, x):
        outs = []
        for i in range(self.n):
            outs.append(self.heads[i](x[:, i]))
        return torch.stack(outs, 1)
"""


def test_a_loop_in_a_method_the_forward_calls_repeats_within_the_step(tmp_path: Path) -> None:
    """segment-anything's ``MaskDecoder.forward`` calls ``self.predict_masks``, whose loop runs a
    head per mask token: a loop within each call of the model, never a step of its own."""
    (tmp_path / "decoder.py").write_text(HEADS)
    (tmp_path / "serve.py").write_text("import torch\nfrom decoder import Decoder\n\nmodel = Decoder(8).cuda()\nfor x in requests:\n    y = model(x.cuda())\n")
    [read] = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    assert read.line == 11 and read.impact == "high"  # mid-forward, 4 times per step; not an evaluation loop's low
    assert "called from `Decoder.predict()`" in read.message and "4 times per step: once in each `Head.forward()`" in read.message


PAIRS = """import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()


class FF(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


class Sequence(nn.Module):
    def __init__(self, d, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([Attn(d), FF(d)]) for _ in range(depth)])

    def forward(self, x, args):
{loop}
            x = x + f(x, **f_args)
            x = x + g(x, **g_args)
        return x


model = Sequence(8, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    model(x.cuda(), [({{}}, {{}})] * 4).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("loop", [
    "        for (f, g), (f_args, g_args) in zip(self.layers, args):",
    # DALLE's SequentialSequence: the pairs made first, as a list, under a name of their own
    "        layers_and_args = list(zip(self.layers, args))\n        for (f, g), (f_args, g_args) in layers_and_args:",
])
def test_blocks_unpacked_from_a_zip_over_the_layers_run_once_per_layer(loop: str) -> None:
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    [read] = lint_source(PAIRS.format(loop=loop), "net.py", config)
    assert read.line == 11 and read.impact == "high"
    assert "called from `Sequence.forward()`" in read.message and "per layer per step: once in each `Attn.forward()`" in read.message


SWEEP_MODELS = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(x)


def create_model(name, classes=10):
    return Net(classes)
"""
# timm's validate.py: main() sweeps a list of models, each through a retry wrapper whose
# `while batch_size:` loop calls validate(); validate() builds the model and its loader, runs
# one warm-up forward, then evaluates in its own loop over the loader.
SWEEP = """import argparse

import torch

from models import create_model

parser = argparse.ArgumentParser()


def validate(args):
    device = torch.device(args.device)
    model = create_model(args.model).to(device)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size)
    model.eval()
    with torch.no_grad():
        warm = torch.randn((args.batch_size, 8)).to(device)
        model(warm)
        for batch_idx, (input, target) in enumerate(loader):
            output = model(input.to(device))
            correct = (output.argmax(1) == target.to(device)).sum().item()
    return {{"top1": correct}}


def _try_run(args, initial_batch_size):
    batch_size = initial_batch_size
    while batch_size:
        args.batch_size = batch_size
        try:
            if "cuda" in args.device and torch.cuda.is_available():
                torch.cuda.empty_cache()
            return {call}
        except RuntimeError as e:
            print(e)
        batch_size = batch_size // 2
    return {{"error": "oom"}}


def main():
    args = parser.parse_args()
    results = []
    for m, c in [("net", ""), ("net", "ckpt")]:
        args.model = m
        results.append(_try_run(args, args.batch_size))
    print(results)


def predict(args):
    model = create_model(args.model).cuda()
    return model(torch.randn((args.batch_size, 8)).to("cuda")).argmax(1)


if __name__ == "__main__":
    main()
"""


def test_a_function_with_its_own_evaluation_loop_is_a_whole_run_not_a_step(tmp_path: Path) -> None:
    """timm validate.py (review of issue 32): a retry loop around `validate(args)`, which has
    its own loop over a loader, goes over runs; the warm-up input made once per run was
    reported "every step of an inference or sampling loop". A function that runs the model
    once per call with no loop of its own still makes the loop around it a sampling loop."""
    (tmp_path / "models.py").write_text(SWEEP_MODELS)
    (tmp_path / "validate.py").write_text(SWEEP.format(call="validate(args)"))
    lines = SWEEP.splitlines()
    warm, read, once = (next(i for i, line in enumerate(lines, 1) if text in line) for text in ("warm = ", ".sum().item()", "return model("))
    config = from_table({"select": ["TL101", "TL110"], "min-impact": "low"}, tmp_path)
    found = {(f.line, f.code): f for f in lint_paths([tmp_path], config).findings}
    assert found[(warm, "TL110")].impact == "low" and "once (not every step)" in found[(warm, "TL110")].impact_reason
    assert "sampling loop" not in found[(warm, "TL110")].message + found[(warm, "TL110")].impact_reason
    assert "evaluation loop" in found[(read, "TL101")].message  # the loop of its own is the step
    (tmp_path / "validate.py").write_text(SWEEP.format(call="predict(args)"))
    found = {(f.line, f.code): f for f in lint_paths([tmp_path], config).findings}
    assert "inference or sampling loop" in found[(once, "TL110")].impact_reason


FULL_BATCH = """import torch
import torch.nn.functional as F

model = torch.nn.Linear(8, 4).cuda()
optimizer = torch.optim.Adam(model.parameters())
data = dataset[0].cuda()


def score(pred, split):
    return torch.count_nonzero(pred[data[split]])


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x)
    F.cross_entropy(out, data.y).backward()
    optimizer.step()


@torch.no_grad()
def test(masks):
    model.eval()
    pred = model(data.x).argmax(dim=-1)
    accs = []
{loop}
    return accs


for epoch in range(200):
    train()
    print(test([data.train_mask, data.val_mask, data.test_mask]))
"""


@pytest.mark.parametrize(("loop", "tier"), [
    # PyG's test(): after the epoch's one step, a read per split; the first drains the queue,
    # the others wait only for their own small kernels: one read's worth, once per evaluation
    # (an evaluation the training loop calls every epoch is tiered as an evaluation's: low)
    ("    for mask in [data.train_mask, data.val_mask, data.test_mask]:\n        accs.append(int((pred[mask] == data.y[mask]).sum()))", "low"),
    ("    for _, mask in data('train_mask', 'val_mask', 'test_mask'):\n        accs.append(int((pred[mask] == data.y[mask]).sum()))", "low"),
    ("    splits = {'train': data.train_mask, 'val': data.val_mask}\n    for name, mask in splits.items():\n        accs.append(int(pred[mask].sum()))", "low"),
    # near-misses: more than a few items, a collection of unknown size, a helper of the
    # project in the loop (its own work unknown here): each repetition waits again (an
    # evaluation's repeated waits: medium)
    ("    for mask in [data.m1, data.m2, data.m3, data.m4, data.m5]:\n        accs.append(int(pred[mask].sum()))", "medium"),
    ("    for mask in masks:\n        accs.append(int((pred[mask] == data.y[mask]).sum()))", "medium"),
    ("    for split in ['train', 'val']:\n        accs.append(int(score(pred, split)))", "medium"),
])
def test_reads_over_a_few_fixed_splits_cost_one_read(loop: str, tier: str) -> None:
    """Review 3 (PyG, 25 findings): `for mask in [train, val, test]` in a full-batch test()
    was "per iteration per step", high; an evaluation loop's per-split `.cpu()` medium."""
    config = from_table({"select": ["TL101", "TL105"], "min-impact": "low"}, Path("."))
    found = [f for f in lint_source(FULL_BATCH.format(loop=loop), "gcn.py", config) if "accs.append" in FULL_BATCH.format(loop=loop).splitlines()[f.line - 1]]
    assert [f.impact for f in found] == [tier]
    if tier == "low":
        assert "times per step: one real wait per eval batch" in found[0].impact_reason


SPLIT_EVAL = """import torch

model = torch.nn.Linear(8, 4).cuda()


@torch.no_grad()
def test(loader):
    model.eval()
    y_true = {'train': [], 'valid': [], 'test': []}
    for data in loader:
        data = data.cuda()
        out = model(data.x)
        for split in y_true.keys():
            mask = data[f'{split}_mask']
            y_true[split].append(out[mask].cpu())
    return y_true
"""


def test_an_evaluation_loops_copy_per_split_is_low_as_other_evaluation_reads() -> None:
    config = from_table({"select": ["TL102"], "min-impact": "low"}, Path("."))
    [found] = lint_source(SPLIT_EVAL, "proteins.py", config)
    assert found.impact == "low" and "(3 times per step)" in found.message
    [many] = lint_source(SPLIT_EVAL.replace("'test': []", "'test': [], 'a': [], 'b': []"), "proteins.py", config)
    # six splits: the loop queues only small ops, so after the first wait each copy waits for its own
    # kernels (an evaluation's rows, left17b's class: detr's per-image reads, both review-17 readers low)
    assert many.impact == "low" and "the rows after the first wait only for their own copies" in many.impact_reason


def test_the_reach_that_repeats_a_helper_names_its_own_loop(tmp_path: Path) -> None:
    """A helper one training loop calls once and another three times a step takes the count,
    and the words say which loop repeats it (not the first loop's line with the second's count)."""
    (tmp_path / "helpers.py").write_text("import torch\n\n\ndef norm_of(x):\n    return x.norm().item()\n")
    loop = ("import torch\nfrom helpers import norm_of\n\nmodel = torch.nn.Linear(8, 8).cuda()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\ndef train(loader):\n    for x in loader:\n"
            "        loss = model(x.cuda()).sum()\n        loss.backward()\n{call}        opt.step()\n")
    (tmp_path / "a_train.py").write_text(loop.format(call="        norm_of(loss)\n"))
    (tmp_path / "b_train.py").write_text(loop.format(call="        for _ in range(3):\n            norm_of(loss)\n"))
    [found] = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    assert "b_train.py:13" in found.message and "3 times per step" in found.message
