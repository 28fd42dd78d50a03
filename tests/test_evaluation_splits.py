"""Reads over a few fixed splits (issue 32, review 3: PyG's `for mask in [train, val, test]`): one
read's worth at the step's end, not a wait per split; and an evaluation loop's copy per split, low."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_source


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
