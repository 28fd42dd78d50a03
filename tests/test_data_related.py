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


def test_a_legacy_constructor_of_one_unknown_argument_gets_a_hint_for_data_and_for_sizes() -> None:
    """`torch.FloatTensor(rows).cuda()`: `rows` may be data or a size; `torch.empty(size)`
    alone was wrong code for data."""
    from torchlint.config import from_table
    from torchlint.engine import lint_source

    text = "import torch\n\ndef f(rows):\n    return torch.FloatTensor(rows).cuda()\n"
    (finding,) = lint_source(text, "f.py", from_table({"select": ["TL110"]}, Path(".")))
    assert "`torch.tensor(rows, dtype=torch.float32, device=device)`" in finding.fix_hint
    assert "`torch.empty(rows, dtype=torch.float32, device=device)`" in finding.fix_hint
