"""`torchlint server` in a project, driven over stdio: a helper in a package gets its
diagnostic whichever file is opened first (the project's files on disk are its context),
pull diagnostics (LSP 3.17), the fix-all code action and its `only` filter, notebooks
(`notebookDocument/*`), and a config change seen through `workspace/didChangeWatchedFiles`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from test_server import SOURCE, Client, apply, editor

pytest.importorskip("pygls")
pytestmark = pytest.mark.slow

UTILS = "import torch\n\n\ndef accuracy(logits, labels):\n    correct = (logits.argmax(dim=1) == labels).float().mean()\n    return correct.item()\n"
TRAIN = (
    "import torch\nfrom mytrain.utils import accuracy\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
    "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n    acc = accuracy(out, y)\n"
)


def _package(root: Path) -> tuple[Path, Path]:
    (root / "mytrain").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'mytrain'\n")
    (root / "mytrain" / "__init__.py").write_text("")
    (root / "mytrain" / "utils.py").write_text(UTILS)
    (root / "mytrain" / "train.py").write_text(TRAIN)
    return root / "mytrain" / "utils.py", root / "mytrain" / "train.py"


def _open(client: Client, path: Path, text: str | None = None) -> None:
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": path.as_uri(), "languageId": "python", "version": 1, "text": path.read_text() if text is None else text,
    }})


def test_a_package_helper_gets_its_diagnostic_whichever_file_is_opened_first(tmp_path: Path) -> None:
    utils, train = _package(tmp_path)
    with editor(tmp_path) as (client, _):
        _open(client, utils)  # alone: the loop calling it is on disk, not open
        (tl101,) = client.diagnostics(utils.as_uri())
        assert tl101["code"] == "TL101" and "mytrain/train.py:10" in tl101["message"]
    with editor(tmp_path) as (client, _):
        _open(client, train)  # alone: its call puts the helper's `.item()` on disk into every step
        (at_call,) = client.diagnostics(train.as_uri())
        assert at_call["code"] == "TL101" and at_call["range"]["start"]["line"] == 9 and "mytrain/utils.py:6" in at_call["message"]
        _open(client, utils)
        assert [d["code"] for d in client.diagnostics(utils.as_uri())] == ["TL101"]
        # The editor's text of train.py, not the disk's, is what counts once it is open.
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": train.as_uri(), "version": 2},
            "contentChanges": [{"text": TRAIN.replace("    acc = accuracy(out, y)\n", "")}],
        })
        assert client.diagnostics(train.as_uri()) == []
        assert client.diagnostics(utils.as_uri()) == []


def _pull(client: Client, uri: str, refreshes: list[dict[str, Any]]) -> list[str]:
    """``textDocument/diagnostic`` for ``uri``: the codes it reports. Meanwhile the server's
    refresh requests are answered and kept in ``refreshes``; no diagnostic may be pushed."""
    client.next_id += 1
    asked = client.next_id
    client.send({"id": asked, "method": "textDocument/diagnostic", "params": {"textDocument": {"uri": uri}}})
    while True:
        message = client.wait(lambda m: True)
        assert message.get("method") != "textDocument/publishDiagnostics", "a client that pulls is sent no diagnostics"
        if message.get("method") == "workspace/diagnostic/refresh":
            client.send({"id": message["id"], "result": None})
            refreshes.append(message)
        elif message.get("id") == asked:
            report = message["result"]
            assert report["kind"] == "full"
            return sorted(d["code"] for d in report["items"])


def test_pull_diagnostics(tmp_path: Path) -> None:
    utils, train = _package(tmp_path)
    capabilities = {"textDocument": {"diagnostic": {"dynamicRegistration": False}}, "workspace": {"diagnostics": {"refreshSupport": True}}}
    refreshes: list[dict[str, Any]] = []
    with editor(tmp_path, capabilities) as (client, init):
        assert init["capabilities"]["diagnosticProvider"]["interFileDependencies"] is True
        _open(client, utils)
        assert _pull(client, utils.as_uri(), refreshes) == ["TL101"]
        _open(client, train)
        assert _pull(client, train.as_uri(), refreshes) == []
        # train.py stops calling the helper: the helper's diagnostics change, so the
        # server asks the client to pull again, and the next pull has nothing.
        refreshes.clear()
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": train.as_uri(), "version": 2},
            "contentChanges": [{"text": TRAIN.replace("    acc = accuracy(out, y)\n", "")}],
        })
        assert _pull(client, train.as_uri(), refreshes) == []
        assert refreshes
        assert _pull(client, utils.as_uri(), refreshes) == []


TWO_FIXES = SOURCE.replace("opt = torch", "x = torch.zeros(3).cuda()\nopt = torch")


def _actions(client: Client, uri: str, diagnostics: list[dict[str, Any]], only: list[str] | None) -> list[dict[str, Any]]:
    context: dict[str, Any] = {"diagnostics": diagnostics}
    if only is not None:
        context["only"] = only
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
    return client.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": whole, "context": context})


def test_fix_all_applies_every_safe_fix_and_honours_only(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(TWO_FIXES)
    with editor(tmp_path) as (client, init):
        assert "source.fixAll.torchlint" in init["capabilities"]["codeActionProvider"]["codeActionKinds"]
        _open(client, path)
        diagnostics = client.diagnostics(path.as_uri())
        assert sorted(d["code"] for d in diagnostics) == ["TL101", "TL110", "TL303"]
        (fix_all,) = _actions(client, path.as_uri(), diagnostics, ["source.fixAll.torchlint"])
        assert fix_all["kind"] == "source.fixAll.torchlint"
        (edit,) = fix_all["edit"]["changes"][path.as_uri()]
        assert apply(TWO_FIXES, edit) == TWO_FIXES.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")').replace("set_to_none=False", "set_to_none=True")
        assert [a["kind"] for a in _actions(client, path.as_uri(), diagnostics, ["source"])] == ["source.fixAll.torchlint"]
        assert _actions(client, path.as_uri(), diagnostics, ["quickfix"]) == []  # none at the start of line 1
        assert all(a["kind"] == "quickfix" for a in _actions(client, path.as_uri(), diagnostics, ["quickfix", "source.organizeImports"]))


CODE_CELL = "for x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    print(loss.item())\n"


def test_a_notebook_gets_diagnostics_on_its_cells(tmp_path: Path) -> None:
    notebook = tmp_path / "explore.ipynb"
    cells = [f"vscode-notebook-cell:{notebook.as_posix()}#cell{i}" for i in range(3)]
    texts = ["# Training\n", "import torch\nmodel = torch.nn.Linear(4, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n", CODE_CELL]
    with editor(tmp_path, {"notebookDocument": {"synchronization": {}}}) as (client, init):
        assert init["capabilities"]["notebookDocumentSync"]["notebookSelector"]
        client.notify("notebookDocument/didOpen", {
            "notebookDocument": {"uri": notebook.as_uri(), "notebookType": "jupyter-notebook", "version": 1,
                                 "cells": [{"kind": 1 if i == 0 else 2, "document": uri} for i, uri in enumerate(cells)]},
            "cellTextDocuments": [{"uri": uri, "languageId": "markdown" if i == 0 else "python", "version": 1, "text": texts[i]}
                                  for i, uri in enumerate(cells)],
        })
        published = {}
        while len(published) < 3:
            message = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
            published[message["params"]["uri"]] = message["params"]["diagnostics"]
        assert published[cells[0]] == [] and published[cells[1]] == []
        (tl101,) = published[cells[2]]
        # Lines and columns count within the cell, as the editor shows it.
        assert tl101["code"] == "TL101" and tl101["range"]["start"] == {"line": 4, "character": 10}
        hover = client.request("textDocument/hover", {"textDocument": {"uri": cells[2]}, "position": {"line": 4, "character": 12}})
        assert "TL101" in hover["contents"]["value"]
        actions = client.request("textDocument/codeAction", {"textDocument": {"uri": cells[2]}, "range": tl101["range"], "context": {"diagnostics": [tl101]}})
        noqa = next(a for a in actions if "noqa" in a["title"])
        assert apply(texts[2], noqa["edit"]["changes"][cells[2]][0]).endswith("print(loss.item())  # noqa: TL101\n")

        fixed = texts[2].replace("    print(loss.item())\n", "")
        client.notify("notebookDocument/didChange", {
            "notebookDocument": {"uri": notebook.as_uri(), "version": 2},
            "change": {"cells": {"textContent": [{"document": {"uri": cells[2], "version": 2}, "changes": [{"text": fixed}]}]}},
        })
        assert client.diagnostics(cells[2]) == []


def test_a_changed_config_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    capabilities = {"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}}
    with editor(tmp_path, capabilities) as (client, _):
        registration = client.wait(lambda m: m.get("method") == "client/registerCapability")
        client.send({"id": registration["id"], "result": None})
        (watch,) = registration["params"]["registrations"]
        assert watch["method"] == "workspace/didChangeWatchedFiles"
        assert {"globPattern": "**/torchlint.toml"} in watch["registerOptions"]["watchers"]
        _open(client, path)
        assert sorted(d["code"] for d in client.diagnostics(path.as_uri())) == ["TL101", "TL303"]
        config = tmp_path / "torchlint.toml"
        config.write_text('ignore = ["TL303"]\n')
        client.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": config.as_uri(), "type": 1}]})
        assert [d["code"] for d in client.diagnostics(path.as_uri())] == ["TL101"]
