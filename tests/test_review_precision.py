"""Review 1's precision defects, as classes: host tensors and NumPy arrays taken for device
tensors, a project with no accelerator, small uploads and reads at the step's boundary,
reads after a synchronize, and counts that are Python ints."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.analysis.context import FileContext, Options
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "precision"
RULES = ["TL101", "TL102", "TL103", "TL104", "TL105", "TL106", "TL110", "TL114"]


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("project") / "precision"
    shutil.copytree(PROJECT, root)
    result = lint_paths([root], from_table({"select": RULES, "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_the_findings_and_tiers_match_the_markers(findings) -> None:  # type: ignore[no-untyped-def]
    root, found = findings
    actual = {(Path(f.path).relative_to(root).as_posix(), f.line, f.code): f.impact for f in found}
    expected = {(p.relative_to(root).as_posix(), line, code) for p in root.rglob("*.py") for line, code in expected_markers(p.read_text())}
    assert set(actual) == expected
    tiers = {(p.relative_to(root).as_posix(), line, code): tier for p in root.rglob("*.py") for (line, code), tier in expected_impacts(p.read_text()).items()}
    assert {key: actual[key] for key in tiers} == tiers


def test_the_reasons_say_where_the_read_sits(findings) -> None:  # type: ignore[no-untyped-def]
    root, found = findings
    by = {(Path(f.path).name, f.line, f.code): f for f in found}
    first_line = by[("uploads.py", 16, "TL101")]  # `batch[-1].item()` before any layer of the step's first model call
    assert "at its start" in first_line.impact_reason and "about 1 %" in first_line.impact_reason
    small = by[("uploads.py", 30, "TL110")]
    assert small.impact_reason.startswith("a small tensor made on the host") and "at its start" in small.impact_reason
    assert by[("uploads.py", 17, "TL110")].impact == "low"  # the read in its own arguments drained the queue
    assert by[("uploads.py", 32, "TL110")].impact_reason.startswith("a tensor made on the host")  # 4 sizes: maybe megabytes
    assert "right after a sync" in by[("meters.py", 16, "TL101")].impact_reason


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def _last(ctx: FileContext, name: str) -> cst.Name:
    return [n for n in ctx.tree.nodes(cst.Name) if n.value == name][-1]


NESTED = """import torch
def run(model, xs):
    for x in xs:
        def show(tokens):
            return tokens.tolist()
        host = torch.tensor(x.tokens)
        show(host[:3])
        show(tokens=host)
"""


def test_a_nested_functions_parameter_is_where_its_callers_put_it() -> None:
    ctx = _context(NESTED)
    tokens = [n for n in ctx.tree.nodes(cst.Name) if n.value == "tokens"][1]  # the receiver of `.tolist()`
    assert ctx.devices.moved_to_host(tokens, tokens)
    # one caller passing a device tensor, or the function handed on, and it is not known
    for changed in (NESTED + "        show(model(x))\n", NESTED + "        xs.map(show)\n", NESTED.replace("show(tokens=host)", "show(*[host])")):
        ctx = _context(changed)
        tokens = [n for n in ctx.tree.nodes(cst.Name) if n.value == "tokens"][1]
        assert not ctx.devices.moved_to_host(tokens, tokens), changed


@pytest.mark.parametrize("setting", ['torch.set_default_device("cuda")', "torch.set_default_tensor_type(torch.cuda.FloatTensor)",
                                     "Tensor = torch.cuda.FloatTensor"])
def test_a_default_device_keeps_factories_off_the_host(setting: str) -> None:
    code = f"import torch\n{setting}\nt = torch.zeros(3)\nprint(t)\n"
    ctx = _context(code)
    assert not ctx.devices.moved_to_host(_last(ctx, "t"), _last(ctx, "t"))
    ctx = _context(code.replace(setting, 'torch.set_default_device("cpu")'))
    assert ctx.devices.moved_to_host(_last(ctx, "t"), _last(ctx, "t"))


def test_a_numpy_array_with_tensor_like_methods_is_no_tensor() -> None:
    ctx = _context("import numpy as np\nimport torch\nd = np.array(xs)\nd = d[d.nonzero()]\nprint(d.view())\n")
    d = _last(ctx, "d")
    assert not ctx.syncs.tensorish(d, d)
    ctx = _context("import torch\nd = model(xs)\nd = d[d.nonzero()]\nprint(d.view())\n")
    d = _last(ctx, "d")
    assert ctx.syncs.tensorish(d, d)


def test_a_process_rank_is_no_device(tmp_path: Path) -> None:
    """A3C's workers have ranks and no device: host only. Given to `.to()`, a rank is one."""
    shutil.copy(PROJECT / "a3c.py", tmp_path / "a3c.py")
    config = from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)
    assert lint_paths([tmp_path], config).findings == []
    text = (PROJECT / "a3c.py").read_text().replace("model = ActorCritic()", "model = ActorCritic().to(rank)")
    (tmp_path / "a3c.py").write_text(text.replace("torch.randn(5, 4)", "torch.randn(5, 4, device=rank)"))
    assert [f.code for f in lint_paths([tmp_path], config).findings] == ["TL101"]
