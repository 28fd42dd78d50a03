"""The plain data a worker sends back and the cache keeps pickles by its fields
(findings.pickled_by_fields): what comes back equals what went, field for field."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, fields

import pytest

from torchlint.analysis.multiplicity import Multiplicity, Position, Repeat, Where
from torchlint.analysis.summary import CallSite, ClassSummary, FileSummary, LoopSummary
from torchlint.config import Config
from torchlint.engine.discover import discover
from torchlint.engine.lint import lint_paths
from torchlint.engine.pool import check_files
from torchlint.engine.results import plain
from torchlint.findings import Finding, Fix, FixSafety, Location, pickled_by_fields

TRAIN = """import torch
from helpers import accuracy

class Net(torch.nn.Module):
    def forward(self, x):
        return x

model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x = x.cuda()
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    if loss.item() > 1:
        print(accuracy(model(x), y))
"""


def test_a_checked_files_results_come_back_equal(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "helpers.py").write_text("import torch\n\ndef accuracy(logits, y):\n    return (logits.argmax(1) == y).float().mean().item()\n")
    files = list(discover([tmp_path], Config(select=["ALL"], min_impact="low")))
    results = [plain(r) for r in check_files(files, Config(select=["ALL"], min_impact="low"), jobs=1)]
    assert any(r.summary is not None and r.summary.calls for r in results)
    assert any(f.fix is not None for r in results for f in r.findings)  # TL111's fix
    assert any(r.conditional for r in results)  # the helper's read waits for the join
    again = pickle.loads(pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL))
    for before, after in zip(results, again):
        assert after.findings == before.findings
        assert [f.impact for f in after.findings] == [f.impact for f in before.findings]  # compare=False fields too
        assert after.summary == before.summary
        assert after.conditional == before.conditional
    # the cache keeps these pickles: a warm run says what the cold one did, the helper's finding too
    cold = lint_paths([tmp_path], Config(select=["ALL"], min_impact="low"), cache=tmp_path / "cache")
    warm = lint_paths([tmp_path], Config(select=["ALL"], min_impact="low"), cache=tmp_path / "cache")
    assert warm.cached == 2
    assert [(f.code, f.path, f.line, f.message, f.impact) for f in warm.findings] == [(f.code, f.path, f.line, f.message, f.impact) for f in cold.findings]
    assert any(f.code == "TL101" and f.path.endswith("helpers.py") for f in warm.findings)


def test_every_field_survives_even_those_left_out_of_equality():
    location = Location("a.py", 3, 5, 3, 9, cell=2)
    finding = Finding("TL101", "name", "message", location, "hint", Fix(None, None, FixSafety.UNSAFE, "why", True), (location,),
                      impact="high", impact_reason="a reason")
    call = CallSite("f", ("local", "g"), Where.TRAIN, location, repeats=(("f#loop1", Repeat("blocks", 4)),), position=Position.STEP_END,
                    devices=(0, "x"), forwards=None, given=None)
    summary = FileSummary("/p/a.py", ("f",), (ClassSummary("Net", (("import", 0, "torch.nn.Module"),), ("forward",)),), (call,), (),
                          loops=(LoopSummary("f#loop1", "f", Where.TRAIN),), host_only=True)
    for value in (location, finding, call, summary, Repeat("tokens"), Multiplicity((Repeat("beams", 2),), "decoded token")):
        again = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(again) is type(value)
        assert [getattr(again, f.name) for f in fields(value)] == [getattr(value, f.name) for f in fields(value)]


def test_a_dataclass_whose_init_does_more_is_refused():
    with pytest.raises(TypeError, match="Checked"):
        @pickled_by_fields
        @dataclass(frozen=True, slots=True)
        class Checked:
            size: int

            def __post_init__(self) -> None:
                assert self.size >= 0

    with pytest.raises(TypeError, match="Derived"):
        @pickled_by_fields
        @dataclass(frozen=True, slots=True)
        class Derived:
            size: int
            half: int = field(init=False, default=0)
