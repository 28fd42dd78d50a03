"""A decode loop's sampled token, read for the host (returned by its sampler, ChatRWKV's
``return int(out)``), is the floor: low; the reads before it on its path are extra waits per
token: medium (fixtures/projects/tokenreads). A step loop whose call runs a whole generation is
the step, a generated sequence: its waits are low (fixtures/projects/generationstep). Issue 32."""

from __future__ import annotations

from pathlib import Path

from conftest import assert_markers_hold, checked_here, project_findings
from torchlint.analysis.impact import Cost, assess
from torchlint.analysis.multiplicity import GENERATION, Multiplicity, Place, Position, Repeat, Where


def test_token_reads_match_the_markers(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = checked_here("tokenreads", tmp_path, monkeypatch)
    findings = project_findings(root)
    assert_markers_hold(root, findings)
    token = next(f for f in findings if f.path.endswith("sampling.py") and f.line == 19)
    assert "the token the loop needs on the host: one read per token is the floor" in token.impact_reason
    extra = next(f for f in findings if f.path.endswith("sampling.py") and f.line == 15)
    assert "an extra read per decoded token" in extra.impact_reason


def test_a_token_returned_to_no_decode_loop_is_a_read_at_its_calls_end(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = checked_here("tokenreads", tmp_path, monkeypatch)
    chat = root / "chat.py"
    # the model no longer takes the sampled token: the loop decodes nothing, its token is a plain read
    chat.write_text(chat.read_text().replace("out, state = model.forward(token, state)", "out, state = model.forward(0, state)"))
    found = {(Path(f.path).name, f.line): f for f in project_findings(root)}
    returned = found[("sampling.py", 19)]
    assert returned.impact == "medium" and "at its end" in returned.impact_reason and "floor" not in returned.impact_reason
    assert "extra read" not in found[("sampling.py", 16)].impact_reason


def test_the_tiers_follow_the_data() -> None:
    token = Multiplicity(unit="decoded token")
    assert assess(Cost.SYNC, Place(Where.INFER, token, Position.TOKEN_READ))[0] == "low"
    assert assess(Cost.HOST_COPY, Place(Where.INFER, token, Position.EXTRA_READ))[0] == "medium"
    # per row within the token, each row waits again: high, as any repeated wait
    assert assess(Cost.SYNC, Place(Where.INFER, token.then(Repeat("batch row")), Position.TOKEN_READ))[0] == "high"
    # outside a decode loop: a read at its call's end, one before more work mid-step
    assert assess(Cost.SYNC, Place(Where.TRAIN, Multiplicity(), Position.TOKEN_READ))[0] == "medium"
    generation = Multiplicity((Repeat("iteration"),), GENERATION)
    assert assess(Cost.SYNC, Place(Where.INFER, generation))[0] == "low"
    assert assess(Cost.SYNC, Place(Where.INFER, Multiplicity((Repeat("decoded token"),), GENERATION)))[0] == "high"


def test_a_generation_per_iteration_is_the_step(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = checked_here("generationstep", tmp_path, monkeypatch)
    findings = project_findings(root)
    assert_markers_hold(root, findings)
    pad = next(f for f in findings if f.line == 16)
    assert "once per generated sequence" in pad.message and "every step" not in pad.message


def test_a_loop_whose_call_generates_nothing_waits_per_row(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = checked_here("generationstep", tmp_path, monkeypatch)
    speech = root / "speech.py"
    speech.write_text(speech.read_text().replace("codes = self.generator.generate(text, max_new_tokens=200)", "codes = self.generator(text)"))
    pad = next(f for f in project_findings(root, "TL101") if f.line == 16)
    # an ordinary step: the rows' reads wait once, then for their copies (not the generation's low)
    assert pad.impact == "medium" and "generated sequence" not in pad.message
