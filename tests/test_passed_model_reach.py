"""A model passed to a training function as a plain parameter (``def train_epoch(model,
...)``: ``model.forward(x)``, ``model.loss(out, y)``) runs the forward of every class its
callers may pass: one built by a factory that picks a builder from a table
(``models[name](params)``, in a module without torch), or one built by a script's
top-level code. A loop around an epoch loop goes over whole runs, not steps
(fixtures/projects/passed)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.analysis.context import FileContext
from torchlint.analysis.join_loops import _step_loops
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.project import Project
from torchlint.analysis.steps import StepSummarizer
from torchlint.analysis.summary import CallSite, ClassSummary, FileSummary, LoopSummary
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.findings import Location

RULES = ["TL101", "TL102", "TL106", "TL110", "TL113"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copied_project("passed", tmp_path)
    monkeypatch.chdir(root)
    return root


def _findings(root: Path, *paths: str):  # type: ignore[no-untyped-def]
    return lint_paths([Path(p) for p in paths] or [Path(".")], from_table({"select": RULES}, root)).findings


def test_project_findings_match_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_the_method_of_a_parameter_names_the_loop_that_calls_it(project: Path) -> None:
    edge = next(f for f in _findings(project) if "srcs[i].item()" in f.message)
    line = next(i for i, text in enumerate((project / "train" / "train_edges.py").read_text().splitlines(), 1) if "model.forward(x, srcs" in text)
    assert f"run every step from a training loop at train/train_edges.py:{line}" in edge.message


@pytest.mark.parametrize("cut", ["main_edges.py", "nets/load_net.py"])
def test_without_the_caller_or_the_factory_the_table_s_models_are_not_reached(project: Path, cut: str) -> None:
    (project / cut).unlink()
    # (a model no step reaches still reports on every call of the model: not from a step; a class no
    # code builds says so (`UnusedNet`); a tensor built on the host and then moved, TL110, is reported
    # wherever it is, reached or not)
    unreached = ("every call of the model", "is never built in this project")
    found = {Path(f.path).name for f in _findings(project) if not any(w in f.message for w in unreached) and f.code != "TL110"}
    assert "edge_net.py" not in found and "node_net.py" not in found
    assert "script_net.py" in found  # the script still passes its own model


def test_without_the_script_s_top_level_call_its_model_is_not_reached(project: Path) -> None:
    script = project / "scripts" / "run_direct.py"
    script.write_text(script.read_text().replace('train_epoch(model, optimizer, "cuda", [], 0)', "print(model)"))
    assert "script_net.py" not in {Path(f.path).name for f in _findings(project) if "every call of the model" not in f.message}


def _summary(source: str):  # type: ignore[no-untyped-def]
    ctx = FileContext(cst.parse_module(source), "m.py")
    summarizer = StepSummarizer(ctx)
    summarizer.hot_call_nodes(located=True)
    return summarizer.summary("m.py", lambda node: Location("m.py", 1, 1))


def test_a_table_of_builders_returns_each_builder_s_object() -> None:
    summary = _summary("import torch\nfrom nets import a, b\n\ndef build(name, p):\n    table = {'a': a, 'b': b}\n    return table[name](p)\n")
    assert dict(summary.returns)["build"] == (("each", (("returned", ("import", 0, "nets.a"), None), ("returned", ("import", 0, "nets.b"), None))),)


@pytest.mark.parametrize(("call", "target"), [
    ("model.forward(x)", ("object", ("passed", "run", "model"), "forward")),
    ("model.loss(x)", ("object", ("passed", "run", "model"), "loss")),
    ("model(x)", ("object", ("passed", "run", "model"), "__call__")),
])
def test_a_call_on_a_parameter_refers_to_what_the_callers_pass(call: str, target: tuple) -> None:  # type: ignore[type-arg]
    summary = _summary(f"import torch\n\ndef run(model, loader):\n    for x in loader:\n        {call}\n")
    assert [c.target for c in summary.calls if c.caller == "run"] == [target]


def test_a_name_bound_in_the_function_is_no_parameter() -> None:
    summary = _summary("import torch\n\ndef run(loader):\n    model = make()\n    for x in loader:\n        model.forward(x)\n")
    assert not any(c.target[0] == "object" and c.target[1][0] == "passed" for c in summary.calls)


def test_a_loop_around_an_epoch_loop_is_no_step_loop() -> None:
    summary = _summary(
        "import torch\nfrom train import train_epoch, evaluate\n\n"
        "def pipeline(model, loader, splits, epochs):\n"
        "    for split in range(splits):\n"
        "        for epoch in range(epochs):\n"
        "            train_epoch(model, loader)\n"
        "        evaluate(model, loader)\n"
    )
    loops = {loop.key: loop for loop in summary.loops}
    assert not loops["pipeline#loop0"].may_step



def _rl_project(until: bool) -> Project:
    """An agent whose `act` runs its network's forward, and a script whose episode loop
    holds an environment loop (`while not done:` when ``until``) calling `act`, and whose
    main loop calls `act` and then `learn`, a whole training step."""
    agent = FileSummary(
        "agent.py", ("Net.forward", "Agent.act", "Agent.learn"),
        (ClassSummary("Net", (), ("forward",)), ClassSummary("Agent", (), ("act", "learn"))),
        (CallSite("Agent.act", ("object", ("local", "Net"), "__call__"), None),), (),
        one_step=("Agent.learn",),
    )
    act, learn = ("object", ("import", 0, "agent.Agent"), "act"), ("object", ("import", 0, "agent.Agent"), "learn")
    main = FileSummary(
        "main.py", ("evaluate",), (),
        (CallSite("evaluate", act, None, within="evaluate#loop1"), CallSite("", act, None, within="#loop0"), CallSite("", learn, None, within="#loop0")), (),
        loops=(LoopSummary("evaluate#loop0", "evaluate", Where.EVAL), LoopSummary("evaluate#loop1", "evaluate#loop0", Where.EVAL, until=until),
               LoopSummary("#loop0", "", Where.INFER)),
    )
    return Project([agent, main])


@pytest.mark.parametrize(("until", "root"), [(True, "evaluate#loop1"), (False, "evaluate#loop0")])
def test_a_while_loop_calling_a_model_is_the_step_not_the_loop_around_it(until: bool, root: str) -> None:
    found, roots = _step_loops(_rl_project(until))
    assert ("main.py", root) in roots and found[("main.py", root)] is Where.INFER
    assert len([key for path, key in roots if key.startswith("evaluate")]) == 1


def test_a_sampling_loop_that_also_runs_a_training_step_is_a_training_loop() -> None:
    found, _ = _step_loops(_rl_project(True))
    assert found[("main.py", "#loop0")] is Where.TRAIN
