"""TL407 where a parameter of the decoder's function turns its cache on and defaults to off
(bark's ``use_kv_caching=False``): high while some call of the function in the project leaves
it off; medium where every call turns it on (callers outside the project get the default); none
for a private function every call turns it on (fixtures/projects/cache_flags)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("cache_flags", tmp_path, monkeypatch)


def _impacts(root: Path) -> dict[int, str]:
    return {f.line: f.impact for f in project_findings(root, "TL407")}


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL407"))


def test_the_message_names_the_parameter_and_the_fix(project: Path) -> None:
    found = {f.line: f for f in project_findings(project, "TL407")}[13]
    assert "with its cache off (`use_kv_caching`, which turns it on, defaults to `False` in `generate_semantic()`)" in found.message
    assert "Default `use_kv_caching` to True in `generate_semantic()`" in found.fix_hint


def test_a_caller_that_turns_it_on_too_makes_it_medium(project: Path) -> None:
    speak = project / "speak.py"
    speak.write_text(speak.read_text().replace("generate_semantic(model, sentence)", "generate_semantic(model, sentence, use_kv_caching=True)"))
    assert _impacts(project)[13] == "medium"


def test_a_caller_passing_it_off_or_through_kwargs_keeps_it_high(project: Path) -> None:
    api = project / "api.py"
    text = api.read_text()
    api.write_text(text.replace("generate_coarse(model, semantic, use_kv_caching=True)", "generate_coarse(model, semantic, use_kv_caching=False)"))
    assert _impacts(project)[23] == "high"
    api.write_text(text.replace("def text_to_codes(model, x):", "def text_to_codes(model, x, **options):")
                   .replace("generate_coarse(model, semantic, use_kv_caching=True)", "generate_coarse(model, semantic, **options)"))
    assert _impacts(project)[23] == "high"


def test_a_private_decoder_some_call_leaves_off_is_reported(project: Path) -> None:
    api = project / "api.py"
    api.write_text(api.read_text().replace("_generate_fine(model, coarse, 100, True)", "_generate_fine(model, coarse)"))
    assert _impacts(project).get(33) == "high"


def test_one_file_alone_reports_every_one_high(project: Path) -> None:
    for other in ("api.py", "speak.py"):
        (project / other).unlink()
    assert _impacts(project) == {13: "high", 23: "high", 33: "high"}


def test_a_cache_unset_unless_the_flag_is_passed_and_a_helper_that_drops_it() -> None:
    """``cache = {} if use_cache else None`` then ``cache=cache`` (DALLE-pytorch's ``generate_images``): the
    message names the flag; where the method the call runs returns a model call without the cache, the hint
    says so (turning the flag on is not enough there), and only there."""
    from conftest import FIXTURES
    from torchlint.config import from_table
    from torchlint.engine import lint_source

    path = FIXTURES / "rules" / "TL407" / "flagged_cache_off_by_default.py"
    text = path.read_text()
    found = {f.line: f for f in lint_source(text, str(path), from_table({"select": ["TL407"]}, FIXTURES))}
    lines = text.splitlines()
    plain = found[next(i for i, line in enumerate(lines, 1) if "self.model(text, image, cache=cache)" in line)]
    guided = found[next(i for i, line in enumerate(lines, 1) if "self.guided(out" in line)]
    assert "with its cache off (`use_cache`, which turns it on, defaults to `False` in `generate_images()`)" in plain.message
    assert "also returns" not in plain.fix_hint
    assert "`guided()` also returns `self.model(*args, **kwargs)` without `cache`" in guided.fix_hint
