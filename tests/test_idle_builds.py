"""A module class whose every construction in the project is idle (the object kept on ``self``
and only asked for another method, tortoise's ``STFT``; or run once on dummy inputs and exported
to ONNX, segment-anything's ``SamOnnxModel``) runs no forward as a model: the join seeds none of
its (``FileSummary.idle_builds``, ``idle_models``). An object called by its holder, kept in a
``ModuleList``, handed to a trainer, returned from a factory, or called in a loop keeps its
findings (fixtures/projects/idle_builds)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copied_project("idle_builds", tmp_path)
    monkeypatch.chdir(root)
    return root


def _findings(root: Path):  # type: ignore[no-untyped-def]
    return lint_paths([Path(".")], from_table({"select": ["TL114"]}, root)).findings


def _summary(text: str):  # type: ignore[no-untyped-def]
    summarizer = StepSummarizer(FileContext(cst.parse_module(text), "m.py"))
    summarizer.hot_call_nodes()
    return summarizer.summary("m.py", lambda node: None)


def test_project_findings_match_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_a_call_of_the_exported_wrapper_in_a_loop_brings_its_forward_back(project: Path) -> None:
    export = project / "export.py"
    export.write_text(export.read_text().replace("    _ = wrapper(dummy)\n", "    for _ in range(3):\n        wrapper(dummy)\n"))
    assert any("ExportWrapper.forward" in f.message for f in _findings(project))


def test_a_subclass_of_the_holder_may_call_the_attribute(project: Path) -> None:
    (project / "sub.py").write_text("from layers import Mel\n\n\nclass Loud(Mel):\n    def forward(self, y):\n"
                                    "        return self.spectrum(y)\n")
    assert any("Spectrum.forward" in f.message for f in _findings(project))


def test_a_project_that_builds_classes_by_name_keeps_every_forward(project: Path) -> None:
    (project / "registry.py").write_text("import importlib\n\n\ndef build(name):\n"
                                         "    return getattr(importlib.import_module('layers'), name)()\n")
    assert {"Spectrum.forward", "ExportWrapper.forward"} <= {f.message.split("`")[3].rstrip("()") for f in _findings(project)}


@pytest.mark.parametrize(("body", "idle"), [
    ("m = Net()\nm.transform(x)\n", True),
    ("m = Net()\nm.to(device)\nm.transform(x)\n", True),  # a move as a statement of its own
    ("m = Net().transform(x)\n", False),  # chained: not followed
    ("m = Net()\nm(x)\n", False),  # called, not exported
    ("m = Net()\nn = m.to(device)\n", False),  # the module given back to a use
    ("m = Net()\nrun(m)\n", False),
    ("m = Net()\ntorch.onnx.export(m, (x,), 'a.onnx')\n", True),
    ("m = Net()\nm(x)\ntorch.onnx.export(m, (x,), 'a.onnx')\n", True),
    ("m = Net()\ntraced = torch.jit.trace(m, (x,))\n", False),  # the traced module may be run
    ("m = Net()\nmodels = [m]\n", False),
])
def test_which_constructions_are_idle(body: str, idle: bool) -> None:
    text = "import torch\nfrom lib import Net\n\n\ndef f(x, device):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    assert bool(_summary(text).idle_builds) is idle


def test_getattr_on_a_library_module_builds_no_project_class() -> None:
    assert not _summary("from torch import nn\n\n\ndef act(name):\n    return getattr(nn, name)()\n").by_name
    assert _summary("import layers\n\n\ndef act(name):\n    return getattr(layers, name)()\n").by_name
