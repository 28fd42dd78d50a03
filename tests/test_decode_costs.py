"""Issue 32, per-token and per-denoising-step costs an independent review found missed or
mis-described: the tokens a greedy decoder uploads back (TL113), a device argument read in
the callee's forward (TL112), a schedule's 0-d device tensor as a fill value (TL101), and the
loop a message names."""

from __future__ import annotations

from conftest import FIXTURES
from torchlint.config import from_table
from torchlint.engine import lint_source


def _findings(path, code):
    text = path.read_text(encoding="utf-8")
    return lint_source(text, str(path), from_table({"select": [code]}, FIXTURES))


def test_decoded_tokens_uploaded_back_say_what_changes_and_how_to_keep_them() -> None:
    found = {f.line: f for f in _findings(FIXTURES / "rules" / "TL113" / "flagged_decode.py", "TL113")}
    last, prefix = found[27], found[40]
    for finding in (last, prefix):
        assert "same host data" not in finding.message  # the list grows by one token each time
        assert "for every decoded token" in finding.message
        assert "before the loop" not in finding.fix_hint and "Upload it once" not in finding.fix_hint
    assert "token it just decoded" in last.message and "`argmax`" in last.fix_hint
    assert "one token longer each time" in prefix.message and "`torch.cat`" in prefix.fix_hint


def test_a_device_fill_value_says_torch_full_reads_it_and_how_to_broadcast() -> None:
    found = {f.line: f for f in _findings(FIXTURES / "rules" / "TL105" / "flagged_fill.py", "TL105")}
    assert sorted(found) == [29, 30, 31]
    for finding in found.values():
        assert "sampling loop at line 39" in finding.message  # the denoising loop that calls it
        assert "fill value is a Python number" in finding.fix_hint and "`.tolist()`" in finding.fix_hint
