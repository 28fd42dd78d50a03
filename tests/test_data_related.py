"""TL201/TL202 findings point at the DataLoader constructor and carry the lines where that
loader is iterated, which the profiler joins with measured batch-fetch time."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source

SOURCE = '''import torch
from torch.utils.data import DataLoader
from tqdm import tqdm


def make_loader(ds):
    return DataLoader(ds, batch_size=64)


def train(model, loader):
    for epoch in range(3):
        for x, y in tqdm(loader):
            model(x.cuda()).sum().backward()


class Trainer:
    def __init__(self, ds):
        self.val_loader = DataLoader(ds, batch_size=64)

    def validate(self, model):
        return [model(x) for x, _ in self.val_loader]


train_loader = make_loader(dataset)
train(net, train_loader)
for i, batch in enumerate(train_loader):
    pass
'''


def test_related_lines_are_the_loops_that_iterate_the_loader() -> None:
    findings = lint_source(SOURCE, "train.py", from_table({"select": ["TL201"]}, Path(".")))
    related = {f.line: sorted(r.line for r in f.related) for f in findings}
    assert related == {7: [12, 26], 18: [21]}
