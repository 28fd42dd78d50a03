"""The step reached wherever the code puts the model (issue 32, items 3 and 4): a model held
in a module-level global (bound under `global` in `run()`, or by another module's `setup()`)
and called through wrappers; a sampler picked from a table and given the model as a function
it calls once per step of its schedule; a helper's per-parameter zeroing placed by the join
as the sync rules are; a synchronize under a device test (`if use_gpu:`), which runs on every
GPU step; `num_workers=args.num_workers` with an argparse default of 0."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, assert_markers_hold
from torchlint.analysis.context import FileContext, Options
from torchlint.config import Config, from_table
from torchlint.engine import lint_paths, lint_source

PROJECT = FIXTURES / "projects" / "held"
RULES = ["TL101", "TL102", "TL103", "TL104", "TL114", "TL201", "TL303"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    copied = tmp_path / "held"
    shutil.copytree(PROJECT, copied)
    return copied


def _findings(root: Path, *names: str):  # type: ignore[no-untyped-def]
    paths = [root / name for name in names] or [root]
    result = lint_paths(paths, from_table({"select": RULES, "min-impact": "low"}, root))
    assert not result.errors
    return [f for f in result.findings if Path(f.path).is_relative_to(root)]


def test_the_project_findings_and_tiers_match_the_markers(root: Path) -> None:
    found = _findings(root)
    assert_markers_hold(root, [_relative(f, root) for f in found])


def _relative(finding, root: Path):  # type: ignore[no-untyped-def]
    return replace(finding, location=replace(finding.location, path=Path(finding.path).relative_to(root).as_posix()))


def test_a_global_model_set_by_another_module_is_reached_through_its_wrapper(root: Path) -> None:
    found = _findings(root, "models.py", "wrappers.py", "run_across.py")
    index = next(f for f in found if f.code == "TL114")
    assert Path(index.path).name == "models.py" and index.impact == "medium"  # one wait per step mid-step (issue 32)
    assert "run_across.py" in index.message


def test_a_wrapper_that_runs_the_model_is_device_work_before_a_read() -> None:
    # The read after `model_wrap(x)` waits for the forward the wrapper queued: mid-step (medium: once per step),
    # not "at its start"; with no model in the wrapper it is the step's first device work.
    source = (PROJECT / "run_held.py").read_text()
    found = [f for f in lint_source(source, "run_held.py", Config(select=("TL102",), min_impact="low")) if f.code == "TL102"]
    assert [f.impact for f in found] == ["medium"]  # mid-step, once per step (issue 32)
    quiet = source.replace("    return ranker(x.to(device))\n", "    return x.to(device)\n")
    found = [f for f in lint_source(quiet, "run_held.py", Config(select=("TL102",), min_impact="low")) if f.code == "TL102"]
    assert [f.impact for f in found] != ["high"]


def test_the_per_parameter_zeroing_says_how_often() -> None:
    source = (PROJECT / "mixed_precision.py").read_text()
    found = {f.line: f for f in lint_source(source, "mixed_precision.py", Config(select=("TL303",), min_impact="low"))}
    assert "(per parameter per step)" in found[11].message and "every step of a training loop" in found[11].impact_reason
    assert "once (not every step)" in found[17].impact_reason


@pytest.mark.parametrize(("guard", "reported"), [
    ("use_gpu", True),
    ("args.cuda", True),
    ("torch.cuda.is_available()", True),
    ('device.type == "cuda"', True),
    ("args.profile", False),  # a profiling flag: deliberate
    ("step % 100 == 0", False),  # every N steps
    ("use_gpu and args.profile", False),
])
def test_a_synchronize_under_a_device_test_runs_every_step(guard: str, reported: bool) -> None:
    source = (
        "import torch\n"
        "def train(model, loader, opt, args, use_gpu, device):\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = model(x.to(device)).sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        f"        if {guard}:\n"
        "            torch.cuda.synchronize()\n"
    )
    found = [f for f in lint_source(source, "t.py", Config(select=("TL103",), min_impact="low")) if f.code == "TL103"]
    assert bool(found) is reported


def test_num_workers_from_an_argparse_default() -> None:
    source = (PROJECT / "run_held.py").read_text()
    found = [f.line for f in lint_source(source, "run_held.py", Config(select=("TL201",), min_impact="low"))]
    zero, two = (next(i for i, line in enumerate(source.splitlines(), 1) if f"Rows(\"{name}\")" in line) for name in ("train.txt", "test.txt"))
    assert zero in found and two not in found
    given = source.replace('"--num-workers", type=int, default=0', '"--num-workers", type=int, default=4')
    assert zero not in [f.line for f in lint_source(given, "run_held.py", Config(select=("TL201",), min_impact="low"))]


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def test_global_bindings_of_a_name_read_in_a_function() -> None:
    ctx = _context("net = None\ndef wrap(x):\n    return net(x)\ndef run():\n    global net\n    net = Net()\n    local = 1\n"
                   "def own(net):\n    return net(1)\n")
    calls = [c for c in ctx.tree.nodes(cst.Call) if ctx.module.code_for_node(c.func) == "net"]
    in_wrap, in_own = calls
    assert [ctx.module.code_for_node(b.value) for b in ctx.bindings.global_bindings("net", in_wrap)] == ["None", "Net()"]
    assert ctx.bindings.global_bindings("net", in_own) == []  # a parameter of its own
    assert ctx.bindings.module_bindings("local") == []  # `global` names one name only


@pytest.mark.parametrize(("flip", "reported"), [("            first = False\n", False), ("", True)])
def test_a_branch_on_a_flag_its_body_clears_runs_once(flip: str, reported: bool) -> None:
    # litgpt's `if prefill_token: input_pos = torch.tensor([n], device=device); prefill_token = False`
    source = (
        "import torch\n"
        "def train(model, loader, opt, device, n):\n"
        "    first = True\n"
        "    for x in loader:\n"
        "        if first:\n"
        "            pos = torch.tensor([n], device=device)\n"
        f"{flip}"
        "        model(x.to(device), pos).sum().backward()\n"
        "        opt.step()\n"
    )
    found = [f for f in lint_source(source, "t.py", Config(select=("TL113",), min_impact="low")) if f.code == "TL113"]
    assert bool(found) is reported
