"""How often a helper runs per step by the reach that calls it (issue 32): a decode step's loop over
its tokens, a guard in the helper, a function with an evaluation loop of its own (a whole run, not a
step), and the loop whose count a helper takes, named."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


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
