"""Calls the join follows through a class attribute bound to a function (whisper's ``decode =
decode_function``: ``model.decode(mel, options)`` runs ``decoding.decode(model, mel, options)``), a
module-level alias (``decode_fast = decode``, imported by another file), and a method of an object
built where it is called (``DecodingTask(model, options).run(mel)``): a read after such a call in a
window loop runs once per generated sequence (low). A library's function bound on a class, and a
method the built class lacks, run nothing of the project: the read after them stays an ordinary wait
per step (fixtures/projects/boundcalls, issue 32)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.project import Project
from torchlint.analysis.steps import StepSummarizer


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("boundcalls", tmp_path, monkeypatch)


def _tl101(root: Path) -> dict[tuple[str, int], str]:
    return {(Path(f.path).name, f.line): f.impact for f in project_findings(root, "TL101")}


def _summaries(root: Path) -> Project:
    summaries = []
    for path in sorted(root.glob("*.py")):
        ctx = FileContext(cst.parse_module(path.read_text()), str(path))
        summaries.append(StepSummarizer(ctx).summary(str(path), lambda node: None))  # type: ignore[arg-type,return-value]
    joined = Project(summaries)
    joined.index_arguments()  # (what `main` passes `transcribe`: the model)
    return joined


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_class_attribute_runs_the_imported_function_with_the_object_first(project: Path) -> None:
    joined = _summaries(project)
    transcribe = str(project / "transcribe.py")
    call = next(c for c in joined.files[transcribe].calls if c.caller == "transcribe" and c.target[-1] == "decode")
    callees = joined.callees(call.target, transcribe)
    assert callees == [(str(project / "decoding.py"), "decode")]
    assert joined.parameters(call, callees[0]) == ("audio", "steps")  # the model itself fills `model`
    picked = next(c for c in joined.files[transcribe].calls if c.caller == "transcribe_picked" and c.target[-1] == "pick")
    assert joined.callees(picked.target, transcribe) == []


def test_a_method_of_an_object_built_where_it_is_called_is_followed(project: Path) -> None:
    joined = _summaries(project)
    decoding = str(project / "decoding.py")
    ran = {key for c in joined.files[decoding].calls if c.caller == "decode" for _, key in joined.callees(c.target, decoding)}
    assert "DecodingTask.run" in ran
    rescored = str(project / "transcribe.py")
    lacking = next(c for c in joined.files[rescored].calls if c.caller == "transcribe_rescored" and c.target[-1] == "rescore")
    assert joined.callees(lacking.target, rescored) == []


def test_the_object_bound_to_a_name_first_is_followed_too(project: Path) -> None:
    decoding = project / "decoding.py"
    decoding.write_text(decoding.read_text().replace(
        "    return DecodingTask(model, steps).run(audio)\n", "    task = DecodingTask(model, steps)\n    return task.run(audio)\n"))
    assert _tl101(project)[("timing.py", 7)] == "low"


def test_without_the_generation_the_reads_wait_per_step(project: Path) -> None:
    decoding = project / "decoding.py"
    decoding.write_text(decoding.read_text().replace(
        "    return DecodingTask(model, steps).run(audio)\n", "    return Scorer(model).score(audio, audio)\n"))
    found = _tl101(project)
    assert found[("timing.py", 7)] == "medium" and found[("timing.py", 13)] == "medium"


def test_a_module_alias_bound_twice_names_no_function(project: Path) -> None:
    decoding = project / "decoding.py"
    decoding.write_text(decoding.read_text() + "decode_fast = rescore\n")
    assert _tl101(project)[("timing.py", 13)] == "medium"


def test_a_loop_around_a_function_with_its_own_window_loop_goes_over_runs(project: Path) -> None:
    assert ("transcribe.py", 54) not in _tl101(project)  # `language_of`, once per file before its windows
    transcribe = project / "transcribe.py"
    transcribe.write_text(transcribe.read_text().replace(
        "    for window in audio.split(1):\n        tokens = model.decode(window)\n        words.append(word_probabilities(model, tokens, window))\n",
        ""))
    assert _tl101(project)[("transcribe.py", 54)] == "medium"  # no loop of its own: each file is one step


def test_an_alias_of_an_autograd_function_imported_elsewhere_names_no_class(tmp_path: Path) -> None:
    (tmp_path / "ops.py").write_text("import torch\n\n\nclass Grouping(torch.autograd.Function):\n"
                                     "    @staticmethod\n    def forward(ctx, x):\n        return x\n\n\ngrouping = Grouping.apply\n")
    (tmp_path / "user.py").write_text("from ops import grouping\n\n\ndef run(x):\n    return grouping(x)\n")
    joined = _summaries(tmp_path)
    assert joined.class_of(("import", 0, "ops.grouping"), str(tmp_path / "user.py"), 0) is None  # (it raised: a method taken for an import)
