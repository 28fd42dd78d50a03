"""TL504 under a compile the run opts into (analysis/compiled_switch.py): a `torch.compile` call
made only with a setting of the run off by default (a `store_true` flag of the script, one
defined in another file's parser, a `compile()` method only called under such a flag) makes
what it traces low, with words saying so; a setting on by default (a config field `= True`, a
flag `default=True`, the `else` of an `--eager` flag) and a function also compiled by default
keep their tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import copied_project, expected_impacts
from torchlint.analysis.compiled_reach import CompiledInfo
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.findings import Finding


def _findings(root: Path) -> list[Finding]:
    result = lint_paths([root], from_table({"select": ["TL504"], "min-impact": "low"}, root))
    assert not result.errors
    return result.findings


def _at(findings: list[Finding], line: int) -> Finding:
    (found,) = [f for f in findings if Path(f.path).name == "nets.py" and f.line == line]
    return found


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return copied_project("compiled_opt_in", tmp_path)


def test_impacts_match_markers(project: Path) -> None:
    actual = {(f.line, f.code): f.impact for f in _findings(project)}
    expected = expected_impacts((project / "nets.py").read_text())
    assert actual == expected
    assert sorted(set(expected.values())) == ["high", "low"]


def test_the_words_name_the_setting(project: Path) -> None:
    findings = _findings(project)
    flag = _at(findings, 27)  # FlagNet: `if args.compile:` with a store_true `--compile` in the same script
    assert "compiled by `torch.compile(model)` in train_flag.py, only with `args.compile`, off by default" in flag.message
    assert flag.impact_reason.endswith("every step of a training loop, but compiled only with `args.compile`, off by default")
    other_file = _at(findings, 39)  # ParamsNet: `--torchcompile` in params.py, the `else` of `if not args.torchcompile:`
    assert "only with `args.torchcompile`, off by default" in other_file.message
    task = _at(findings, 49)  # TaskNet: compiled in `Task.compile()`, called only under `if args.torchcompile:`
    assert "compiled by `torch.compile(self.model)` in task.py, only with `args.torchcompile`, off by default" in task.message


def test_a_block_also_compiled_by_default_keeps_its_tier(project: Path) -> None:
    """Block runs in FlagNet (opt-in) and ConfigNet (compiled by default): the default run breaks there."""
    block = _at(_findings(project), 14)
    assert block.impact == "high" and "only with" not in block.message and "ConfigNet.forward()" in block.message


@pytest.mark.parametrize(("edit", "line"), [
    # the flag turned on by default: FlagNet compiles in every run
    (("train_flag.py", ('parser.add_argument("--compile", action="store_true")',
                        'parser.add_argument("--compile", action="store_true", default=True)')), 27),
    # some file sets the setting: no longer the parser's default
    (("train_params.py", ("    args = parse_args()\n", "    args = parse_args()\n    args.torchcompile = True\n")), 39),
    # a call of `Task.compile()` outside the flag: TaskNet compiles at the defaults too
    (("train_task.py", ("    if args.torchcompile:\n        task.compile", "    if True:\n        task.compile")), 49),
])
def test_a_compile_at_the_defaults_fires_as_before(tmp_path: Path, edit: tuple[str, tuple[str, str]], line: int) -> None:
    root = copied_project("compiled_opt_in", tmp_path, dict([edit]))
    found = _at(_findings(root), line)
    assert found.impact == "high" and "off by default" not in found.message


def test_a_test_calling_the_compile_method_is_no_run(tmp_path: Path) -> None:
    """A test compiles on toy inputs to see that it compiles: its call of `Task.compile()` is no run's."""
    root = copied_project("compiled_opt_in", tmp_path)
    (root / "test_task.py").write_text("from nets import TaskNet\nfrom task import Task\n\n\n"
                                       "def test_compile():\n    Task(TaskNet(4)).compile()\n")
    assert _at(_findings(root), 49).impact == "low"


