"""`Cls.apply(...)` of a custom `torch.autograd.Function` runs its `forward`
(analysis/steps.py in the file, analysis/project.py across files): attention written out
there is per step when a model's forward calls `.apply` in a training loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths

_OPS = '''import torch


class EinsumAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        attn = torch.einsum("bhid,bhjd->bhij", q, k).softmax(dim=-1)
        ctx.save_for_backward(q, k, v, attn)
        return torch.einsum("bhij,bhjd->bhid", attn, v)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad, grad
'''

_TRAIN = '''import torch
import torch.nn as nn
{import_line}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return {call}(q, k, v)


model = Block().cuda()
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    model(x.cuda()).sum().backward()
    opt.step()
'''


@pytest.mark.parametrize(("import_line", "call"), [
    ("from ops import EinsumAttention", "EinsumAttention.apply"),
    ("import ops", "ops.EinsumAttention.apply"),
])
def test_apply_of_an_imported_function_runs_its_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, import_line: str, call: str) -> None:
    (tmp_path / "ops.py").write_text(_OPS)
    (tmp_path / "train.py").write_text(_TRAIN.format(import_line=import_line, call=call))
    monkeypatch.chdir(tmp_path)
    findings = lint_paths([Path(".")], from_table({"select": ["TL405"]}, tmp_path)).findings
    assert [(Path(f.path).name, f.line) for f in findings] == [("ops.py", 7)]
    assert "EinsumAttention.forward()" in findings[0].message


def test_another_method_of_the_class_does_not_run_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ops.py").write_text(_OPS)
    (tmp_path / "train.py").write_text(_TRAIN.format(import_line="import ops", call="ops.EinsumAttention.backward"))
    monkeypatch.chdir(tmp_path)
    assert lint_paths([Path(".")], from_table({"select": ["TL405"]}, tmp_path)).findings == []


def test_a_module_level_alias_of_apply_runs_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _OPS + "\n\nattention = EinsumAttention.apply\n" + _TRAIN.format(import_line="", call="attention")
    (tmp_path / "train.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    findings = lint_paths([Path(".")], from_table({"select": ["TL405"]}, tmp_path)).findings
    assert [(Path(f.path).name, f.line) for f in findings] == [("train.py", 7)]
    # without the alias's call in the step, nothing runs the forward
    (tmp_path / "train.py").write_text(source.replace("return attention(q, k, v)", "return q"))
    assert lint_paths([Path(".")], from_table({"select": ["TL405"]}, tmp_path)).findings == []
