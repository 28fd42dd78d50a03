"""A read on a helper's first lines, the helper called right after the step's explicit synchronize
with only small ops between, waits for those small kernels only: low ("right after a sync"), and
the synchronize keeps the step's one wait (ConvNeXt's ``torch.cuda.synchronize()``, then
``metric_logger.update(class_acc=class_acc)`` whose ``MetricLogger.update`` in ``utils.py`` reads
it; issue 32). Never both low, never both medium; a forward run between them makes the read wait
for it (fixtures/projects/syncthenhelper)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("syncthenhelper", tmp_path, monkeypatch)


def _impacts(root: Path) -> dict[tuple[str, int], str]:
    return {(Path(f.path).name, f.line): f.impact for f in project_findings(root, ("TL101", "TL103"))}


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, ("TL101", "TL103")))


def test_the_read_says_right_after_a_sync(project: Path) -> None:
    read = next(f for f in project_findings(project, "TL101") if f.line == 11)
    assert "right after a sync" in read.impact_reason


def test_in_one_file_exactly_one_of_the_pair_keeps_the_wait(project: Path) -> None:
    """The helper moved into the training file: the same pair, the sync medium, the read low."""
    meters, train = project / "meters.py", project / "train.py"
    train.write_text(train.read_text().replace("from meters import Meter\n", meters.read_text().replace("import torch\n", "", 1)))
    meters.unlink()
    lines = train.read_text().splitlines()
    at_sync = 1 + next(i for i, line in enumerate(lines) if "synchronize()" in line)
    at_read = 1 + next(i for i, line in enumerate(lines) if "value.item()" in line)
    impacts = _impacts(project)
    sync, read = impacts[("train.py", at_sync)], impacts[("train.py", at_read)]
    assert {sync, read} == {"medium", "low"}
    assert sync == "medium"


def test_a_device_op_between_that_is_no_small_op_keeps_the_read_medium(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("        acc = (out.argmax(-1) == y).float().mean()\n",
                                               "        acc = torch.nn.functional.softmax(model(x), -1).amax(-1).mean()\n"))
    assert _impacts(project)[("meters.py", 11)] == "medium"


def test_a_sync_only_in_a_branch_does_not_drain_for_the_read(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("        torch.cuda.synchronize()  # expect: TL103 (medium)\n        acc",
                                               "        if x.shape[0] > 8:\n            torch.cuda.synchronize()\n        acc", 1))
    assert _impacts(project)[("meters.py", 11)] == "medium"


def test_a_loop_of_device_work_between_keeps_the_read_medium(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("        acc = (out.argmax(-1) == y).float().mean()\n",
                                               "        for p in model.parameters():\n            p.data.mul_(0.999)\n"
                                               "        acc = (out.argmax(-1) == y).float().mean()\n", 1))
    assert _impacts(project)[("meters.py", 11)] == "medium"


def test_a_loop_of_host_work_between_does_not(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("        acc = (out.argmax(-1) == y).float().mean()\n",
                                               "        lr = 0.0\n        for group in optimizer.param_groups:\n            lr = max(lr, group[\"lr\"])\n"
                                               "        acc = (out.argmax(-1) == y).float().mean()\n", 1))
    assert _impacts(project)[("meters.py", 11)] == "low"


def test_another_objects_method_between_keeps_the_read_medium(project: Path) -> None:
    """``ema.update(model)`` may queue a kernel per parameter: no small op."""
    train = project / "train.py"
    train.write_text(train.read_text().replace("        acc = (out.argmax(-1) == y).float().mean()\n",
                                               "        ema.update(model)\n        acc = (out.argmax(-1) == y).float().mean()\n", 1)
                     .replace("def train_one_epoch(model, loader, optimizer, device):", "def train_one_epoch(model, loader, optimizer, device, ema):"))
    assert _impacts(project)[("meters.py", 11)] == "medium"
