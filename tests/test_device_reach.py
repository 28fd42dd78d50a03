"""Device-ness from the model's input (fixtures/projects/devicereach, vits' shape): the batch
moved to the device in the training loop, handed to the model, whose output a helper of
another file slices at offsets drawn on ``x.device``: each row's slice reads a device scalar.
A tensor computed from a device tensor (a model's output, an op, a method, arithmetic,
``.to(t)``, ``.to(device=t.device)``) is on the device; where that tensor is a parameter, the
join asks every caller (``CallSite.devices_if``, ``Steps.device_params``). And a host tensor
uploaded in code run on every call of a model no step is seen to run is tiered per call
(glide's ``timestep_embedding``)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext, Options


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("devicereach", tmp_path, monkeypatch)


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_slice_read_repeats_per_batch_row(project: Path) -> None:
    read = next(f for f in project_findings(project) if f.code == "TL105")
    assert "per batch row per step" in read.message and read.impact == "medium"  # one real wait, then a copy per row (review 8, issue 32)


def test_an_input_left_on_the_host_keeps_the_slices_quiet(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("y = y.to(device, non_blocking=True)", "y = y.pin_memory()"))
    assert not any(f.code == "TL105" and f.path.endswith("segments.py") for f in project_findings(project))


def test_a_mask_read_holds_by_the_uploaded_batch_though_one_caller_passes_host_lengths(project: Path) -> None:
    """`mask[i, lengths[i]:] = 0` in a helper: `Net.infer` is given host lengths, so not every
    caller passes a device tensor; the training step's upload passed down keeps it (either holds)."""
    assert any(f.code == "TL105" and f.path.endswith("model.py") for f in project_findings(project))
    train = project / "train.py"
    train.write_text(train.read_text().replace("lengths = lengths.to(device, non_blocking=True)", "lengths = lengths.pin_memory()"))
    assert not any(f.code == "TL105" and f.path.endswith("model.py") for f in project_findings(project))


def test_device_offsets_from_every_caller_report_the_other_helper(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("host_offsets(y, offsets)", "host_offsets(y, starts)"))
    lines = {f.line for f in project_findings(project) if f.code == "TL105" and f.path.endswith("segments.py")}
    assert _line(project / "segments.py", "one caller passes host offsets") in lines


def test_an_embedding_built_on_the_device_is_quiet(project: Path) -> None:
    embed = project / "embed.py"
    embed.write_text(embed.read_text().replace("torch.arange(start=0, end=half, dtype=torch.float32)",
                                               "torch.arange(start=0, end=half, dtype=torch.float32, device=timesteps.device)"))
    assert not any(f.code == "TL110" and f.path.endswith("embed.py") for f in project_findings(project))


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def _argument(ctx: FileContext, callee: str, position: int) -> tuple[cst.BaseExpression, cst.Call]:
    call = next(c for c in ctx.tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == callee)
    return call.args[position].value, call


@pytest.mark.parametrize(("code", "expected"), [
    ("def f(x, n):\n    s = (torch.rand([n]).to(device=x.device) * 3).to(dtype=torch.long)\n    g(s)\n", ("x",)),
    ("def f(x):\n    g(torch.zeros_like(x).transpose(0, 1))\n", ("x",)),
    ("def f(x, y):\n    g(y.type_as(x) + 1)\n", ("x",)),
    ("def f(x):\n    g(torch.zeros(3, device='cuda') * 2)\n", ()),
    ("def f(self, n):\n    g(torch.linspace(0, 1, n, device=self.device)[1:])\n", ()),
    ("def f(x):\n    g(x.size(0))\n", None),
    ("def f(x):\n    g(torch.zeros(x.size(0)))\n", None),
])
def test_where_an_argument_lives_given_the_callers_parameters(code: str, expected: tuple[str, ...] | None) -> None:
    ctx = _context("import torch\n" + code)
    arg, call = _argument(ctx, "g", 0)
    assert ctx.devices.device_if(arg, call) == expected


def test_a_model_given_a_device_tensor_returns_one() -> None:
    ctx = _context("import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                   "def run(m, batch):\n    m = M().cuda()\n    a, b = m(batch.cuda())\n    g(b)\n    h(m(batch))\n")
    arg, call = _argument(ctx, "g", 0)
    assert ctx.devices.on_device(arg, call)
    arg, call = _argument(ctx, "h", 0)
    assert not ctx.devices.on_device(arg, call)


@pytest.mark.parametrize(("code", "expected"), [
    ("def f(loader):\n    for graph in loader:\n        graph = graph.to('cuda')\n        g(graph.edge_index)\n", True),
    ("def f(loader):\n    for graph in loader:\n        g(graph.edge_index)\n", False),  # never moved: on the host
    ("def f(loader):\n    for graph in loader:\n        graph = graph.to('cuda')\n        g(graph.num_nodes)\n", False),  # a count
    ("def f(loader):\n    for graph in loader:\n        graph = graph.to('cuda')\n        g(graph.device)\n", False),
    ("def f(loader):\n    for graph in loader:\n        graph = graph.to('cuda')\n        graph.edge_index = load()\n        g(graph.edge_index)\n", False),
])
def test_a_member_of_an_object_moved_whole_is_on_the_device(code: str, expected: bool) -> None:
    """`data = data.to(device)` moves a PyG graph's tensors with it: `data.edge_index` handed to a
    layer is a device tensor at that call (`CallSite.devices`); its counts and device are not."""
    ctx = _context("import torch\n" + code)
    arg, call = _argument(ctx, "g", 0)
    assert ctx.devices.moved_member(arg, call) is expected
