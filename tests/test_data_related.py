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


def test_a_legacy_constructor_of_one_unknown_argument_is_reported_once_for_its_data() -> None:
    """`torch.FloatTensor(state).to(device)` with `state` from a call: data as often as a
    size, and `torch.empty(size, device=...)` would be wrong code for data. TL204 reports
    the legacy call, with the data's fix; TL110 only a constructor given sizes."""
    from torchlint.config import from_table
    from torchlint.engine import lint_source

    text = (
        "import torch\n\ndef f(rows, x, n):\n"
        "    a = torch.FloatTensor(rows).cuda()\n"
        "    b = torch.LongTensor([2] * n).cuda()\n"
        "    c = torch.FloatTensor(x.size(0)).cuda()\n"
        "    d = torch.FloatTensor(n, 3).cuda()\n"
        "    return a, b, c, d\n"
    )
    found = {(f.line, f.code) for f in lint_source(text, "f.py", from_table({"select": ["TL110", "TL204"]}, Path(".")))}
    # `[2] * n` is data the device could make (`torch.full((n,), 2, device=...)`): TL110's too
    assert found == {(4, "TL204"), (5, "TL204"), (5, "TL110"), (6, "TL204"), (6, "TL110"), (7, "TL204"), (7, "TL110")}
