"""A read its step's own lines place at the end is mid-step where a call after it runs the
backward, the optimizer step or a model (issue 32, review 18: mae's `loss.item()` before
`loss_scaler(loss, optimizer, ...)`, whose `__call__` steps a GradScaler): an object of a class of
the file built in scope, or, through the join, a parameter's object or another file's function."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import checked_here, project_findings
from torchlint.config import from_table
from torchlint.engine import lint_source

MID = "mid-step: the kernels after it wait for the host"
END = "at its end"


def _reason(findings, path: str, text: str) -> str:  # type: ignore[no-untyped-def]
    source = Path(path).read_text()
    line = next(n for n, code in enumerate(source.splitlines(), start=1) if text in code)
    (found,) = [f for f in findings if f.location.path.endswith(path) and f.line == line and f.code == "TL101"]
    return found.impact_reason


@pytest.mark.parametrize(("marker", "words"), [
    ("the scaler's backward and step", MID),  # a parameter's object, of another file's class that steps
    ("another file's function runs the backward", MID),  # `misc.backward_and_step(loss, optimizer)`
    ("only the meter's host work", END),  # a parameter's object whose method keeps numbers on the host
])
def test_a_read_before_what_another_file_runs_is_placed_by_what_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          marker: str, words: str) -> None:
    checked_here("scaled", tmp_path, monkeypatch)
    reason = _reason(project_findings(Path("."), "TL101"), "engine.py", marker)
    assert words in reason and (MID if words == END else END) not in reason


LOCAL = """import math
import torch


class {name}:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
        self.seen = []

    def __call__(self, loss, optimizer):
{body}


def train(model, loader, optimizer, device):
    scaler = {name}()
    for x, y in loader:
        loss = model(x.to(device)).mean()
        value = loss.item()
        if not math.isfinite(value):
            raise SystemExit(1)
        scaler(loss, optimizer)
"""


@pytest.mark.parametrize(("name", "body", "words"), [
    ("Scaler", "        self.scaler.scale(loss).backward()\n        self.scaler.step(optimizer)\n        self.scaler.update()", MID),
    ("Keeper", "        self.seen.append(optimizer)", END),  # host work only: the read still ends the step's device work
])
def test_a_read_before_an_object_of_the_files_class_that_steps_is_mid_step(name: str, body: str, words: str) -> None:
    source = LOCAL.format(name=name, body=body)
    if words == END:  # (the step's own backward then: a training loop still, its read at the end)
        source = source.replace("        value = loss.item()", "        loss.backward()\n        optimizer.step()\n        value = loss.item()")
    found = lint_source(source, "train.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    (read,) = [f for f in found if "loss.item()" in f.message]
    assert words in read.impact_reason
