"""Switches a class keeps on `self` from its constructor and hands to the objects it builds (fixtures/projects/
kept_switches, OpenNMT-py's shape): `WordsLogger(self.vocab, 1, self.log_words)` in a trainer built only through
`cls(..., log_words=opt.log_words)` at the option's default (off), and a base strategy's early return under `if
self.block_ngram_repeat <= 0:` whose subclass hands the block size up through `super().__init__`. Low, saying why;
a value that may turn either on keeps the tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project, findings_by_line, project_findings


def _found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, tuple[str, str]] | None = None) -> dict[tuple[str, int], tuple[str, str]]:
    found = findings_by_line(copied_project("kept_switches", tmp_path, edits), monkeypatch, "TL101")
    return {key: (str(getattr(f.impact, "value", f.impact)), f.impact_reason) for key, f in found.items()}


def test_the_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copied_project("kept_switches", tmp_path)
    monkeypatch.chdir(root)
    assert_markers_hold(root, project_findings(root, "TL101"))


def test_the_words_name_the_switch_and_who_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _found(tmp_path, monkeypatch)
    _, words = reads[("mt/words.py", 13)]
    assert "`WordsLogger()` runs it only with `show=True`" in words and "`Trainer()`'s `log_words`" in words
    _, blocked = reads[("mt/search.py", 16)]
    assert "only when `block_ngram_repeat > 0`" in blocked and "`DecodeStrategy()`" in blocked


@pytest.mark.parametrize("edits", [
    # options on by default
    {"opts.py": ('type=int, default=0, help="block', 'type=int, default=3, help="block')},
    # a construction passing values that turn both on
    {"mt/trainer.py": ("log_words=opt.log_words, block_ngram_repeat=opt.block_ngram_repeat", "log_words=True, block_ngram_repeat=4")},
])
def test_a_value_that_turns_it_on_keeps_the_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, tuple[str, str]]) -> None:
    reads = _found(tmp_path, monkeypatch, edits)
    assert reads[("mt/search.py", 16)][0] != "low"
    if "mt/trainer.py" in edits:
        assert reads[("mt/words.py", 13)][0] != "low"


def test_an_option_whose_default_is_on_keeps_the_logger_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _found(tmp_path, monkeypatch, {"opts.py": ('action="store_true", help="print', 'type=bool, default=True, help="print')})
    assert reads[("mt/words.py", 13)][0] != "low"


def test_an_attribute_set_on_the_object_in_another_file_keeps_the_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (`trainer.log_words = True` after the construction: the trainer's value is no longer its constructor's)
    reads = _found(tmp_path, monkeypatch, {"train.py": ("trainer.train(", "trainer.log_words = True\ntrainer.train(")})
    assert reads[("mt/words.py", 13)][0] != "low"


def test_a_subclass_that_sets_the_attribute_itself_keeps_the_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (`super().__init__(eos, 0)` then its own block size: what the base's constructions pass is not what it holds)
    reads = _found(tmp_path, monkeypatch, {"mt/search.py": ("        super().__init__(eos, block_ngram_repeat)\n",
                                                             "        super().__init__(eos, block_ngram_repeat)\n        self.block_ngram_repeat = 3\n")})
    assert reads[("mt/search.py", 16)][0] != "low"


def test_an_exit_on_another_test_leaves_the_read_where_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (`if self.eos < 0: return`: not the block size's test, and every construction passes eos=2; the read stays every step's)
    reads = _found(tmp_path, monkeypatch, {"mt/search.py": ("        if self.block_ngram_repeat <= 0:\n            return\n",
                                                             "        if self.eos < 0:\n            return\n")})
    assert reads[("mt/search.py", 16)][0] != "low"
