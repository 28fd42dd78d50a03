"""A parameter is a device tensor where every call of its function in the project passes
one (a sampler's noise levels, ``get_levels(n, device=device)`` in the function that picks
the sampler from a table, or ``torch.linspace(..., device=device)`` in another file): what
the function reads of it into Python waits for the device (fixtures/projects/callers).
One caller passing a host tensor, or Python floats, keeps it quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings



@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("callers", tmp_path, monkeypatch)


def _findings(root: Path):  # type: ignore[no-untyped-def]
    return project_findings(root)


def test_reads_of_a_device_parameter_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_the_reads_run_per_sampling_step(project: Path) -> None:
    read = next(f for f in _findings(project) if f.code == "TL105")
    assert "in a sampling loop" in read.message and read.impact == "medium"


def test_one_caller_passing_a_host_tensor_keeps_the_reads_quiet(project: Path) -> None:
    run = project / "run.py"
    run.write_text(run.read_text().replace("torch.linspace(80.0, 0.0, 40, device=device))\n    sample_mixed",
                                           "torch.linspace(80.0, 0.0, 40))\n    sample_mixed"))
    assert not any(f.code in ("TL104", "TL105") for f in _findings(project))


def test_a_device_tensor_from_every_caller_reports_the_other_sampler_too(project: Path) -> None:
    run = project / "run.py"
    run.write_text(run.read_text().replace("sample_mixed(model, x, torch.linspace(80.0, 0.0, 40))",
                                           "sample_mixed(model, x, torch.linspace(80.0, 0.0, 40, device=device))"))
    lines = {f.line for f in _findings(project) if f.code == "TL104" and f.path.endswith("sampling.py")}
    mixed = next(i for i, text in enumerate((project / "sampling.py").read_text().splitlines(), 1) if "one caller passes a host tensor" in text)
    assert mixed in lines
