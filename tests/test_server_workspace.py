"""`torchlint server` reads projects and writes caches only inside its workspace folders
(a document outside every one, however its URI reaches there, is linted alone), and
pulled diagnostics carry a `resultId`: an unchanged pull is answered `unchanged`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from test_server import Client, editor
from test_server_project import TRAIN, UTILS, _open, _package

pytest.importorskip("pygls")
pytestmark = pytest.mark.slow


def _outside_project(root: Path) -> Path:
    """A project beside the workspace whose helper is per-step only with its loop's file."""
    project = root / "outside" / "proj"
    (project / "mytrain").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'mytrain'\n")
    (project / "mytrain" / "__init__.py").write_text("")
    (project / "mytrain" / "utils.py").write_text(UTILS)
    (project / "mytrain" / "train.py").write_text(TRAIN)
    return project


@pytest.mark.parametrize("reach", ["dotdot", "symlink"])
def test_a_document_outside_the_workspace_is_linted_alone(tmp_path: Path, reach: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHLINT_CACHE_DIR", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _package(workspace)
    project = _outside_project(tmp_path)
    if reach == "dotdot":
        helper = workspace / ".." / "outside" / "proj" / "mytrain" / "utils.py"  # not normalised: as a client may send it
    else:
        (workspace / "linked").symlink_to(project, target_is_directory=True)
        helper = workspace / "linked" / "mytrain" / "utils.py"
    uri = "file://" + str(helper)
    with editor(workspace) as (client, _):
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": UTILS}})
        # Alone: the loop that makes its `.item()` per-step is in a file never read.
        assert client.diagnostics(uri) == []
        inside = workspace / "mytrain" / "utils.py"
        _open(client, inside)
        assert [d["code"] for d in client.diagnostics(inside.as_uri())] == ["TL101"]  # inside: its project's context
    assert not (project / ".torchlint_cache").exists(), "the server wrote into a project outside its workspace"
    assert not (tmp_path / ".torchlint_cache").exists() and not (tmp_path / "outside" / ".torchlint_cache").exists()
    assert (workspace / ".torchlint_cache").is_dir()  # inside the workspace it caches as before


def test_a_project_above_the_workspace_folder_is_walked_from_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The editor opened `repo/sub` of a repository whose pyproject.toml is at `repo`:
    nothing above `sub` is read, and the cache goes into `sub`."""
    monkeypatch.delenv("TORCHLINT_CACHE_DIR", raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    _package(repo)
    (repo / "above.py").write_text("import torch\nfrom mytrain.utils import accuracy\nfor x, y in loader:\n    acc = accuracy(x, y)\n")
    (repo / "mytrain" / "train.py").write_text("import torch\n")  # the only caller is above the workspace
    workspace = repo / "mytrain"
    utils = workspace / "utils.py"
    with editor(workspace) as (client, _):
        _open(client, utils)
        found = client.diagnostics(utils.as_uri())
        assert found == []  # the caller above the folder is not read
    assert not (repo / ".torchlint_cache").exists() and (workspace / ".torchlint_cache").is_dir()


def _pull(client: Client, uri: str, previous: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"textDocument": {"uri": uri}}
    if previous is not None:
        params["previousResultId"] = previous
    return client.request("textDocument/diagnostic", params)


def test_an_unchanged_pull_is_answered_unchanged(tmp_path: Path) -> None:
    utils, train = _package(tmp_path)
    capabilities = {"textDocument": {"diagnostic": {"dynamicRegistration": False}}}
    with editor(tmp_path, capabilities) as (client, _):
        _open(client, utils)
        first = _pull(client, utils.as_uri())
        assert first["kind"] == "full" and [d["code"] for d in first["items"]] == ["TL101"] and first["resultId"]
        again = _pull(client, utils.as_uri(), first["resultId"])
        assert again == {"kind": "unchanged", "resultId": first["resultId"]}
        assert _pull(client, utils.as_uri(), "a stale id")["kind"] == "full"  # another id: the whole report
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": utils.as_uri(), "version": 2},
            "contentChanges": [{"text": UTILS.replace("return correct.item()", "return correct")}],
        })
        changed = _pull(client, utils.as_uri(), first["resultId"])
        assert changed["kind"] == "full" and changed["items"] == [] and changed["resultId"] != first["resultId"]
        assert _pull(client, utils.as_uri(), changed["resultId"])["kind"] == "unchanged"
