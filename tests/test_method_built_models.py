"""A model a method of a project object returns (encodec's ``lm = model.get_lm_model()``, review 16):
called once per frame in a loop, it makes that loop a step loop, so the coder's reads of the
model's CDF in another file run per frame. A method returning a host object that runs no model
(``table = codec.get_table()``) makes no step (fixtures/projects/methodbuilt)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("methodbuilt", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_coder_reads_name_the_frame_loop(project: Path) -> None:
    reads = [f for f in project_findings(project) if f.code == "TL101" and f.path.endswith("coder.py")]
    assert len(reads) == 2 and all("`RangeCoder.push()`" in f.message and "compress.py:21" in f.message for f in reads)


def _target(source: str, called: str):  # type: ignore[no-untyped-def]
    ctx = FileContext(cst.parse_module(source), "m.py")
    summarizer = StepSummarizer(ctx)
    call = next(c for c in ctx.tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == called)
    return summarizer.target(call.func, call)


def test_what_a_project_objects_method_returns_is_followed() -> None:
    source = "from model import Codec\n\ndef f(codec: Codec, x):\n    lm = codec.get_lm()\n    return lm(x)\n"
    # `codec: Codec` holds what the callers pass, else a `Codec` (fp29a's chosen class): its `get_lm()` result is called
    codec = ("or", ("passed", "f", "codec"), ("import", 0, "model.Codec"))
    assert _target(source, "lm") == ("object", ("returned", ("object", codec, "get_lm"), None), "__call__")


def test_a_method_of_a_plain_value_is_no_object() -> None:
    # `x` is no object of the project's: what its method returns is not looked up
    assert _target("def f(x):\n    y = x.half()\n    return y(x)\n", "y") is None
