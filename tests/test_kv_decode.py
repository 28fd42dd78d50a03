"""A key/value-cache decoder's per-layer read of its position (lit-llama's `if input_pos[-1] >=
max_seq_length:` in every attention layer): the position is a parameter annotated
`Optional[torch.Tensor] = None`, handed down through `Block` from the decode loop that makes
it on the device, while the training loop calls the same model without it
(fixtures/projects/kvdecode)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext, Options


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("kvdecode", tmp_path, monkeypatch)


def _reads(root: Path, name: str) -> list:  # type: ignore[type-arg]
    return [f for f in project_findings(root) if f.code in ("TL101", "TL104") and Path(f.path).name == name]


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_read_repeats_per_block_per_decoded_token_from_the_decode_loop(project: Path) -> None:
    """Training calls the model without a position or a cache: the cache's branch runs only
    when the decode loop calls it (`h, cache = self.attn(x, cache)` hands on what `Block` was given)."""
    read = _reads(project, "model.py")[0]
    assert "sampling loop at generate.py" in read.message and "training loop" not in read.message
    assert "per block per decoded token" in read.message and read.impact == "high"


def test_positions_made_on_the_host_keep_the_reads_quiet(project: Path) -> None:
    generate = project / "generate.py"
    generate.write_text(generate.read_text().replace("pos = torch.arange(0, n, device=device)", "pos = torch.arange(0, n)"))
    assert not _reads(project, "model.py") and not _reads(project, "adapter.py")


def test_the_subclass_is_reached_only_through_the_caller_that_passes_it(project: Path) -> None:
    """`generate(model: Model, ...)` runs whatever its callers pass: `run_adapter.py` passes an `AdapterModel`."""
    assert _reads(project, "adapter.py")
    (project / "run_adapter.py").unlink()
    assert not _reads(project, "adapter.py")


def test_a_caller_passing_a_host_position_elsewhere_keeps_the_read_quiet(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("logits = model(idx)", "logits = model(idx, 128, torch.arange(idx.size(1)))"))
    assert not _reads(project, "model.py")


def _candidates(signature: str) -> tuple[str, ...]:
    code = f"import torch\nfrom typing import Optional, Union\n\ndef f({signature}):\n    return pos[-1] >= 3\n"
    ctx = FileContext(cst.parse_module(code), "m.py", Options())
    test = next(iter(ctx.tree.nodes(cst.Comparison)))
    return ctx.syncs.device_parameters(test, lambda: ctx.syncs.reads_truth(test, test))


@pytest.mark.parametrize(("signature", "expected"), [
    ("pos", ("pos",)),
    ("pos=None", ("pos",)),
    ("pos: torch.Tensor", ("pos",)),
    ("pos: Optional[torch.Tensor] = None", ("pos",)),
    ("pos: 'torch.LongTensor'", ("pos",)),
    ("pos: torch.Tensor | None = None", ("pos",)),
    ("pos: int", ()),
    ("pos: float", ("pos",)),  # a 0-d tensor is passed for a float as often (StyleTTS2's `get_sigmas(sigma: float)`)
    ("pos: Optional[int] = None", ()),
    ("pos: Union[torch.Tensor, int]", ()),
    ("pos=0", ()),
    ("pos=DEFAULT_POSITIONS", ()),  # what a call leaving it out reads is the default's, not a caller's
])
def test_which_parameters_the_callers_may_pass_a_device_tensor(signature: str, expected: tuple[str, ...]) -> None:
    assert _candidates(signature) == expected
