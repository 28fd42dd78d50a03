"""A decode loop whose tokens a strategy object picks and keeps (OpenNMT's translator: the model's
log-probabilities handed to ``strategy.advance(...)``, the next input read back from
``strategy.current``), its model loaded from a checkpoint, no class of the project: the loop
decodes by that shape, and the strategy's per-token reads are reported in whatever class the
callers build (fixtures/projects/strategies)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("strategies", tmp_path, monkeypatch)


def _tl101(root: Path) -> dict[tuple[str, int], str]:
    return {(Path(f.path).as_posix(), f.line): f.impact for f in project_findings(root, "TL101")}


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL101"))


def test_an_input_not_read_back_from_the_strategy_decodes_nothing(project: Path) -> None:
    # the model given the same start on every pass: the strategy only records what it returns
    translate = project / "translate.py"
    translate.write_text(translate.read_text().replace("self._decode_and_generate(strategy.current.view(-1, 1, 1))",
                                                       "self._decode_and_generate(start.view(-1, 1, 1))"))
    assert ("search.py", 24) not in _tl101(project) and ("search.py", 38) not in _tl101(project)



def test_a_strategy_held_on_self_decodes(project: Path) -> None:
    translate = project / "translate.py"
    text = translate.read_text().replace("return self._decode(start, strategy)", "self.strategy = strategy\n        return self._decode(start)")
    text = text.replace("def _decode(self, start, strategy):", "def _decode(self, start):").replace("strategy.", "self.strategy.")
    translate.write_text(text.replace("self.self.strategy.", "self.strategy."))
    assert _tl101(project).get(("search.py", 24)) == "medium"


def test_a_method_the_model_is_given_the_result_of_is_no_kept_token(project: Path) -> None:
    # `hyp.update(best)` then `train(hyp.copy())`: a settings object filled and copied, no token read back
    translate = project / "translate.py"
    translate.write_text(translate.read_text().replace("strategy.current.view(-1, 1, 1)", "strategy.snapshot()"))
    assert ("search.py", 24) not in _tl101(project)