def test_the_text_carries_the_switch() -> None:
    info = CompiledInfo("Net.forward", "`torch.compile(model)` in a.py", "Net.forward", switch="only with `args.compile`, off by default")
    assert info.text("Net.forward") == "`Net.forward()` (compiled by `torch.compile(model)` in a.py, only with `args.compile`, off by default)"


_ONE_FILE = '''
import argparse
import torch
import torch.nn as nn
parser = argparse.ArgumentParser()
parser.add_argument("--compile", action="store_true", DEFAULT)
args = parser.parse_args()
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        return h[h > 0].sum()
def maybe_compile(model):
    if not args.compile:
        return model
    return torch.compile(model)
SHAPE
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    model(x).backward()
    opt.step()
'''


@pytest.mark.parametrize("shape", [
    "model = maybe_compile(Net())",  # what follows `if not args.compile: return model`
    "model = torch.compile(Net()) if args.compile else Net()",
])
@pytest.mark.parametrize(("default", "opt_in"), [("default=False", True), ("default=True", False)])
def test_shapes_of_an_opt_in_compile(shape: str, default: str, opt_in: bool) -> None:
    from torchlint.engine import lint_source
    source = _ONE_FILE.replace("SHAPE", shape).replace("DEFAULT", default)
    (found,) = lint_source(source, "train.py", from_table({"select": ["TL504"], "min-impact": "low"}, Path(".")))
    assert found.line == 14 and (found.impact == "low") is opt_in  # (on by default: the step's tier, or medium where none is found)
    assert ("only with `args.compile`, off by default" in found.message) is opt_in


_INT_SWITCH = '''
import argparse
import torch
import torch.nn as nn
parser = argparse.ArgumentParser()
parser.add_argument("--use_compile", default=DEFAULT, type=int, choices=[0, 1])
args = parser.parse_args()
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        return h[h > 0].sum()
model = Net()
if TEST:
    model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    model(x).backward()
    opt.step()
'''


@pytest.mark.parametrize(("test", "default", "opt_in"), [
    ("args.use_compile == 1", "0", True), ("args.use_compile == 1", "1", False),
    ("args.use_compile != 0", "0", True), ("not args.use_compile == 0", "1", False),
    # `!= 1` is no switch's truth (a default of 2 passes it): not read as one, the compile taken as made
    ("args.use_compile != 1", "1", False),
])
def test_a_0_or_1_option_compared_is_its_switch(test: str, default: str, opt_in: bool) -> None:
    # minimind's `if args.use_compile == 1: model = torch.compile(model)`, an int option at 0
    from torchlint.engine import lint_source
    source = _INT_SWITCH.replace("TEST", test).replace("DEFAULT", default)
    (found,) = lint_source(source, "train.py", from_table({"select": ["TL504"], "min-impact": "low"}, Path(".")))
    assert found.line == 14 and (found.impact == "low") is opt_in
    assert ("only with `args.use_compile`, off by default" in found.message) is opt_in


def test_another_file_setting_the_switch_off_turns_nothing_on(tmp_path: Path) -> None:
    # minimind's LoRA trainer: `args.use_compile = 0` (its monkey patch and compile do not mix)
    from torchlint.engine import lint_paths
    (tmp_path / "train.py").write_text(_INT_SWITCH.replace("TEST", "args.use_compile == 1").replace("DEFAULT", "0"))
    (tmp_path / "lora.py").write_text("def setup(args):\n    if args.lora:\n        args.use_compile = 0\n")
    result = lint_paths([tmp_path], from_table({"select": ["TL504"], "min-impact": "low"}, tmp_path))
    (found,) = result.findings
    assert found.impact == "low" and "only with `args.use_compile`, off by default" in found.message
    (tmp_path / "lora.py").write_text("def setup(args):\n    if args.fast:\n        args.use_compile = 1\n")
    (found,) = lint_paths([tmp_path], from_table({"select": ["TL504"], "min-impact": "low"}, tmp_path)).findings
    assert found.impact != "low"  # a file that turns it on: no longer off by default
