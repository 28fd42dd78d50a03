"""A sampling loop whose pass runs a whole generation (audiocraft's chunked extension: ``while offset <
total_len: ...; tokens = self.lm.generate(...)``, ``self.lm`` bound by a base class of another file from
an annotated constructor parameter): its step is the generated sequence, so a read per pass is low; the
same loop feeding the model its own argmax back is a decode loop, each pass one token (high)
(fixtures/projects/chunkedgeneration)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.multiplicity import DECODED_TOKEN, GENERATION


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("chunkedgeneration", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_read_beside_a_generation_is_once_per_generated_sequence(project: Path) -> None:
    read = next(f for f in project_findings(project, "TL101") if f.line == 17)
    assert read.impact == "low" and "once per generated sequence" in read.message


def test_the_generating_loop_steps_per_sequence_and_the_decode_loop_per_token(project: Path) -> None:
    ctx = FileContext(cst.parse_module((project / "chunked.py").read_text()), "chunked.py")
    extend, rescore = (next(n for n in ctx.tree.nodes(cst.While) if ctx.tree.enclosing_function(n).name.value == name)  # type: ignore[union-attr]
                       for name in ("extend", "rescore"))
    assert ctx.places.step_unit(extend) == GENERATION
    assert ctx.places.step_unit(rescore) == DECODED_TOKEN


def test_a_generation_under_another_name_is_found_by_the_join(project: Path) -> None:
    """``self.lm.continue_from(...)``: no ``.generate`` for the file to see; the join follows ``self.lm`` (the base
    class's annotated parameter) to ``TokenLM.continue_from``, whose own loop decodes: one generated sequence per pass."""
    by_line = {f.line: f for f in project_findings(project, "TL101")}
    assert by_line[47].impact == "low" and "once per generated sequence" in by_line[47].message
    assert by_line[62].impact == "high" and "per decoded token" in by_line[62].message  # `self.lm.score`: one forward a pass


def test_the_light_summary_keeps_an_annotated_parameter(project: Path) -> None:
    """base.py never mentions torch (CPython's parse only): its class still says what ``self.lm`` holds."""
    import ast

    from torchlint.analysis.light import light_summary

    summary = light_summary(ast.parse((project / "base.py").read_text()), "base.py")
    (base,) = summary.classes
    assert dict(base.attributes)["lm"] == ("or", ("passed", "BaseGen.__init__", "lm"), ("import", 0, "lm.TokenLM"))
    assert dict(base.attributes)["name"] == ("passed", "BaseGen.__init__", "name")  # a `str`: what the callers pass, no class
