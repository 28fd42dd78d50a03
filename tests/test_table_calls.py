"""Calls of a function picked from a table another module exports: GraphGym's graph heads keep
``self.pooling_fun = pooling_dict[cfg.model.graph_pooling]`` and call it in ``forward``, the table
bound twice in its module (``pooling_dict = {**register.pooling_dict, **pooling_dict}``). Each of the
table's functions runs per step there; a table's function picked the same way but called once, after
training, stays quiet (fixtures/projects/pooltables, issue 32)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.project import Project
from torchlint.analysis.steps import StepSummarizer


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("pooltables", tmp_path, monkeypatch)


def _joined(root: Path) -> Project:
    summaries = []
    for path in sorted(root.glob("*.py")):
        ctx = FileContext(cst.parse_module(path.read_text()), str(path))
        summaries.append(StepSummarizer(ctx).summary(str(path), lambda node: None))  # type: ignore[arg-type,return-value]
    return Project(summaries)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_a_table_bound_again_with_its_own_items_exports_each_function(project: Path) -> None:
    joined = _joined(project)
    exports = dict(joined.files[str(project / "pooling.py")].exports)
    assert exports["POOLS"] == ("each", (("local", "add_pool"), ("local", "max_pool")))
    assert "SUMMARIES" not in dict(joined.files[str(project / "registry.py")].exports)  # (an empty table holds no function)


def test_an_attribute_picked_from_an_imported_table_runs_each_of_its_functions(project: Path) -> None:
    joined = _joined(project)
    head = str(project / "head.py")
    call = next(c for c in joined.files[head].calls if c.caller == "GraphHead.forward" and c.target[0] == "import")
    pooling = str(project / "pooling.py")
    assert joined.callees(call.target, head) == [(pooling, "add_pool"), (pooling, "max_pool")]
