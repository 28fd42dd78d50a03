"""`torchlint server` driven over stdio as an editor drives it: initialize, didOpen,
diagnostics, code actions (a fix and "add # noqa") applied to the text, a debounced
didChange, hover, shutdown and exit."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("pygls")

SOURCE = """import torch
opt = torch.optim.SGD(params, lr=0.1)
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    opt.zero_grad(set_to_none=False)  # reset
    print(loss.item())
"""


class Client:
    """The JSON-RPC side of an editor, over the server's stdin and stdout."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "torchlint", "server"], cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    return
                if header in (b"\r\n", b"\n"):
                    break
                name, _, value = header.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"method": method, "params": params or {}})

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params or {}})
        reply = self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)
        assert "error" not in reply, reply
        return reply["result"]

    def wait(self, wanted, timeout: float = 60.0) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("the server did not send the expected message")
            message = self.messages.get(timeout=remaining)
            if wanted(message):
                return message

    def diagnostics(self, uri: str) -> list[dict[str, Any]]:
        message = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]


def apply(text: str, edit: dict[str, Any]) -> str:
    """``edit`` applied as an LSP client applies it: lines end at \\n, \\r\\n or \\r only."""
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)
    def offset(position: dict[str, int]) -> int:
        return sum(len(line) for line in lines[: position["line"]]) + position["character"]
    start, end = offset(edit["range"]["start"]), offset(edit["range"]["end"])
    return text[:start] + edit["newText"] + text[end:]


@pytest.mark.slow
@contextmanager
def editor(root: Path, capabilities: dict[str, Any] | None = None) -> Iterator[tuple[Client, dict[str, Any]]]:
    """A server initialized for ``root`` (the client's ``capabilities``: none by default),
    and its initialize result; shut down and exited as an editor does when the block ends
    (killed if it hangs)."""
    client = Client(root)
    try:
        init = client.request("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": capabilities or {}})
        client.notify("initialized")
        yield client, init
        assert client.request("shutdown") is None
        client.notify("exit")
        assert client.process.wait(timeout=30) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()
        client.process.wait()


