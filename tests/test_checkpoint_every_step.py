"""TL312 checkpoint-every-step: where the save runs decides the finding and its tier, across
files too (the join), and the guards that make a save rare keep it quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import project_findings
from torchlint.analysis.impact import LONG_STEP_COSTS, Cost, assess
from torchlint.analysis.multiplicity import Where
from torchlint.config import from_table
from torchlint.engine import lint_source
from torchlint.findings import HIGH, LOW, MEDIUM

_SAVER = '''import torch


def save_checkpoint(state, filename="checkpoint.pt"):
    torch.save(state, filename)
'''

_MINIBATCH = '''import torch
import torch.nn as nn
from saver import save_checkpoint

model = nn.Linear(8, 2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    {guard}save_checkpoint({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}})
'''

_FULL_BATCH = '''import torch
import torch.nn.functional as F
from saver import save_checkpoint

model = GCN().cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    optimizer.zero_grad()
    loss = F.nll_loss(model(data)[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()


for epoch in range(200):
    train()
    save_checkpoint({"model": model.state_dict()})
'''


def _saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: str) -> list:
    (tmp_path / "saver.py").write_text(_SAVER)
    (tmp_path / "train.py").write_text(train)
    monkeypatch.chdir(tmp_path)
    return [f for f in project_findings(tmp_path, "TL312")]


def test_a_savers_write_per_minibatch_step_is_high_in_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    findings = _saves(tmp_path, monkeypatch, _MINIBATCH.format(guard=""))
    assert [(Path(f.path).name, f.line, f.impact) for f in findings] == [("saver.py", 5, HIGH)]
    assert "checkpoint it is handed" in findings[0].message and "training loop" in findings[0].message


@pytest.mark.parametrize("guard", ["if step % 500 == 0:\n        ", "if step in save_steps:\n        "])
def test_a_guard_at_the_call_in_another_file_keeps_the_saver_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: str) -> None:
    assert _saves(tmp_path, monkeypatch, _MINIBATCH.format(guard=guard)) == []


def test_a_full_batch_epoch_calling_a_saver_takes_the_long_steps_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The join's step is an epoch loop of full-batch steps: one save per long step, medium
    (settle_places takes ``LONG_STEP_COSTS``), as the same save in the loop itself is."""
    findings = _saves(tmp_path, monkeypatch, _FULL_BATCH)
    assert [(Path(f.path).name, f.line, f.impact) for f in findings] == [("saver.py", 5, MEDIUM)]
    assert findings[0].impact_reason.startswith(Cost.CHECKPOINT_SAVE_LONG_STEP.value)


def test_the_long_step_cost_is_one_tier_below_the_steps() -> None:
    assert LONG_STEP_COSTS == {Cost.CHECKPOINT_SAVE: Cost.CHECKPOINT_SAVE_LONG_STEP}
    assert assess(Cost.CHECKPOINT_SAVE, Where.TRAIN)[0] == HIGH
    assert assess(Cost.CHECKPOINT_SAVE_LONG_STEP, Where.TRAIN)[0] == MEDIUM
    assert assess(Cost.CHECKPOINT_SAVE, Where.EVAL)[0] == LOW


def _findings(code: str) -> list:
    return list(lint_source(code, "train.py", from_table({"select": ["TL312"], "min-impact": "low"}, Path("."))))


_LOOP = '''import torch
import torch.nn as nn

model = nn.Linear(8, 2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    {save}
'''


@pytest.mark.parametrize(("save", "what"), [
    ('torch.save(model.state_dict(), "m.pt")', "`model`'s state dict"),
    ('torch.save({"net": model.state_dict(), "step": step}, "m.pt")', "a checkpoint of `model`'s state dict"),
    ('torch.save(model, "m.pt")', "the whole module `model`"),
    ('model.save_pretrained("out")', "a checkpoint (`model.save_pretrained`)"),
    ('trainer.save_checkpoint("last.ckpt")', "a checkpoint (`trainer.save_checkpoint`)"),
    ('accelerator.save_model(model, "out")', "a checkpoint (`accelerator.save_model`)"),
    ('accelerator.save(accelerator.unwrap_model(model).state_dict(), "m.pt")', "`accelerator.unwrap_model(model)`'s state dict"),
    ('fabric.save("ckpt.pt", {"model": model, "optimizer": optimizer})', "a checkpoint of the whole module `model`"),
])
def test_what_a_save_writes_is_named(save: str, what: str) -> None:
    findings = _findings(_LOOP.format(save=save))
    assert [(f.line, f.impact) for f in findings] == [(10, HIGH)]
    assert what in findings[0].message


@pytest.mark.parametrize("save", [
    'torch.save(torch.stack(losses), "losses.pt")',  # metrics
    'torch.save(preds.cpu(), "p.pt")',  # predictions
    'tokenizer.save_pretrained("out")',  # a vocabulary
    'self.save_checkpoint("x")',  # judged at the project's own torch.save
    'np.save("feats.npy", feats)',  # no weights
    'accelerator.save(metrics, "metrics.pt")',
    'if loss.item() < best_loss:\n        torch.save(model.state_dict(), "best.pt")',
    'if is_best:\n        torch.save(model.state_dict(), "best.pt")',
    'if step % 100 == 0:\n        torch.save(model.state_dict(), "m.pt")',
    'is_saving = step % cfg.save_freq == 0\n    if cfg.save and is_saving:\n        torch.save(model.state_dict(), "m.pt")',
])
def test_small_saves_and_guarded_saves_are_quiet(save: str) -> None:
    assert _findings(_LOOP.format(save=save)) == []


def test_pygats_glob_and_removes_are_named_with_the_save() -> None:
    """pyGAT's loop lists the directory and removes older checkpoints on every step too: the
    finding names them, in source order, and points at them."""
    path = Path(__file__).parent.parent / "fixtures" / "rules" / "TL312" / "flagged.py"
    findings = list(lint_source(path.read_text(), str(path), from_table({"select": ["TL312"]}, path.parent)))
    assert [(f.line, f.impact) for f in findings] == [(28, MEDIUM)]
    assert findings[0].message.endswith("lists or removes files with `glob.glob()`, `os.remove()` on every step too")
    assert sorted(r.line for r in findings[0].related) == [37, 41]


def test_a_parameter_is_a_checkpoint_only_for_torch_save_in_a_saver() -> None:
    saver = 'import numpy as np\nimport torch\n\n\ndef save_features(path, feats):\n    np.save(path, feats)\n\n\n' \
            'def save_checkpoint(state, path):\n    torch.save(state, path)\n\n\n'
    loop = 'for x, y in loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    optimizer.step()\n' \
           '    save_features("f.npy", x)\n    save_checkpoint(model.state_dict(), "c.pt")\n'
    findings = _findings(saver + 'model = torch.nn.Linear(8, 2).cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n' + loop)
    assert [(f.line, f.impact) for f in findings] == [(10, HIGH)]
