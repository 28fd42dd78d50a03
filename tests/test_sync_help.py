"""The help a sync finding gives where the fix is specific: a tensor read one element at a time
(`for ix in top_ix[0]: ix.item()`) is read whole once before the loop (analysis/element_reads.py);
a value read only to hand to Lightning's `self.log` is passed as the tensor (host_consumers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths

SOURCE = '''\
import torch

model = torch.nn.Linear(8, 8).cuda()
hyps = [torch.zeros(1, device="cuda")]
for step in range(100):
    scores = model(torch.randn(4, 8, device="cuda")).softmax(-1)[0]
    for s in scores:
        print(s.item())
    for i, s in enumerate(scores):
        total = float(s)
    picked = [s.item() for s in scores]
    for h in hyps:
        h.item()
    for pair in zip(hyps, hyps):
        pair[0].item()
    loss = scores.sum()
    loss.item()
'''


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    root = tmp_path_factory.mktemp("walk")
    (root / "walk.py").write_text(SOURCE)
    result = lint_paths([root], from_table({"select": ["TL101", "TL105"]}, root))
    assert not result.errors
    return {f.line: f.fix_hint or "" for f in result.findings}


@pytest.mark.parametrize("line", [8, 10, 11])
def test_a_walked_tensor_is_read_once_before_the_loop(helps: dict[int, str], line: int) -> None:
    assert "`scores.tolist()`" in helps[line]


@pytest.mark.parametrize("line", [13, 17])
def test_other_reads_keep_their_help(helps: dict[int, str], line: int) -> None:
    # a list of tensors has no `.tolist()`; a plain read is not a walk
    assert line in helps and "tolist" not in helps[line]


LIGHTNING = '''\
import torch
import torch.nn.functional as F
import pytorch_lightning as pl


class Lit(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log("train/acc", acc.item(), prog_bar=True)
        seen = loss.item()
        self.log("seen", seen)
        return loss
'''


def test_a_value_read_for_lightnings_log_says_to_pass_the_tensor(tmp_path: Path) -> None:
    (tmp_path / "lit.py").write_text(LIGHTNING)
    result = lint_paths([tmp_path], from_table({"select": ["TL101"]}, tmp_path))
    helps = {f.line: f.fix_hint or "" for f in result.findings}
    assert "Pass the tensor itself (`acc`)" in helps[12]
    assert "Pass the tensor" not in helps[13]  # read into a name first: the log call is not its only use


SAMPLER = '''\
import torch
import torch.nn as nn

device = torch.device("cuda")
betas = torch.linspace(1e-4, 0.02, 1000, device=device)


class Block(nn.Module):
    def forward(self, x):
        std = x.std().item()
        return x / max(std, 1e-5)


net = Block().to(device)


def sample(x):
    for t in reversed(range(1000)):
        noise = torch.rand(1000, device=device)
        x = net(x)
        sigma = betas[t].sqrt().item()
        jitter = noise[t].item()
        spread = betas[t].sum().item()
        x = x + sigma * jitter * spread
    return x
'''


def test_a_table_the_loop_never_changes_is_read_whole_and_a_forward_read_stays_on_the_device(tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text(SAMPLER)
    result = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    helps = {f.line: f.fix_hint or "" for f in result.findings}
    assert "`betas.sqrt().tolist()`" in helps[21]
    assert "does not change" not in helps[22]  # `noise` is drawn anew each step
    assert "does not change" not in helps[23]  # a reduction of the entry is not an entry of a table
    assert "inside `forward`" in helps[10]
