"""What torch.compile traces, across a project (analysis/compiled_roots.py,
analysis/compiled_reach.py) and TL504 on it: a model compiled in the training script
whose submodules, in a package, break the graph in their own forward and in a helper
of a third module; a disabled helper and methods forward never calls stay quiet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_markers
from torchlint.analysis.compiled_reach import CompiledInfo
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "compiled"


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "compiled"
    shutil.copytree(PROJECT, copy)
    monkeypatch.chdir(copy)
    return copy


def test_project_findings_match_markers(root: Path) -> None:
    result = lint_paths([Path(".")], from_table({"select": ["TL504"]}, root))
    actual = {(Path(f.path).as_posix(), f.line, f.code) for f in result.findings}
    expected = {(p.relative_to(root).as_posix(), line, code) for p in sorted(root.rglob("*.py"))
                for line, code in expected_markers(p.read_text())}
    assert actual == expected and expected
    assert not result.errors
    (finding,) = result.findings
    assert "`Layer.forward()` (called from `Encoder.forward()`, compiled by `torch.compile(model)` in train.py)" in finding.message
    assert finding.impact == "high"  # the compiled model runs every step of a training loop


def test_without_the_compiling_script_nothing_is_traced(root: Path) -> None:
    """The same package checked alone: nothing compiles it, so nothing breaks a graph."""
    result = lint_paths([root / "nets"], from_table({"select": ["TL504"]}, root))
    assert not result.findings and not result.errors


def test_the_text_names_the_chain() -> None:
    root = CompiledInfo("Net.forward", "`@torch.compile` in a.py")
    assert root.text("Net.forward") == "`Net.forward()` (compiled by `@torch.compile` in a.py)"
    deep = CompiledInfo("Net.forward", "`torch.compile(model)` in a.py", "Block.forward")
    assert deep.text("helper") == "`helper()` (called from `Block.forward()`, traced from `Net.forward()`, compiled by `torch.compile(model)` in a.py)"


CACHED = FIXTURES / "projects" / "compiled_cache"


@pytest.fixture()
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "compiled_cache"
    shutil.copytree(CACHED, copy)
    monkeypatch.chdir(copy)
    return copy


def _breaks(root: Path) -> set[tuple[str, int]]:
    result = lint_paths([Path(".")], from_table({"select": ["TL504"]}, root))
    assert not result.errors
    return {(Path(f.path).name, f.line) for f in result.findings}


def test_a_path_only_the_uncompiled_decoder_opens_is_not_traced(cached: Path) -> None:
    """The compiled model is called without a cache, in the loop and in the function it is
    handed to: `kv_cache.get_pos()` and what follows `if kv_cache is None: return` are not traced."""
    expected = {(p.name, line) for p in sorted(cached.rglob("*.py")) for line, _ in expected_markers(p.read_text())}
    assert _breaks(cached) == expected == {("nets.py", 22)}


def test_a_compiled_call_passing_the_cache_traces_its_path(cached: Path) -> None:
    evaluate = cached / "evaluate.py"
    evaluate.write_text(evaluate.read_text().replace('reduction="none")', 'reduction="none", kv_cache=Cache(1))')
                        .replace("import torch\n", "import torch\n\nfrom nets import Cache\n", 1))
    assert _breaks(cached) == {("nets.py", 13), ("nets.py", 17), ("nets.py", 22)}


def test_a_compiled_object_used_anyhow_may_be_passed_anything(cached: Path) -> None:
    """Kept in a list, the compiled model may be called with any argument: every path is traced."""
    train = cached / "train.py"
    train.write_text(train.read_text().replace("opt = torch.optim", "models = [model]\nopt = torch.optim"))
    assert _breaks(cached) == {("nets.py", 13), ("nets.py", 17), ("nets.py", 22)}


_GLOBAL_READ = '''
import torch
import torch.nn as nn
class Cache:
    def __init__(self):
        self.s = torch.zeros(1)
    def pos(self):
        return self.s[0].item()
class M(nn.Module):
    def forward(self, x, cache=None):
        t = 0 if cache is None else cache.pos()
        return x[t:]
model = torch.compile(M())
def run(x):
    return model(x, cache=CACHE)
for x in loader:
    model(x).sum().backward()
'''


@pytest.mark.parametrize(("cache", "lines"), [("Cache()", [8]), ("None", [])])
def test_a_function_calling_the_compiled_global_counts(cache: str, lines: list[int]) -> None:
    from torchlint.engine import lint_source
    found = lint_source(_GLOBAL_READ.replace("CACHE", cache), "g.py", from_table({"select": ["TL504"]}, Path(".")))
    assert [f.line for f in found] == lines
