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


def test_two_rules_on_one_line_are_both_reported_and_one_rule_once() -> None:
    """The engine keeps one finding per rule per line, never one per line: a host-built index
    (TL114) and a read (TL101) on one line are two problems; two reads on it are one finding."""
    config = from_table({"select": ["TL101", "TL114"], "min-impact": "low"}, Path("."))
    both = lint_source(LOOP.format(body="    y = out[torch.tensor([0, 1])] * loss.item()"), "train.py", config)
    assert sorted((f.line, f.code) for f in both) == [(9, "TL101"), (9, "TL114")]
    reads = lint_source(LOOP.format(body="    y = loss.item() + out.mean().item()"), "train.py", config)
    assert [(f.line, f.code) for f in reads] == [(9, "TL101")]


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
