"""The index of the calls that may drain the device's queue (analysis/step_drains.py) lets
``Places.position`` skip the walk back from a call site with none before it: every answer
stays the one the walk gives, on the rule fixtures and on the tricky cases below."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.analysis.context import FileContext
from torchlint.analysis.step_drains import DrainIndex

_CASES = {
    "read then call": """
import torch
def train(model, loader, opt):
    for x in loader:
        loss = model(x).mean()
        print(loss.item())
        log(loss)
        loss.backward()
        opt.step()
def log(v):
    print(v)
""",
    "helper after a read in an earlier statement": """
def evaluate(model, x):
    y = model(x)
    n = int(y.sum())
    report(n, y)
    return summarize(y)
""",
    "upload, then sized by values": """
import torch
def step(batch, model, device):
    x = batch.to(device)
    keep = torch.nonzero(x > 0)
    return model(x[keep])
""",
    "legacy CUDA class built from data": """
import torch
Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
def step(real, model):
    batch = Tensor(real)
    return model(batch)
""",
    "a read in a nested function, the site outside it": """
def outer(model, x):
    def inner(y):
        return y.item()
    return model(x)
""",
    "a read in an if before, a call in the loop after": """
def run(model, data, verbose):
    for x in data:
        if verbose:
            print(x.cpu())
        out = model(x)
        post(out)
""",
    "module level": """
import torch
model = build()
v = model(torch.ones(3)).item()
post(v)
""",
    "own argument drains": """
import torch
def grow(b, d):
    return torch.zeros(b[-1].item() + 1).to(d)
""",
    "names synchronize": """
import torch
sync = torch.cuda.synchronize
def timed(model, x):
    sync()
    y = model(x)
    sync()
    return finish(y)
""",
}


def _positions(module: cst.Module, exhaustive: bool) -> list[tuple[cst.Call, object]]:
    """Every call's position in its step, with the index or with the walk back always taken.
    A context of its own on ``module``: both ways are asked of the same nodes (the analyses
    keep nothing outside their context but ``mentions``, a fact of the node alone)."""
    ctx = FileContext(module, "m.py")
    if exhaustive:
        index = DrainIndex(ctx, lambda call: False)
        index.everything = True  # every call may drain: the walk back runs for every site
        ctx.places.__dict__["_drain_index"] = index
    return [(call, ctx.places.position(call, ctx.loops.hot_loop(call))) for call in ctx.tree.nodes(cst.Call)]


def _differences(code: str) -> list[tuple[str, object, object]]:
    """The calls whose position the index and the walk disagree on: (call, index's, walk's).
    One parse for both (a parse is a third of the work); the call's code is made only for a
    difference (it was another sixth)."""
    module = cst.parse_module(code)
    indexed, walked = _positions(module, exhaustive=False), _positions(module, exhaustive=True)
    assert [call for call, _ in indexed] == [call for call, _ in walked]
    return [(module.code_for_node(call), mine, theirs) for (call, mine), (_, theirs) in zip(indexed, walked) if mine != theirs]


@pytest.mark.parametrize("name", list(_CASES))
def test_the_index_gives_the_walks_answers(name: str) -> None:
    assert _differences(_CASES[name]) == []


def test_the_index_knows_a_read_and_an_upload_before_a_site_and_nothing_else() -> None:
    ctx = FileContext(cst.parse_module(_CASES["upload, then sized by values"] + _CASES["a read in a nested function, the site outside it"]), "m.py")
    index = ctx.places._drain_index
    calls = {cst.Module([]).code_for_node(c): c for c in ctx.tree.nodes(cst.Call)}
    assert not index.everything
    assert index.may_drain(calls["batch.to(device)"]) and index.may_drain(calls["torch.nonzero(x > 0)"]) and index.may_drain(calls["y.item()"])
    assert not index.may_drain(calls["model(x[keep])"])
    function = ctx.tree.enclosing_function(calls["model(x[keep])"])
    assert index.any_before(calls["model(x[keep])"], function)  # the upload before it
    assert not index.any_before(calls["batch.to(device)"], function)  # the first call of its step: nothing drained before it
    outer_site = calls["model(x)"]
    # a read in a nested function before it counts (a may, not a must): the walk back says no
    assert index.any_before(outer_site, ctx.tree.enclosing_function(outer_site))


def test_a_file_naming_synchronize_keeps_every_call() -> None:
    ctx = FileContext(cst.parse_module(_CASES["names synchronize"]), "m.py")
    assert ctx.places._drain_index.everything


def test_the_sync_rule_fixtures_place_alike() -> None:
    """Every call of the sync rules' fixtures (reads, syncs, uploads, where positions weigh
    the impact): the index's answer is the walk's."""
    files = sorted(path for directory in (FIXTURES / "rules").glob("TL1*") for path in directory.rglob("*.py"))
    assert len(files) > 50
    differ = []
    for path in files:
        try:
            different = _differences(path.read_text(encoding="utf-8"))  # parses first: bad input raises before any analysis
        except (UnicodeDecodeError, cst.ParserSyntaxError):
            continue  # a fixture of bad input
        if different:
            differ.append((path.name, different))
    assert not differ
