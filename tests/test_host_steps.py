"""Device-bound findings hold only where a step may hold device tensors (analysis/join.py
``join_params.host_steps``, ``Devices.names_device``): a CPU-only RL project (spinningup's shape: the model
built from a class a parameter defaults to, or from another file's class) reports no sync, and the
same model file is reported once another file's step moves the model to CUDA."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, expected_markers
from torchlint.analysis.context import FileContext
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECTS = FIXTURES / "projects" / "host_steps"
RULES = ["TL101", "TL102", "TL105", "TL107", "TL501"]


@pytest.mark.parametrize("name", ["cpu_only", "gpu_too"])
def test_host_step_projects_match_their_markers(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / name
    shutil.copytree(PROJECTS / name, root)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": RULES}, root))
    assert not result.errors
    actual = {(Path(f.path).as_posix(), f.line, f.code) for f in result.findings}
    expected = {(p.relative_to(root).as_posix(), line, code) for p in sorted(root.rglob("*.py")) for line, code in expected_markers(p.read_text())}
    assert actual == expected, "\n".join(f"{f.path}:{f.line} {f.code} {f.message}" for f in result.findings)


def test_the_device_step_names_the_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # reached first from a host-only step (a2c_cpu.py), the helper's finding names the CUDA step's call
    root = tmp_path / "gpu_too"
    shutil.copytree(PROJECTS / "gpu_too", root)
    monkeypatch.chdir(root)
    [finding] = lint_paths([Path(".")], from_table({"select": ["TL101"]}, root)).findings
    assert "at train_gpu.py:19" in finding.message


AGENT = (
    "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.fc = nn.Linear(4, 1)\n{move}\n    def loss(self, x):\n        out = self.fc(x).pow(2).mean()\n"
    "        self.seen = out.item()\n        return out\n"
)
TRAIN = (
    "import numpy as np\nimport torch\n\nfrom agent import Net\n\n\ndef train(batches):\n    net = Net()\n"
    "    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n    for b in batches:\n        x = torch.as_tensor(np.asarray(b), dtype=torch.float32)\n"
    "        loss = net.loss(x)\n        loss.backward()\n        opt.step()\n        print(loss.item())\n"
)


def _lint(root: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    for name, text in files.items():
        (root / name).write_text(text)
    monkeypatch.chdir(root)
    return sorted((Path(f.path).name, f.line) for f in lint_paths([Path(".")], from_table({"select": ["TL101"]}, root)).findings)


def test_a_step_building_a_host_model_of_another_file_reports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _lint(tmp_path, {"agent.py": AGENT.format(move=""), "train.py": TRAIN}, monkeypatch) == []


def test_a_model_that_moves_itself_to_cuda_puts_the_step_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # near-miss: train.py names no device, but the class it builds moves itself in `__init__`
    agent = AGENT.format(move="        self.cuda()\n")
    assert _lint(tmp_path, {"agent.py": agent, "train.py": TRAIN}, monkeypatch) == [("agent.py", 13), ("train.py", 15)]


def _names_device(code: str) -> bool:
    return FileContext(cst.parse_module(code), "m.py").devices.names_device()


def test_names_device() -> None:
    assert not _names_device("import torch\nnet.load_state_dict(torch.load(path))\nx = torch.as_tensor(a)\n")
    assert not _names_device("import torch\nnet = torch.load(path, map_location='cpu')\n")
    assert _names_device("import torch\nnet = torch.load(path, map_location='cuda:0')\n")
    assert _names_device("import torch\nnet = torch.load(path, map_location=torch.device('cuda'))\n")
    assert _names_device("from transformers import Trainer\nTrainer(model=m).train()\n")
    assert _names_device("from stable_baselines3 import PPO\nPPO('MlpPolicy', env).learn(1000)\n")
    assert _names_device("import torch\nd = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n")


def test_a_helper_without_torch_that_moves_the_batch_puts_the_step_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # near-miss: the move sits in a helper file that never imports torch (summarised by `ast`, analysis/light.py)
    train = TRAIN.replace("from agent import Net\n", "from agent import Net\nfrom moves import to_gpu\n").replace(
        "        loss = net.loss(x)\n", "        loss = net.loss(to_gpu(x))\n")
    files = {"agent.py": AGENT.format(move=""), "moves.py": "def to_gpu(batch):\n    return batch.cuda(non_blocking=True)\n", "train.py": train}
    assert _lint(tmp_path, files, monkeypatch) == [("agent.py", 12), ("train.py", 16)]
