"""A padding mask sliced row by row with a lengths tensor the step copied to the device, in a
model the trainer is handed through several methods (kospeech's `SupervisedTrainer` and
`get_attn_pad_mask`, issue 32): each row's slice bound reads the device."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("queuemasks", tmp_path, monkeypatch)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _mask_reads(root: Path) -> list:
    return [f for f in project_findings(root, "TL105") if f.path.endswith("mask.py")]


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_slice_read_repeats_per_batch_row_of_the_training_step(project: Path) -> None:
    (read,) = _mask_reads(project)
    assert "per batch row per step" in read.message and "training loop at asr/trainer.py" in read.message


def test_lengths_left_on_the_host_read_nothing(project: Path) -> None:
    _edit(project / "asr" / "trainer.py", "target_lengths = torch.as_tensor(target_lengths).to(self.device)",
          "target_lengths = torch.as_tensor(target_lengths)")
    assert _mask_reads(project) == []


def test_a_model_moved_again_in_the_step_is_still_the_one_passed(project: Path) -> None:
    """`model = model.to(self.device)` rebinds the parameter to itself moved: the model the caller passed
    goes on to `_model_forward`, as it would without the move."""
    args = _arguments(project / "asr" / "trainer.py", "_model_forward")
    assert args[0] == ("passed", "Trainer._train_epoches", "model")


def test_a_model_rebound_from_a_checkpoint_under_a_branch_is_still_followed(project: Path) -> None:
    """`if resume is not None: model = resume.model`: the parameter still reaches the call, the checkpoint's
    model names no class, so what the callers pass goes on."""
    args = _arguments(project / "asr" / "trainer.py", "_train_epoches")
    assert args["model"] == ("passed", "Trainer.train", "model")


def test_a_name_that_holds_a_built_object_too_is_not_only_the_parameter(project: Path) -> None:
    """`model = Wrapper(model)` under the branch instead: a class of the project, not the parameter alone."""
    trainer = project / "asr" / "trainer.py"
    _edit(trainer, "            model = resume.model\n", "            model = Trainer(model, None)\n")
    args = _arguments(trainer, "_train_epoches")
    assert args["model"] != ("passed", "Trainer.train", "model")


def _arguments(path: Path, method: str) -> dict:
    """The object arguments (position or keyword -> reference) of the call of ``method`` in ``path``'s summary."""
    import libcst as cst

    from torchlint.analysis.context import FileContext, Options
    from torchlint.analysis.steps import StepSummarizer
    from torchlint.findings import Location

    ctx = FileContext(cst.parse_module(path.read_text()), str(path), Options())
    summarizer = StepSummarizer(ctx, None)
    summarizer.hot_call_nodes(located=False)
    summary = summarizer.summary(str(path), lambda node: Location(str(path), 1, 1))
    (call,) = [c for c in summary.calls if c.target == ("method", "Trainer", method)]
    return dict(call.args)


def test_a_module_only_subclasses_keep_runs_from_the_base_class_forward(project: Path) -> None:
    """`Extractor.forward` calls `self.conv`, which the base leaves None and `ConvExtractor` sets to a
    `MaskCNN`: the mask's per-row read runs in the training step, from there (kospeech's `Conv2dExtractor`)."""
    (read,) = [f for f in project_findings(project, "TL101") if f.path.endswith("conv.py")]
    assert "called from `Extractor.forward()`, run every step from a training loop" in read.message and read.impact == "high"
