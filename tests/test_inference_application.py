"""A project that is an inference application (no file trains, one samples: tortoise-tts) runs its
models' layers forwards only: TL402's misaligned layer is at its inference tier and TL405's
attention no step reaches is medium (a scoring pass per call). A project that trains, by hand or
through Lightning's ``training_step``, or a model library with no sampling loop, keeps the tiers."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths

MODELS = '''\
import torch
import torch.nn as nn


class Scorer(nn.Module):
    def __init__(self, dim=512, heads=8):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.head = nn.Linear(dim, 8194)
        self.heads = heads

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(dim=-1)
        return self.head(attn @ v)
'''

SAMPLES = '''\
import torch

from models import Scorer

decoder = torch.nn.Linear(512, 512).cuda()
scorer = Scorer().cuda()


def generate(x, steps):
    for _ in range(steps):
        logits = decoder(x)
        token = torch.multinomial(logits.softmax(-1), 1)
        x = torch.cat([x, decoder.weight[token[:, -1]]], dim=1)
    return x
'''

TRAINS = '''\
import torch

from models import Scorer

model = Scorer().cuda()
optimizer = torch.optim.Adam(model.parameters())
for x in batches():
    loss = model(x.cuda()).mean()
    loss.backward()
    optimizer.step()
'''

LIGHTNING = '''\
import lightning as L

from models import Scorer


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = Scorer()

    def training_step(self, batch, index):
        return self.model(batch).mean()
'''


def _tiers(root: Path, files: dict[str, str]) -> dict[tuple[str, int], str]:
    for name, text in files.items():
        (root / name).write_text(text)
    result = lint_paths([root], from_table({"select": ["TL402", "TL405"], "min-impact": "low"}, root))
    assert not result.errors
    return {(f.code, f.line): f.impact for f in result.findings if f.location.path.endswith("models.py")}


def test_an_inference_application_runs_its_layers_forwards_only(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, {"models.py": MODELS, "sample.py": SAMPLES})
    assert tiers[("TL405", 14)] == "medium"
    assert tiers[("TL402", 9)] == "low"


def test_a_project_that_trains_keeps_the_tiers(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, {"models.py": MODELS, "sample.py": SAMPLES, "train.py": TRAINS})
    assert tiers[("TL405", 14)] == "high"
    assert tiers[("TL402", 9)] == "medium"


def test_lightning_training_counts_as_training(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, {"models.py": MODELS, "sample.py": SAMPLES, "module.py": LIGHTNING})
    assert tiers[("TL405", 14)] == "high"
    assert tiers[("TL402", 9)] == "medium"


def test_a_model_library_without_sampling_keeps_the_tiers(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path, {"models.py": MODELS})
    assert tiers[("TL405", 14)] == "high"
    assert tiers[("TL402", 9)] == "medium"
