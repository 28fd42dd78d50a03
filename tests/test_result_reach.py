"""Device-ness through a project method's result (fixtures/projects/resultreach, whisper's
decode loop): the loop passes its logit filters ``logits = self.inference.logits(...)``, and
a filter indexes them with a Python list kept on ``self``. Where every implementation the call
may run returns a device tensor (a module's output), the list is copied over per decoded token;
where one returns ``.cpu()``, nothing is."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext, Options


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("resultreach", tmp_path, monkeypatch)


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_only_the_filter_given_the_module_output_is_flagged(project: Path) -> None:
    found = [f for f in project_findings(project) if f.code == "TL114"]
    lines = (project / "inference.py").read_text().splitlines()
    assert [lines[f.line - 1].split("#")[0].strip() for f in found] == ['logits[:, self.suppress] = -float("inf")']
    assert "SuppressTokens.apply" in found[0].message


def _returns(code: str) -> tuple[str, ...] | None:
    ctx = FileContext(cst.parse_module("import torch\n" + code), "m.py", Options())
    function = next(f for f in ctx.tree.nodes(cst.FunctionDef) if f.name.value == "logits")
    calls = ctx.devices.returns_device(function)
    return None if calls is None else tuple(cst.Module([]).code_for_node(c.func) for c in calls)


@pytest.mark.parametrize(("code", "expected"), [
    ("class I:\n    def logits(self, t):\n        return self.model.decoder(t)\n", ("self.model.decoder",)),
    ("def logits(t):\n    return torch.zeros(3, device='cuda') * t\n", ()),
    ("class I:\n    def logits(self, t):\n        return self.model(t).cpu()\n", None),
    ("class I:\n    def logits(self, t):\n        return self.model(t).tolist()\n", None),
    ("class I:\n    def logits(self, t):\n        return [self.model(t)]\n", None),
    ("class I:\n    def logits(self, t):\n        if t is None:\n            return\n        return self.model(t)\n", None),
    ("class I:\n    def logits(self, t):\n        raise NotImplementedError\n", None),
])
def test_what_a_method_returns_on_the_device(code: str, expected: tuple[str, ...] | None) -> None:
    assert _returns(code) == expected
