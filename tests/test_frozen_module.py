"""TL308 and TL309 across files: a network built from a class of another module of the project
(a star import, as PyTorch-GAN's esrgan does) is flagged only where that class keeps trainable
weights and never freezes them; the join reads the class's summary (``ClassSummary.weights``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "frozen"


def _lint(root: Path, cache: Path | None = None):  # type: ignore[no-untyped-def]
    result = lint_paths([root], from_table({"select": ["TL308", "TL309"], "min-impact": "low"}, root), cache=cache)
    assert not result.errors
    return result.findings


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "frozen"
    shutil.copytree(PROJECT, root)
    return root


def test_only_the_unfrozen_class_of_another_file_is_flagged(project: Path) -> None:
    findings = _lint(project)
    for script in ("train.py", "finetune.py"):  # a star import, and names imported one by one
        text = (project / script).read_text()
        assert {(f.line, f.code) for f in findings if f.location.path.endswith(script)} == expected_markers(text), script
        assert {(f.line, f.code): f.impact for f in findings if f.location.path.endswith(script)} == expected_impacts(text), script
    assert not [f for f in findings if f.location.path.endswith("models.py")]
    assert "`features.requires_grad_(False)`" in next(f for f in findings if f.code == "TL308" and f.path.endswith("train.py")).fix_hint


def test_a_class_that_freezes_itself_in_its_own_file_is_not_flagged(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace(
        "        self.layers = nn.Sequential(*list(backbone.features.children())[:35])\n",
        "        self.layers = nn.Sequential(*list(backbone.features.children())[:35])\n"
        "        for p in self.layers.parameters():\n            p.requires_grad = False\n"))
    # (only the critic, a plain class of conv layers, is left: medium, not a backbone's high)
    assert [(f.location.path.rsplit("/", 1)[-1], f.code, f.impact) for f in _lint(project)] == [("train.py", "TL308", "medium")]


def test_the_cached_results_settle_the_same(project: Path, tmp_path: Path) -> None:
    first = _lint(project, tmp_path / "cache")
    again = _lint(project, tmp_path / "cache")
    assert [(f.line, f.impact, f.message) for f in first] == [(f.line, f.impact, f.message) for f in again]
    assert len(first) == 4
    assert sorted(f.impact for f in first) == ["high", "high", "low", "medium"]  # the backbone's tier survives the cache


def _freezes_by_walk(ctx, root) -> bool:  # type: ignore[no-untyped-def]
    """The question asked of every node under ``root`` (what ``_freezes_in_body`` answered before its indexes)."""
    import libcst as cst

    from torchlint.analysis.frozen import _GRAD_OFF
    from torchlint.analysis.names import dotted, last_segment
    for node in ctx.tree.descendants(root):
        if type(node) is cst.Call and ctx.method_name(node) == "requires_grad_":
            return True
        if type(node) is cst.Attribute and node.attr.value == "requires_grad" and isinstance(ctx.tree.parent(node), cst.AssignTarget):
            return True
        if type(node) is cst.Arg and node.keyword is not None and node.keyword.value == "requires_grad":
            return True
        if type(node) in (cst.Name, cst.Attribute) and last_segment(dotted(node) or "") in _GRAD_OFF:
            return True
    return False


_DECOYS = '''
import torch
class Reads(nn.Module):
    def f(self, x):
        return x.requires_grad, no_grad_count, make(requires_grad_=1), x.requires_grad_, x.no_grad_
class Keyword(nn.Module):
    def __init__(self):
        self.w = nn.Parameter(torch.zeros(3), requires_grad=False)
class Assigns(nn.Module):
    def __init__(self):
        for p in self.parameters():
            p.requires_grad = False
class Method(nn.Module):
    def __init__(self):
        self.net.requires_grad_(False)
class Context(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            return x
class Bare(nn.Module):
    def forward(self, x):
        with inference_mode():
            return x
class Outer:
    class Inner:
        def g(self):
            h().set_grad_enabled  # (the attribute's name alone, as the walk reads it)
with torch.no_grad():
    y = Reads()(requires_grad=True)
'''


@pytest.mark.parametrize("path", [None, *sorted(FIXTURES.glob("rules/TL3*/*.py"))[::2], *sorted(FIXTURES.glob("rules/TL1*/*.py"))[::5]],
                         ids=lambda p: "decoys" if p is None else f"{p.parent.name}/{p.name}")
def test_freezes_in_body_from_indexes_agrees_with_a_walk(path: Path | None) -> None:
    """``_freezes_in_body`` answers from the file's indexes what a walk of each class and
    function finds: calls of ``requires_grad_``, assigned ``requires_grad``, the keyword, and
    the grad-off names (not a read of ``requires_grad``, a method only named alike, nor
    a name only beginning alike, nor anything outside the class)."""
    import libcst as cst

    from torchlint.analysis.context import FileContext
    from torchlint.analysis.frozen import _freezes_in_body
    ctx = FileContext(cst.parse_module(_DECOYS if path is None else path.read_text()), "m.py")
    roots = [*ctx.tree.nodes(cst.ClassDef), *ctx.tree.nodes(cst.FunctionDef)]
    answers = [(root.name.value, _freezes_in_body(ctx, root)) for root in roots]
    assert answers == [(root.name.value, _freezes_by_walk(ctx, root)) for root in roots]
    if path is None:
        assert dict(answers) == {"Reads": False, "Keyword": True, "Assigns": True, "Method": True, "Context": True, "Bare": True,
                                 "Outer": True, "Inner": True, "f": False, "g": True, "__init__": True, "forward": True}
