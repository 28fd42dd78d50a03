"""The step reached through what a factory makes and what a dict holds (review 7's misses):
score_sde's training loop calls the closure `get_step_fn(...)` returns, with the model, the
optimizer and the EMA in a dict (`state["ema"].update(...)`, torch_ema's per-parameter loop);
nanochat's attention calls a function held in a `SimpleNamespace` of another module."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, project_findings
from torchlint.config import Config
from torchlint.engine import lint_source


def test_the_project_findings_and_tiers_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("closures", tmp_path, monkeypatch)
    assert_markers_hold(root, project_findings(root))


def test_the_closure_is_the_step_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("closures", tmp_path, monkeypatch)
    ema = next(f for f in project_findings(root, "TL305"))
    assert "called from `get_step_fn.step_fn()`" in ema.message and "training loop at run_lib.py:26" in ema.message


def _found(source: str, code: str) -> list:  # type: ignore[type-arg]
    return [f for f in lint_source(source, "train.py", Config(select=(code,), min_impact="low")) if f.code == code]


_EMA = '''
import torch


class EMA:
    def __init__(self, parameters):
        self.shadow_params = [p.clone() for p in parameters]

    def update(self, parameters):
        for s, p in zip(self.shadow_params, parameters):
            s.sub_(0.001 * (s - p))


model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters())
'''


@pytest.mark.parametrize("holder", ["{'ema': EMA(model.parameters())}", "dict(ema=EMA(model.parameters()), step=0)"])
def test_a_method_of_an_object_a_local_dict_holds_is_followed(holder: str) -> None:
    source = _EMA + f'''
state = {holder}
for x in loader:
    model(x).sum().backward()
    opt.step()
    state["ema"].update(model.parameters())
'''
    (found,) = _found(source, "TL305")
    assert found.line == 10 and "training loop" in found.message


def test_another_key_of_the_dict_runs_nothing_of_the_ema() -> None:
    source = _EMA + '''
state = {"ema": EMA(model.parameters()), "log": []}
for x in loader:
    model(x).sum().backward()
    opt.step()
    state["log"].append(1)
'''
    assert _found(source, "TL305") == []


def test_a_closure_made_by_a_factory_of_the_same_file_is_reached() -> None:
    source = _EMA + '''
def make_step(ema):
    def step(x):
        model(x).sum().backward()
        opt.step()
        ema.update(model.parameters())
    return step


step_fn = make_step(EMA(model.parameters()))
for x in loader:
    step_fn(x)
'''
    (found,) = _found(source, "TL305")
    assert "`make_step.step()`" in found.message


def test_a_factory_whose_closure_is_never_called_in_a_loop_makes_no_step() -> None:
    source = _EMA + '''
def make_step(ema):
    def step(x):
        ema.update(model.parameters())
    return step


step_fn = make_step(EMA(model.parameters()))
step_fn(next(iter(loader)))
for x in loader:
    model(x).sum().backward()
    opt.step()
'''
    assert _found(source, "TL305") == []


def test_precision_chosen_in_the_launcher_holds_for_the_step_of_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `with torch.autocast(...)` around the closure's call, and TF32 allowed at start-up, in the
    # file of the loop: the step of the other file runs under both.
    root = checked_here("closures", tmp_path, monkeypatch)
    before = {f.code for f in project_findings(root)}
    assert {"TL501", "TL506"} <= before
    run_lib = root / "run_lib.py"
    text = run_lib.read_text()
    text = text.replace("        loss = train_step_fn(state, batch)",
                        "        with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n            loss = train_step_fn(state, batch)")
    text = text.replace("def train(loader", "torch.backends.cuda.matmul.allow_tf32 = True\n\n\ndef train(loader")
    run_lib.write_text(text)
    after = {f.code for f in project_findings(root)}
    assert not {"TL501", "TL506"} & after and "TL305" in after


def test_a_step_function_no_loop_calls_is_no_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("closures", tmp_path, monkeypatch)
    run_lib = root / "run_lib.py"
    run_lib.write_text(run_lib.read_text().replace("        loss = train_step_fn(state, batch)\n", "        loss = batch.sum()\n"))
    assert not {"TL501", "TL506", "TL305"} & {f.code for f in project_findings(root)}


def test_a_closure_calls_the_model_its_factory_was_given() -> None:
    # score_sde's `get_model_fn(model, train)`: `model_fn` calls the factory's parameter `model`,
    # which is what the factory's caller passes (the Net whose forward reads a value).
    source = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        scale = x.abs().max().item()
        return self.fc(x / scale)


def get_model_fn(model):
    def model_fn(x):
        return model(x)
    return model_fn


net = Net().cuda()
opt = torch.optim.SGD(net.parameters())
model_fn = get_model_fn(net)
for x in loader:
    model_fn(x.cuda()).sum().backward()
    opt.step()
'''
    found = _found(source, "TL101")
    assert [f.line for f in found] == [11] and "`Net.forward()` (called from `get_model_fn.model_fn()`" in found[0].message
