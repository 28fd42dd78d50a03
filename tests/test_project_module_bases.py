"""A class is a module when its bases reach ``nn.Module`` through other files of the project
(detectron2's ``CascadeROIHeads(StandardROIHeads)``, ``StandardROIHeads(ROIHeads)``,
``ROIHeads(torch.nn.Module)``, each in its own file): its ``forward``'s loops, and those of
the methods that forward calls, run within each call of the model, never a step of their own
(``Project.is_module``, ``LoopSummary.forward_of``). The near miss: a base from another file
that is no module leaves the loop a step loop."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths

BASE = "import torch\n\n\nclass Heads(torch.nn.Module):\n    def forward(self, features):\n        return features\n"
MIDDLE = "from .base import Heads\n\n\nclass Standard(Heads):\n    pass\n"
LAYERS = ("import torch\nfrom torch import nn\n\n\nclass Predictor(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
          "        self.fc = nn.Linear(4, 4)\n\n    def forward(self, x):\n        return self.fc(x)\n")
# The stage loop is in a method `forward` calls; each stage runs a predictor and reads a count.
CASCADE = (
    "import torch\nfrom torch import nn\nfrom .{module} import {base}\nfrom .layers import Predictor\n\n\n"
    "class Cascade({base}):\n    def __init__(self, n):\n        super().__init__()\n"
    "        self.predictors = nn.ModuleList([Predictor() for _ in range(n)])\n        self.num_stages = n\n\n"
    "    def forward(self, features):\n        return self._forward_box(features)\n\n"
    "    def _forward_box(self, features):\n        out = features.to(\"cuda\")\n        for k in range(self.num_stages):\n"
    "            out = self.predictors[k](out)\n            fg = (out > 0).sum().item()\n        return out\n"
)
TRAIN = ("import torch\nfrom pkg.cascade import Cascade\n\n\ndef main(loader, opt):\n    model = Cascade(3).cuda()\n"
         "    for x in loader:\n        model(x.cuda()).sum().backward()\n        opt.step()\n")


def _syncs(root: Path, files: dict[str, str]) -> list[tuple[str, str, str]]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    findings = lint_paths([root], from_table({"select": ["TL101"]}, root)).findings
    return [(Path(f.path).name, f.impact, f.message) for f in findings]


def _package(module: str = "middle", base: str = "Standard") -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/base.py": BASE, "pkg/middle.py": MIDDLE, "pkg/layers.py": LAYERS,
            "pkg/cascade.py": CASCADE.format(module=module, base=base)}


def test_a_stage_loop_in_a_module_whose_base_is_a_module_in_another_file_repeats_within_the_step(tmp_path: Path) -> None:
    found = _syncs(tmp_path, {**_package(), "train.py": TRAIN})
    assert [(name, impact) for name, impact, _ in found] == [("cascade.py", "high")]
    message = found[0][2]
    assert "from a training loop at" in message and "per-batch loop" not in message
    assert "per stage per step" in message


def test_a_stage_loop_of_a_model_no_step_reaches_is_no_step_loop(tmp_path: Path) -> None:
    # built from a registry elsewhere: the stage loop is still the model's, not a step
    assert not any("per-batch loop" in message for _, _, message in _syncs(tmp_path, _package()))


def test_a_base_in_another_file_that_is_no_module_leaves_the_loop_a_step(tmp_path: Path) -> None:
    files = _package(module="runner", base="Runner")
    files["pkg/runner.py"] = "class Runner:\n    def run(self):\n        return self.forward(None)\n"
    # `Cascade(Runner)`: a plain object whose `forward` runs a model once per stage: its loop
    # is a loop over batches of its own, as before
    found = _syncs(tmp_path, files)
    assert len(found) == 1 and "in a per-batch loop" in found[0][2]