def test_an_editor_session(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    uri = path.as_uri()
    with editor(tmp_path) as (client, init):
        capabilities = init["capabilities"]
        assert capabilities["codeActionProvider"] and capabilities["hoverProvider"]
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": SOURCE}})
        diagnostics = client.diagnostics(uri)
        assert sorted(d["code"] for d in diagnostics) == ["TL101", "TL303"]
        tl303 = next(d for d in diagnostics if d["code"] == "TL303")
        assert tl303["range"] == {"start": {"line": 5, "character": 4}, "end": {"line": 5, "character": 36}}
        assert tl303["source"] == "torchlint" and tl303["codeDescription"]["href"].endswith("TL303-zero-grad-memset.md")

        actions = client.request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": tl303["range"], "context": {"diagnostics": [tl303]},
        })
        titles = [a["title"] for a in actions]
        fix = next(a for a in actions if "noqa" not in a["title"])
        assert "TL303: add `# noqa: TL303`" in titles
        (edit,) = fix["edit"]["changes"][uri]
        fixed = apply(SOURCE, edit)
        assert fixed == SOURCE.replace("set_to_none=False", "set_to_none=True")
        noqa = next(a for a in actions if a["title"] == "TL303: add `# noqa: TL303`")
        assert "    opt.zero_grad(set_to_none=False)  # reset  # noqa: TL303\n" in apply(SOURCE, noqa["edit"]["changes"][uri][0])

        # The editor applies the fix; after the pause, only TL101 is left.
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"range": edit["range"], "text": edit["newText"]}],
        })
        assert [d["code"] for d in client.diagnostics(uri)] == ["TL101"]

        hover = client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 6, "character": 14}})
        assert hover["contents"]["kind"] == "markdown"
        assert "**TL101 scalar-sync-in-loop**" in hover["contents"]["value"] and "rules/TL101-scalar-sync-in-loop.md" in hover["contents"]["value"]
        assert client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}) is None

        # Keystrokes in quick succession are linted once, after the last one.
        for version, text in ((3, fixed + "#"), (4, fixed + "#x"), (5, fixed)):
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]})
        published = []
        while not published or published[-1]["version"] != 5:
            published.append(client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"])
        assert [p["version"] for p in published] == [5]

        client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        assert [d["code"] for d in client.diagnostics(uri)] == ["TL101"]


HELPER = "import torch\n\ndef accuracy(logits, y):\n    return (logits.argmax(1) == y).float().mean().item()\n"
TRAIN = "import torch\nfrom helper import accuracy\n\nfor x, y in loader:\n    out = model(x)\n    out.sum().backward()\n    acc = accuracy(out, y)\n"


@pytest.mark.slow
def test_a_helper_is_per_step_once_the_loop_calling_it_is_open(tmp_path: Path) -> None:
    helper, train = tmp_path / "helper.py", tmp_path / "train.py"
    helper.write_text(HELPER)
    train.write_text(TRAIN)
    with editor(tmp_path) as (client, _):
        client.notify("textDocument/didOpen", {"textDocument": {"uri": helper.as_uri(), "languageId": "python", "version": 1, "text": HELPER}})
        assert client.diagnostics(helper.as_uri()) == []  # on its own, nothing says it runs every step
        client.notify("textDocument/didOpen", {"textDocument": {"uri": train.as_uri(), "languageId": "python", "version": 1, "text": TRAIN}})
        assert client.diagnostics(train.as_uri()) == []
        (finding,) = client.diagnostics(helper.as_uri())
        assert finding["code"] == "TL101" and "train.py:7" in finding["message"]


@pytest.mark.slow
def test_positions_are_utf16_units_as_lsp_counts_them(tmp_path: Path) -> None:
    text = SOURCE.replace("    print(loss.item())", "    print('\U0001f525', loss.item())")  # an emoji: 2 UTF-16 units
    path = tmp_path / "train.py"
    path.write_text(text, encoding="utf-8")
    with editor(tmp_path) as (client, _):
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": text}})
        tl101 = next(d for d in client.diagnostics(path.as_uri()) if d["code"] == "TL101")
        line = text.splitlines()[6]
        start = len(line[: line.index("loss.item()")].encode("utf-16-le")) // 2
        assert tl101["range"]["start"] == {"line": 6, "character": start}
        assert tl101["range"]["end"] == {"line": 6, "character": start + len("loss.item()")}
        hover = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": {"line": 6, "character": start + 1}})
        assert "TL101" in hover["contents"]["value"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    ["import torch\n\x0cy = 1\n\x0cx = torch.zeros(3).cuda()\n", "import torch\ry = 1\rx = torch.zeros(3).cuda()\r"],
    ids=["form-feeds", "cr-only"],
)
def test_quick_fixes_apply_where_lsp_counts_lines(tmp_path: Path, text: str) -> None:
    """A form feed is inside a line for LSP (str.splitlines breaks there), a lone CR ends one:
    the quick fix, applied as sent, gave `x = to, device="cuda"rch.zeros(3).cuda()`."""
    path = tmp_path / "train.py"
    path.write_bytes(text.encode())
    with editor(tmp_path) as (client, _):
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": text}})
        (tl110,) = client.diagnostics(path.as_uri())
        assert tl110["range"]["start"] == {"line": 2, "character": 5 if "\x0c" in text else 4}
        actions = client.request("textDocument/codeAction", {
            "textDocument": {"uri": path.as_uri()}, "range": tl110["range"], "context": {"diagnostics": [tl110]},
        })
        fix = next(a for a in actions if "noqa" not in a["title"])
        (edit,) = fix["edit"]["changes"][path.as_uri()]
        assert apply(text, edit) == text.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')
        noqa = next(a for a in actions if "noqa" in a["title"])
        assert apply(text, noqa["edit"]["changes"][path.as_uri()][0]) == text.replace(".cuda()", ".cuda()  # noqa: TL110")


@pytest.mark.slow
def test_a_huge_document_is_one_tl000_and_the_server_stays_responsive(tmp_path: Path) -> None:
    """A 3 MB document was parsed whatever max-file-size said: no answer for 30 s and more."""
    text = SOURCE + "x = 1\n" * 500_000
    path = tmp_path / "train.py"
    with editor(tmp_path) as (client, _):
        started = time.monotonic()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": text}})
        (tl000,) = client.diagnostics(path.as_uri())
        assert tl000["code"] == "TL000" and "above the 1 MB limit" in tl000["message"]
        hover = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": {"line": 0, "character": 0}})
        assert "TL000" in hover["contents"]["value"]  # it still answers
        assert time.monotonic() - started < 20


@pytest.mark.slow
def test_a_failed_lint_clears_the_diagnostics_it_cannot_renew(tmp_path: Path) -> None:
    """When linting the new version fails, the old version's diagnostics must not stay."""
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    with editor(tmp_path) as (client, _):
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": SOURCE}})
        assert client.diagnostics(path.as_uri())
        (tmp_path / "torchlint.toml").write_text("select = [\n")  # broken mid-edit
        client.notify("textDocument/didSave", {"textDocument": {"uri": path.as_uri()}})
        shown = client.wait(lambda m: m.get("method") == "window/showMessage")  # said first, then cleared
        assert "torchlint: cannot read" in shown["params"]["message"]
        assert client.diagnostics(path.as_uri()) == []
