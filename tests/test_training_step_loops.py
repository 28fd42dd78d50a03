"""Issue 32, items 3-4 as the first unseen-code review found them: guards at helpers' call sites on
the epoch and step counters of loops the join makes the step (not hot in their own file), the kind of
a loop (an epoch that is one optimizer step trains), and a loader iterated through a conditional
expression feeding its training loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_decode_loops import _ctx, _loops
from torchlint.analysis.multiplicity import Where
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


HELPERS = """import torch


def save_model(model, path):
    torch.save(model.weight.detach().cpu(), path)


def test(model, x):
    return model(x).mean().item()


def per_row(model, x):
    for i in range(x.size(0)):
        if i % 2 == 0:
            test(model, x[i])


def chunked(model, x, n):
    for i in range(n):
        if i % 4 == 0:
            test(model, x)
"""
RUN = """import torch
from helpers import chunked, per_row, save_model, test


class KGE(torch.nn.Module):
    def forward(self, x):
        return x

    def train_step(self, optimizer, x):
        self(x).sum().backward()
        optimizer.step()


def main(args, x, loader):
    model = KGE().cuda()
    optimizer = torch.optim.Adam(model.parameters())
{loops}
"""


@pytest.mark.parametrize(("loops", "expected"), [
    # a modulo on the counter of the loop the join makes the step (ogb's biokg run.py)
    ("    for step in range(args.max_steps):\n        model.train_step(optimizer, x)\n"
     "        if step % args.save_every == 0 and step > 0:\n            save_model(model, 'm.pt')\n"
     "        if args.do_valid and step % args.valid_steps == 0:\n            test(model, x)\n", set()),
    # an epoch counter, inside a loop over runs (ogb's citation2)
    ("    for run in range(args.runs):\n        for epoch in range(args.epochs):\n            model.train_step(optimizer, x)\n"
     "            if epoch > 49 and epoch % args.eval_steps == 0:\n                result = test(model, x)\n", set()),
    # the same helpers called unguarded: every step
    ("    for step in range(args.max_steps):\n        model.train_step(optimizer, x)\n        save_model(model, 'm.pt')\n",
     {("helpers.py", 5, "TL102")}),
    # an iteration counter: the loop is the step
    ("    for it in range(args.iters):\n        model.train_step(optimizer, x)\n        if it % 100 == 0:\n            save_model(model, 'm.pt')\n", set()),
    # near-misses: a modulo on a batch row's index, or on a plain counter, inside a per-step helper: per item, not rare
    ("    for x in loader:\n        per_row(model, x.cuda())\n", {("helpers.py", 9, "TL101")}),
    ("    for x in loader:\n        chunked(model, x.cuda(), 8)\n", {("helpers.py", 9, "TL101")}),
])
def test_guards_at_call_sites_on_the_counter_of_a_loop_the_join_makes_the_step(tmp_path: Path, loops: str, expected: set) -> None:  # type: ignore[type-arg]
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "run.py").write_text(RUN.format(loops=loops))
    found = lint_paths([tmp_path], from_table({"select": ["TL101", "TL102"], "min-impact": "low"}, tmp_path)).findings
    assert {(Path(f.path).name, f.line, f.code) for f in found} == expected


FULL_BATCH = """import torch
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.Adam(model.parameters())


def train(epoch):
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    model.eval()
    val = model(x)
    return val.sum()


def train_epoch(loader):
    for xb in loader:
        model(xb).sum().backward()
        opt.step()


for epoch in range({bound}):
    {body}
"""


@pytest.mark.parametrize(("body", "where"), [
    ("train(epoch)", Where.TRAIN),  # pyGAT: each epoch is one optimizer step
    ("loss = model(x).sum()\n    loss.backward()\n    opt.step()", Where.TRAIN),
    ("train_epoch(loader)", Where.EPOCH),  # the epoch holds a loop over batches: once per epoch
])
def test_an_epoch_that_is_one_optimizer_step_is_a_training_step(body: str, where: Where) -> None:
    ctx = _ctx(FULL_BATCH.format(bound="100", body=body))
    loop = _loops(ctx)[-1]
    assert ctx.loops.where(loop) is where


def test_a_full_batch_evaluation_forward_with_autograd_on_is_a_per_step_finding() -> None:
    code = FULL_BATCH.format(bound="100", body="train(epoch)")
    [found] = lint_source(code, "train.py", from_table({"select": ["TL301"], "min-impact": "low"}, Path(".")))
    assert found.line == 12 and found.impact == "medium" and "every step of a training loop" in found.impact_reason


LOADER = """import torch
from torch.utils.data import DataLoader
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.Adam(model.parameters())
dl = DataLoader(ds, batch_size=8, shuffle={shuffle})
other = wrap(dl)
for x in (dl if use_plain else other):
    model(x.cuda()).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("shuffle", ["is_shuffle", "True"])
def test_a_loader_iterated_through_a_conditional_expression_feeds_its_training_loop(shuffle: str) -> None:
    [found] = lint_source(LOADER.format(shuffle=shuffle), "train.py", from_table({"select": ["TL201"], "min-impact": "low"}, Path(".")))
    assert found.impact == "high" and "every step of a training loop" in found.impact_reason


def test_a_loader_whose_shuffle_is_a_variable_is_no_evaluation_loader() -> None:
    code = "import torch\nfrom torch.utils.data import DataLoader\ndl = DataLoader(ds, batch_size=8, shuffle=is_shuffle)\n"
    evaluation = code.replace("is_shuffle", "False")
    config = from_table({"select": ["TL201"], "min-impact": "low"}, Path("."))
    [unknown] = lint_source(code, "data.py", config)
    [plain] = lint_source(evaluation, "data.py", config)
    assert "evaluation" not in unknown.impact_reason and "evaluation loop" in plain.impact_reason
