"""The step across functions, files and frameworks (analysis/steps.py, analysis/project.py):
a multi-file project whose per-step syncs live in helpers, a package re-export, a star
import, a module without torch and a Lightning base class in another module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_markers
from torchlint.analysis.project_index import _module_names
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

PROJECT = FIXTURES / "projects" / "steps"
PER_STEP_RULES = ["TL101", "TL102", "TL103", "TL104", "TL302"]


def _lint(root: Path, *paths: str):  # type: ignore[no-untyped-def]
    return lint_paths([root / p for p in paths] or [root], from_table({"select": PER_STEP_RULES}, root))


def test_project_findings_match_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "steps"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": PER_STEP_RULES}, root))
    actual = {(Path(f.path).as_posix(), f.line, f.code) for f in result.findings}
    expected = {
        (p.relative_to(root).as_posix(), line, code)
        for p in sorted(root.rglob("*.py"))
        for line, code in expected_markers(p.read_text())
    }
    assert actual == expected
    assert not result.errors


def test_helper_finding_carries_the_hot_call_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "steps"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": PER_STEP_RULES}, root))
    accuracy = next(f for f in result.findings if f.path.endswith("metrics.py"))
    train = (root / "train.py").read_text().splitlines()
    call_line = next(i for i, line in enumerate(train, 1) if "accuracy(logits, y)" in line)
    assert [(Path(r.path).name, r.line) for r in accuracy.related] == [("train.py", call_line)]
    assert f"run every step from a training loop at train.py:{call_line}" in accuracy.message
    lightning = next(f for f in result.findings if f.code == "TL302")
    assert lightning.path.endswith("lit.py")


def test_argument_order_does_not_change_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "steps"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    config = from_table({"select": PER_STEP_RULES}, root)
    forward = lint_paths([Path("train.py"), Path("metrics.py"), Path("utils.py")], config).findings
    backward = lint_paths([Path("utils.py"), Path("metrics.py"), Path("train.py")], config).findings
    assert forward == backward and forward


def test_only_checked_files_are_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without train.py nothing calls the helpers every step: they are not per-step.
    root = tmp_path / "steps"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    result = lint_paths([Path("metrics.py"), Path("utils.py"), Path("pkg")], from_table({"select": PER_STEP_RULES}, root))
    assert result.findings == []


def test_module_names_from_every_ancestor() -> None:
    assert _module_names("/p/src/pkg/losses.py")[:3] == ["losses", "pkg.losses", "src.pkg.losses"]
    assert _module_names("/p/src/pkg/__init__.py")[:2] == ["pkg", "src.pkg"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # called from a hot loop, directly and through another helper
        ("def h(t):\n    return t.item()\ndef g(t):\n    return h(t)\nfor x in loader:\n    model(x).backward()\n    g(x.cuda())\n", {2}),
        # a call in a rare branch, and one after the loop: neither makes the callee per-step
        ("def h(t):\n    return t.item()\nfor i, x in enumerate(loader):\n    model(x).backward()\n    if i % 10 == 0:\n        h(x.cuda())\nh(model.w)\n", set()),
        # recursion ends quietly
        ("def h(t, n):\n    t.item()\n    return h(t, n - 1) if n else 0\nfor x in loader:\n    model(x).backward()\n    h(x.cuda(), 2)\n", {2}),
        # a nested helper, and a method through self
        ("class T:\n    def fit(self):\n        for x in loader:\n            model(x).backward()\n            self.log(x.cuda())\n    def log(self, t):\n        print(t.item())\n", {7}),
    ],
)
def test_same_file_helpers(source: str, expected: set[int]) -> None:
    text = "import torch\n" + source
    lines = {f.line - 1 for f in lint_source(text, "t.py", from_table({"select": ["TL101"]}, Path(".")))}
    assert lines == expected


def test_message_names_the_loop_kind() -> None:
    text = (
        "import torch\n"
        "def score(model, loader):\n"
        "    model.eval()\n"
        "    for x in loader:\n"
        "        print(model(x.cuda()).max().item())\n"
    )
    [finding] = lint_source(text, "t.py", from_table({"select": ["TL101"]}, Path(".")))
    assert "in an evaluation loop" in finding.message and "training" not in finding.message


def test_helper_of_a_framework_hook_carries_the_call_in_the_hook() -> None:
    path = FIXTURES / "rules" / "TL101" / "flagged_frameworks.py"
    text = path.read_text()
    findings = lint_source(text, str(path), from_table({"select": ["TL101"]}, Path(".")))
    helper = next(f for f in findings if "in `Classifier.accuracy()`" in f.message)
    call_line = next(i for i, line in enumerate(text.splitlines(), 1) if "self.accuracy(" in line)
    assert [r.line for r in helper.related] == [call_line]
    assert f"run every step from Lightning `validation_step` at line {call_line}" in helper.message
    hook = next(f for f in findings if "in Lightning `training_step`" in f.message)
    assert hook.related == ()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(text)


HELPER = "import torch\n\n\nclass Crit(torch.nn.Module):\n    def forward(self, x):\n        return x.sum().item()\n\n\ndef build():\n    return Crit()\n"
CPU_TRAIN = (
    "import torch\nfrom crit import Crit\n\n\ndef train(loader):\n    model = torch.nn.Linear(4, 4)\n"
    "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    crit = Crit()\n"
    "    for x in loader:\n        out = model(x)\n        out.sum().backward()\n        opt.step()\n        crit(out)\n"
)


def test_host_only_steps_do_not_make_device_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The step's file never touches a device: the helper's `.item()` reads a host tensor.
    _write(tmp_path, {"crit.py": HELPER, "train.py": CPU_TRAIN})
    monkeypatch.chdir(tmp_path)
    assert lint_paths([Path(".")], from_table({"select": ["TL101"]}, tmp_path)).findings == []


def test_a_device_step_decides_for_a_helper_in_a_host_only_looking_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # crit.py builds a module and never names a device, but the step that calls it is on CUDA.
    _write(tmp_path, {"crit.py": HELPER, "train.py": CPU_TRAIN.replace("out = model(x)", "out = model(x.cuda())")})
    monkeypatch.chdir(tmp_path)
    findings = lint_paths([Path(".")], from_table({"select": ["TL101"]}, tmp_path)).findings
    assert [(Path(f.path).name, f.line) for f in findings] == [("crit.py", 6)]
    assert "run every step from a training loop at train.py:13" in findings[0].message
