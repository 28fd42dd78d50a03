"""A name bound to an object in each of two branches (Rainbow's `mem = load_memory(path)` or
`mem = ReplayMemory(args)`) holds one object, not a list of both: its `append` is the class's
method, run every step of the loop that calls it (fixtures/projects/replay)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("replay", tmp_path, monkeypatch)


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_copy_to_the_host_runs_from_the_environment_loop(project: Path) -> None:
    copy = next(f for f in project_findings(project) if f.code == "TL102")
    assert "`ReplayMemory.append()`" in copy.message and "main.py:31" in copy.message


def test_a_list_of_memories_in_one_branch_is_a_container_s_append(project: Path) -> None:
    main = project / "main.py"
    main.write_text(main.read_text().replace("    mem = ReplayMemory(10000, device)", "    mem = [ReplayMemory(10000, device)]"))
    assert not any(f.code == "TL102" for f in project_findings(project))
