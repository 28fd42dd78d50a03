"""Classes out of a registry a decorator fills (score_sde's ``_CORRECTORS[name]``), built inside the update function a
sampling loop calls per denoising step, and another file's schedule whose host tensors their ``update_fn`` moves to the
device (TL113 through ``FileSummary.host_attributes``) (fixtures/projects/registrysampler)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.host_attributes import host_attributes
from torchlint.analysis.registries import registered_classes


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("registrysampler", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_moves_run_once_per_denoising_step(project: Path) -> None:
    moves = {f.line: f for f in project_findings(project, "TL113") if f.path == "samplers.py"}
    assert set(moves) == {33, 41}  # not OnDevice's (made on the device), not Unregistered's (no loop runs it)
    assert all("per denoising step" in f.message and "Langevin.update_fn" in moves[33].message for f in moves.values())


def test_the_files_own_loop_moving_the_table_waits_for_the_join(project: Path) -> None:
    """main.py's own sampling loop moves `sde.alphas` (a `VPSchedule` built there, in another file's class): held by the
    join's answer, its table made on the host; `sde.alphas_on_device`, made on the device, is not reported."""
    moves = [f for f in project_findings(project, "TL113") if f.path == "main.py"]
    assert [(f.line, f.impact) for f in moves] == [(31, "medium")] and "per denoising step" in moves[0].message


def test_the_registry_holds_the_decorated_classes(project: Path) -> None:
    ctx = FileContext(cst.parse_module((project / "samplers.py").read_text()), "samplers.py")
    assert {table: [c.name.value for c in classes] for table, classes in registered_classes(ctx.tree).items()} == \
        {"_SAMPLERS": ["Langevin", "Ancestral", "OnDevice"]}


def test_a_registry_that_also_holds_functions_names_no_class() -> None:
    code = '''
_TABLE = {}
def register(name):
    def _register(obj):
        _TABLE[name] = obj
        return obj
    return _register

@register("a")
class A:
    pass

@register("b")
def b():
    pass

def get(name):
    return _TABLE[name]
'''
    assert registered_classes(FileContext(cst.parse_module(code), "t.py").tree) == {}


def test_a_schedule_keeps_its_host_tables(project: Path) -> None:
    ctx = FileContext(cst.parse_module((project / "schedules.py").read_text()), "schedules.py")
    keys = {id(c): c.name.value for c in ctx.tree.nodes(cst.ClassDef)}
    assert host_attributes(ctx, keys) == (("VESchedule", "sigmas"), ("VPSchedule", "alphas"), ("VPSchedule", "betas"))
