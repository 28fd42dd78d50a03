"""A parameter every call in the project passes a host value (`join_params.host_call_params`):
audiocraft's audio writers, reached only with `wav.cpu()`, a name bound to one or the rows of a
host batch, read nothing from the device; through a chain of helpers (`audio_write` -> `normalize`
-> `clip_wav`) and a method handed a loop's rows. One caller passing a device tensor, or a value
not known (another file's helper's result), keeps the finding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "host_calls"
SELECT = {"select": ["TL101", "TL102", "TL104", "TL105"]}


def _findings(root: Path) -> dict[tuple[str, int, str], str]:
    result = lint_paths([Path(".")], from_table(SELECT, root))
    assert not result.errors
    return {(Path(f.path).as_posix(), f.line, f.code): f.message for f in result.findings if Path(f.path).parts[0] == "audio"}


def test_host_callers_quiet_the_writer_and_its_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "host_calls"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    actual = _findings(root)
    files = sorted((root / "audio").rglob("*.py"))
    expected = {(p.relative_to(root).as_posix(), line, code) for p in files for line, code in expected_markers(p.read_text())}
    assert set(actual) == expected, "\n".join(f"{k}: {m}" for k, m in actual.items())


def test_one_device_caller_keeps_the_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the evaluation hands the store's batch method its device output: every read down the chain waits
    root = tmp_path / "host_calls"
    shutil.copytree(PROJECT, root)
    train = root / "train.py"
    train.write_text(train.read_text().replace("            store.add_live(out)", "            store.add_all(out)"))
    monkeypatch.chdir(root)
    actual = _findings(root)
    assert {("audio/store.py", 17, "TL101"), ("audio/writer.py", 10, "TL101"), ("audio/utils.py", 20, "TL101"),
            ("audio/utils.py", 12, "TL101")} <= set(actual), "\n".join(f"{k}: {m}" for k, m in actual.items())


def test_an_unknown_argument_keeps_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a name bound to another file's helper's result (not known to be on the host) passed to `audio_write`
    root = tmp_path / "host_calls"
    shutil.copytree(PROJECT, root)
    train = root / "train.py"
    text = train.read_text().replace("        first = out[0].detach().cpu()", "        first = scale(out[0].detach().cpu())")
    train.write_text(text.replace("from audio.writer import audio_write", "from audio.utils import scale\nfrom audio.writer import audio_write"))
    utils = root / "audio" / "utils.py"
    utils.write_text(utils.read_text() + "\n\ndef scale(wav):\n    return wav * 0.5\n")
    monkeypatch.chdir(root)
    actual = _findings(root)
    assert ("audio/writer.py", 10, "TL101") in actual, "\n".join(f"{k}: {m}" for k, m in actual.items())
    assert ("audio/store.py", 17, "TL101") not in actual  # the store's method is still reached only with host rows


def test_a_writer_used_as_a_value_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `WRITERS = {"wav": audio_write}`: called where no call site shows what it is given
    root = tmp_path / "host_calls"
    shutil.copytree(PROJECT, root)
    train = root / "train.py"
    train.write_text(train.read_text() + '\n\nWRITERS = {"wav": audio_write}\n')
    monkeypatch.chdir(root)
    actual = _findings(root)
    assert ("audio/writer.py", 10, "TL101") in actual, "\n".join(f"{k}: {m}" for k, m in actual.items())
    assert ("audio/utils.py", 20, "TL101") in actual  # `normalize` is handed what the writer was given
