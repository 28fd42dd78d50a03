"""A call of an object a constructor keeps from its parameter runs what the project's constructions pass
there (by keyword or position), not every subclass of the parameter's annotation nor its default: the
default's or the annotation's class only where no construction passes a class of the project
(fixtures/projects/chosen: StyleTTS2's `DiffusionSampler(sampler=ADPM2Sampler())`, review 17). And
`math.sqrt` of a parameter annotated `float` reads the device where every call passes it a device tensor
(ADPM2's `get_sigmas(sigma, sigma_next)`, given `sigmas[i]`)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.findings import Location

RULES = ["TL101", "TL105"]


def _findings(root: Path):  # type: ignore[no-untyped-def]
    result = lint_paths([Path(".")], from_table({"select": RULES}, root))
    assert not result.errors
    return result.findings


def _lines(root: Path) -> set[tuple[str, str]]:
    """(file, the line's code) of each finding."""
    return {(Path(f.path).name, (root / f.path).read_text().splitlines()[f.line - 1].split("#")[0].strip()) for f in _findings(root)}


def _edit(root: Path, name: str, old: str, new: str) -> None:
    text = (root / name).read_text()
    assert old in text
    (root / name).write_text(text.replace(old, new))


def test_chosen_project_markers_and_impacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("chosen", tmp_path, monkeypatch)
    assert_markers_hold(root, _findings(root))


def test_with_no_class_passed_each_subclass_of_the_annotation_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("chosen", tmp_path, monkeypatch)
    _edit(root, "train.py", "sampler=ADPM2Sampler(), num_steps=5", "sampler=SAMPLERS[0], num_steps=5")
    _edit(root, "train.py", "sampler=EulerSampler(), num_steps=3", "sampler=SAMPLERS[1], num_steps=3")
    _edit(root, "train.py", "import torch\n", "import torch\n\nfrom registry import SAMPLERS\n")
    found = _lines(root)
    assert ("samplers.py", "alpha = sigmas[i + 1].item()") in found  # VSampler's: the annotation's subclasses, each
    assert ("samplers.py", "sigma_down = sqrt(sigma_next ** 2 - sigma_up ** 2)") in found


def test_a_class_passed_by_position_runs_instead_of_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("chosen", tmp_path, monkeypatch)
    _edit(root, "train.py", "denoiser = Denoiser()", "denoiser = Denoiser(ScaledNoise())")
    _edit(root, "train.py", "import ClampedNoise, Denoiser, Refiner", "import ClampedNoise, Denoiser, Refiner, ScaledNoise")
    found = {line for name, line in _lines(root) if name == "noise.py"}
    assert found == {"return x * x.abs().mean().item()", "return x.clamp(max=x.std().item())"}  # not ConstantNoise's


def test_with_the_parameter_left_out_the_default_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("chosen", tmp_path, monkeypatch)
    _edit(root, "train.py", "refiner = Refiner(ClampedNoise())", "refiner = Refiner()")
    found = {line for name, line in _lines(root) if name == "noise.py"}
    assert found == {"return x * x.abs().max().item()", "return x * x.abs().mean().item()"}  # ScaledNoise's, not ClampedNoise's


def test_a_float_parameter_given_host_floats_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("chosen", tmp_path, monkeypatch)
    _edit(root, "diffusion/samplers.py", "x = x * self.get_sigma(steps[i], steps[i + 1])", "x = x * self.get_sigma(sigmas[i], sigmas[i + 1])")
    assert ("samplers.py", "return sqrt(sigma_next ** 2 - sigma ** 2 / 4)") in _lines(root)  # given the device sigmas: read


def _summary(source: str):  # type: ignore[no-untyped-def]
    ctx = FileContext(cst.parse_module(source), "m.py")
    summarizer = StepSummarizer(ctx)
    summarizer.hot_call_nodes(located=True)
    return summarizer.summary("m.py", lambda node: Location("m.py", 1, 1))


@pytest.mark.parametrize(("params", "fallback"), [
    ("sampler: Sampler", ("local", "Sampler")),
    ("sampler=VSampler()", ("local", "VSampler")),
    ("sampler: Sampler = VSampler()", ("local", "VSampler")),  # the default is what runs when it is left out
])
def test_a_kept_parameter_is_what_the_callers_pass_first(params: str, fallback: tuple) -> None:
    source = ("import torch\n\nclass Sampler(torch.nn.Module):\n    pass\n\nclass VSampler(Sampler):\n    pass\n\n"
              f"class Runner(torch.nn.Module):\n    def __init__(self, {params}):\n        super().__init__()\n        self.sampler = sampler\n\n"
              "    def forward(self, x):\n        return self.sampler(x)\n")
    held = dict(next(c for c in _summary(source).classes if c.key == "Runner").attributes)
    assert held["sampler"] == ("or", ("passed", "Runner.__init__", "sampler"), fallback)
