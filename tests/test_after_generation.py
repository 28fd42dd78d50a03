"""A read in a function a loop calls after a call, earlier in the same iteration, of a project
function that runs a whole generation (a decode loop, its own or through the functions it
calls) runs once per generated sequence: low, with those words (whisper's word timings after
its window's decode, issue 32). Before the decode, or after a call that decodes nothing, it is
an ordinary wait per step: medium (fixtures/projects/aftergeneration)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("aftergeneration", tmp_path, monkeypatch)


def _tl101(root: Path) -> dict[int, object]:
    return {f.line: f for f in project_findings(root, "TL101")}


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_message_says_once_per_generated_sequence(project: Path) -> None:
    after = _tl101(project)[7]
    assert "once per generated sequence" in after.message and "every step" not in after.message  # type: ignore[attr-defined]
    assert "every step of" not in after.impact_reason  # type: ignore[attr-defined]
    assert "every step" in _tl101(project)[13].message  # type: ignore[attr-defined]


def test_the_read_moved_before_the_decode_waits_per_step(project: Path) -> None:
    transcribe = project / "transcribe.py"
    transcribe.write_text(transcribe.read_text().replace(
        "        tokens = decode_with_fallback(decoder, audio)\n        words.append(word_probabilities(decoder, tokens, audio))\n",
        "        words.append(word_probabilities(decoder, window, audio))\n        tokens = decode_with_fallback(decoder, audio)\n"))
    assert _tl101(project)[7].impact == "medium"  # type: ignore[attr-defined]


def test_a_training_loop_after_a_generation_is_no_generation_read(project: Path) -> None:
    transcribe = project / "transcribe.py"
    transcribe.write_text(transcribe.read_text().replace(
        "        words.append(word_probabilities(decoder, tokens, audio))\n",
        "        words.append(word_probabilities(decoder, tokens, audio))\n"
        "        loss = decoder(tokens, audio).logsumexp(-1).mean()\n        loss.backward()\n        optimizer.step()\n").replace(
        "def transcribe(decoder, windows):", "def transcribe(decoder, windows, optimizer):"))
    assert _tl101(project)[7].impact != "low"  # type: ignore[attr-defined]


def test_reads_per_candidate_after_a_sync_there_run_once_per_generated_sequence(project: Path) -> None:
    """whisper's ``BeamSearchDecoder.finalize``: ``sum_logprobs.cpu()``, then a read per row per
    candidate; called after the decode, each repetition waits once per sequence, not per token (was:
    high, the repetitions after a sync each "waiting again" every step)."""
    read = _tl101(project)[28]
    assert read.impact == "low" and "once per generated sequence" in read.message  # type: ignore[attr-defined]
    transcribe = project / "transcribe.py"
    transcribe.write_text(transcribe.read_text().replace(
        "        words.append(best_candidates(tokens, decoder(tokens, audio).amax(-1)))\n", "").replace(
        "        tokens = decode_with_fallback(decoder, audio)\n",
        "        words.append(best_candidates(audio, decoder(window, audio).amax(-1)))\n"
        "        tokens = decode_with_fallback(decoder, audio)\n", 1))
    # (`audio`, the window's device copy: `window` itself, a row of `main`'s host list, reads nothing from the device)
    assert _tl101(project)[28].impact == "high"  # type: ignore[attr-defined]  # before the decode: per step, each waits again
