"""The step goes through the model (analysis/objects.py, analysis/project.py): a factory in
one module, the model moved and wrapped in DataParallel in the training script, its
submodules in a third module, a static training step called from another file's loop,
and an RL algorithm whose policy and buffer are known only by their annotations; and, in
zoo/, a Unet whose rows of blocks are unpacked by position, an attribute set in two
branches, submodules a base class in another module sets, a loss built in the constructor
call of a Lightning module that inherits its __init__, and helpers without torch that call
the model they are given (directly and through ``functools.partial``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

RULES = ["TL101", "TL102", "TL104", "TL105", "TL106", "TL110", "TL113", "TL114"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copied_project("forward", tmp_path)
    monkeypatch.chdir(root)
    return root


def _findings(root: Path, *paths: str):  # type: ignore[no-untyped-def]
    return lint_paths([Path(p) for p in paths] or [Path(".")], from_table({"select": RULES}, root)).findings


def test_project_findings_match_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_message_names_the_chain_and_the_loop(project: Path) -> None:
    train = (project / "train.py").read_text().splitlines()
    call_line = next(i for i, line in enumerate(train, 1) if "out = model(" in line)
    expand = next(f for f in _findings(project) if "predicted[i].item()" in f.message)
    assert f"in `LengthRegulator.expand()` (called from `LengthRegulator.LR()`, run every step from a training loop at train.py:{call_line})" in expand.message
    assert [(Path(r.path).name, r.line) for r in expand.related] == [("train.py", call_line)]


def test_without_the_training_script_nothing_is_per_step(project: Path) -> None:
    # The factory, the model and its layers alone: nothing calls the model every step. What
    # waits in its forward still holds on every call of the model, counted per call (the
    # blocks' reads once in each block); `max_len`'s read only where a call leaves it out.
    found = [f for f in _findings(project, "factory.py", "models") if f.code != "TL110"]
    assert not any("run every step" in f.message for f in found)
    assert all("every call of the model" in f.message for f in found)
    assert {(Path(f.path).name, f.line) for f in found} == {("layers.py", line) for line in (21, 24, 25, 40, 56, 63)}


def test_a_wrapper_or_a_rebinding_keeps_the_class(project: Path) -> None:
    train = project / "train.py"
    for line in ("    model = model.to(device)\n", "    model = nn.DataParallel(model)\n"):
        text = train.read_text()
        train.write_text(text.replace(line, ""))
        assert any("LengthRegulator.expand" in f.message for f in _findings(project)), line


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        # `model = Net(); model = model.to(device)` on the next line keeps the class
        ("class Net(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
         "def main(loader):\n    model = Net()\n    model = model.to('cuda')\n    for x in loader:\n        model(x).sum().backward()\n", {3}),
        # `from_pretrained` builds an instance of its class
        ("class Net(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
         "def main(loader):\n    model = Net.from_pretrained('x').cuda()\n    for x in loader:\n        model(x).sum().backward()\n", {3}),
        # torch.compile and DDP wrap it
        ("class Net(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
         "def main(loader):\n    model = torch.compile(nn.parallel.DistributedDataParallel(Net().cuda()))\n    for x in loader:\n        model(x).sum().backward()\n", {3}),
        # nn.Sequential members, and a held submodule used only outside forward
        ("class Block(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
         "class Head(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
         "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.body = nn.Sequential(Block(), nn.ReLU())\n        self.head = Head()\n"
         "    def forward(self, x):\n        return self.body(x)\n    def infer(self, x):\n        return self.head(x)\n"
         "def main(loader):\n    model = Net().cuda()\n    for x in loader:\n        model(x).sum().backward()\n", {3}),
        # an annotated parameter
        ("class Buffer:\n    def add(self, v):\n        self.v = v.cpu()\n"
         "def collect(model, buffer: Buffer, loader):\n    model.cuda()\n    for x in loader:\n        out = model(x)\n        out.sum().backward()\n        buffer.add(out)\n", {3}),
    ],
)
def test_objects_are_followed(source: str, lines: set[int]) -> None:
    text = "import torch\nimport torch.nn as nn\n" + source
    found = {f.line - 2 for f in lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))}
    assert found == lines


def test_a_loop_calling_a_model_of_another_module_is_a_step_loop(project: Path) -> None:
    # rl/algorithm.py's `while` loop is a step loop only because `self.policy` is an
    # `ActorCritic` (rl/policies.py), an nn.Module; without that module it is not.
    assert any(Path(f.path).name == "algorithm.py" for f in _findings(project, "rl"))
    assert not [f for f in _findings(project, "rl/algorithm.py", "rl/buffer.py")]


def test_a_container_built_from_itself_ends_quietly() -> None:
    # `layers = nn.ModuleList(layers)` then `nn.Sequential(*layers)`: the members are looked
    # up through the name, which is bound to the container itself.
    text = (
        "import torch\nimport torch.nn as nn\n"
        "class Block(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        layers = [Block()]\n        layers = nn.ModuleList(layers)\n        self.body = nn.Sequential(*layers)\n"
        "    def forward(self, x):\n        return self.body(x)\n"
        "def main(loader):\n    model = Net().cuda()\n    for x in loader:\n        model(x).sum().backward()\n"
    )
    findings = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    assert [f.line for f in findings] == [5]


def test_a_model_reached_through_constructor_arguments_and_a_partial(project: Path) -> None:
    """denoise/: the script (no torch: a light summary) builds the model with a factory and
    hands it to `Trainer(model=...)`, which keeps it (`self.ddp_model = DDP(self.model)`) and
    calls `functools.partial(self.process.training_losses, self.ddp_model, x, t)()`; the
    process wraps it in a private class whose `__call__` runs it. The read in `UNet.forward`
    runs once per step, the one in its loop over the grown `ModuleList` once per block."""
    found = {f.line: f for f in _findings(project, "denoise") if Path(f.path).name == "unet.py"}
    assert set(found) == {16, 19}  # not the `Teacher` the step never calls
    assert "called from `_Rescaled.__call__()`, run every step from a training loop" in found[16].message
    assert found[16].message.endswith("on every step")  # once per step: no multiplicity
    assert found[19].message.endswith("(per block per step)")  # appended to: no count from the literal
    # the sampler is never reached from the training step (the partial is of `training_losses`);
    # its own loop feeds the model's output back, one denoising step per iteration: an
    # inference step of its own, at its step's end (medium), never "from a training loop"
    sampler = [f for f in _findings(project, "denoise") if Path(f.path).name == "process.py"]
    assert [(f.line, f.impact) for f in sampler] == [(14, "medium")]
    assert "in a sampling loop" in sampler[0].message and "training loop" not in sampler[0].message


@pytest.mark.parametrize("cut", [
    "Trainer(model=model, process=process, data=data, teacher=create_teacher(8)).run()",  # nothing builds the trainer
    "loss = compute_losses()",  # the partial is made, never called
])
def test_without_the_constructor_call_or_the_partial_call_the_model_is_not_reached(project: Path, cut: str) -> None:
    for name in ("train_script.py", "trainer.py"):
        path = project / "denoise" / name
        text = path.read_text()
        if cut in text:
            path.write_text(text.replace(cut, "loss = x.sum()" if "compute" in cut else "pass"))
    # (what the unet's forward waits for still holds on every call of the model: not from a step)
    assert not [f for f in _findings(project, "denoise") if Path(f.path).name == "unet.py" and "every call of the model" not in f.message]


def test_a_model_passed_back_and_forth_between_two_functions_is_found_once() -> None:
    """`ping` passes its model to `pong`, which passes it back: the parameters form a cycle,
    which ends quietly and still finds the class the loop passes."""
    text = (
        "import torch\nimport torch.nn as nn\n"
        "class Net(nn.Module):\n    def forward(self, x):\n        return x.cpu()\n"
        "def ping(model, x, n):\n    out = model(x)\n    return pong(model, out, n) if n else out\n"
        "def pong(model, x, n):\n    return ping(model, x, n - 1)\n"
        "net = Net().cuda()\nfor x in loader:\n    ping(net, x.cuda(), 3).sum().backward()\n"
    )
    found = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    assert [(f.line, f.code) for f in found] == [(5, "TL102")]


def _stacks(project: Path) -> dict[int, str]:
    return {f.line: f.message for f in _findings(project, "zoo") if Path(f.path).name == "stacks.py"}


def test_a_factory_of_several_classes_reaches_each_through_its_containers(project: Path) -> None:
    """zoo/build.py (no torch: a light summary) returns one of three models chosen in an
    if/elif/else; the loop calls `model.forward(...)` by name. Each model reaches its blocks
    only through how its container is filled: a ModuleList grown by appends in a loop, a
    plain list of heads, namespace modules (`down.attn = attn`, `self.mid.core = ...`)."""
    found = _stacks(project)
    assert set(found) == {10, 42, 59, 64, 69}  # not `Probe` (only `probe()` runs it)
    assert "called from `Stack.forward()`" in found[10] and found[10].endswith("(per layer per step: once in each `Block.forward()`)")
    assert "called from `Heads.forward()`" in found[42] and "per head per step" in found[42]
    assert all("fit_built.py:11" in found[line] for line in found)


@pytest.mark.parametrize("chosen", ["Stack(4)", "Heads(8)", "Unet(3)"])
def test_a_factory_of_one_class_reaches_only_that_one(project: Path, chosen: str) -> None:
    (project / "zoo" / "build.py").write_text(f"from stacks import Heads, Stack, Unet\n\n\ndef build(kind):\n    model = {chosen}\n    return model\n")
    lines = {"Stack(4)": {10}, "Heads(8)": {42}, "Unet(3)": {59, 64, 69}}[chosen]
    assert set(_stacks(project)) == lines


def test_the_factory_with_torch_imported_is_read_the_same(project: Path) -> None:
    build = project / "zoo" / "build.py"
    build.write_text("import torch\n" + build.read_text())  # a full summary instead of the light one
    assert set(_stacks(project)) == {10, 42, 59, 64, 69}


@pytest.mark.parametrize(("source", "classes"), [
    ("if c:\n    m = A()\nelse:\n    m = B()\nuse(m)\n", {"A", "B"}),
    ("if c:\n    m = A()\nelif d:\n    m = B()\nelse:\n    m = C()\nuse(m)\n", {"A", "B", "C"}),
    ("m = A()\nif c:\n    m = B()\nuse(m)\n", {"A", "B"}),  # no else: what came before too
    ("if c:\n    m = A()\nelse:\n    m = B()\nm = C()\nuse(m)\n", {"C"}),  # replaced after the if
    ("m = A()\nif c:\n    m = B()\nelse:\n    use(m)\n", {"A"}),  # the else never sees its if's binding
])
def test_bindings_that_reach_through_branches(source: str, classes: set[str]) -> None:
    import libcst as cst

    from torchlint.analysis.context import FileContext

    ctx = FileContext(cst.parse_module(source), "m.py")
    use = next(c for c in ctx.tree.nodes(cst.Call) if getattr(c.func, "value", "") == "use")
    reaching = ctx.bindings.reaching_each("m", use.args[0].value)
    assert {b.value.func.value for b in reaching} == classes


_ATTENTION_MODEL = '''import torch
import torch.nn as nn


class Attention(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
'''
_ATTENTION_TRAINING = '''import torch
from model import Attention

model = Attention().cuda()
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    x = x.cuda()
    loss = model(x, x, x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


def test_a_library_module_s_attention_runs_on_every_call_until_a_step_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module's forward runs on every call of the model: with no step in sight (a library)
    # TL405 reports it there, high (a score matrix quadratic in the sequence, every layer);
    # a training script that runs it makes it the step's (high), named from there.
    (tmp_path / "model.py").write_text(_ATTENTION_MODEL)
    monkeypatch.chdir(tmp_path)
    select = from_table({"select": ["TL405"]}, tmp_path)
    alone = lint_paths([Path(".")], select).findings
    assert [(f.line, f.impact) for f in alone] == [(7, "high")]
    assert "every call of the model; no loop that runs it is visible" in alone[0].message
    (tmp_path / "train.py").write_text(_ATTENTION_TRAINING)
    trained = lint_paths([Path(".")], select).findings
    assert [(Path(f.path).name, f.line, f.impact) for f in trained] == [("model.py", 7, "high")]
    assert "run every step from a training loop at train.py:8" in trained[0].message


_DEMO_IN_MAIN = '''

if __name__ == "__main__":
    for causal in (True, False):
        model = Attention().cuda()
        x = torch.randn(2, 16, 8).cuda()
        loss = model(x, x, x).sum()
        loss.backward()
'''
_DEMO_SCRIPT = '''import torch
from model import Attention

for width in (8, 16):
    model = Attention()
    x = torch.randn(2, 4, width)
    print(model(x, x, x).shape)
'''


@pytest.mark.parametrize("where", ["main", "script"])
def test_a_demo_that_builds_a_model_per_configuration_is_no_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """vit-pytorch's ``__main__`` smoke tests (``for num_adv_bins in (0, 2, 10): vat = VAT(...);
    loss = vat(...); loss.backward()``): each iteration builds a new model and runs it once, a loop
    over configurations, not over batches. The attention stays what a library's is: no loop that
    runs it visible; a training loop of a model built before it is still the step."""
    monkeypatch.chdir(tmp_path)
    select = from_table({"select": ["TL405"]}, tmp_path)
    if where == "main":
        (tmp_path / "model.py").write_text(_ATTENTION_MODEL + _DEMO_IN_MAIN)
    else:
        (tmp_path / "model.py").write_text(_ATTENTION_MODEL)
        (tmp_path / "demo.py").write_text(_DEMO_SCRIPT)
    [demo] = lint_paths([Path(".")], select).findings
    assert (demo.line, demo.impact) == (7, "high") and "no loop that runs it is visible" in demo.message
    (tmp_path / "train.py").write_text(_ATTENTION_TRAINING)
    [trained] = lint_paths([Path(".")], select).findings
    assert trained.impact == "high" and "run every step from a training loop at train.py:8" in trained.message


def test_a_training_loop_that_builds_a_helper_object_per_batch_is_still_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # near-miss: the loop builds an augmentation per batch, but the model it trains is built before it
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(_ATTENTION_MODEL)
    (tmp_path / "train.py").write_text(_ATTENTION_TRAINING.replace("    x = x.cuda()\n", "    noise = Jitter(0.1)\n    x = noise(x.cuda())\n")
                                       .replace("from model import Attention\n", "from model import Attention\nfrom augment import Jitter\n"))
    [trained] = lint_paths([Path(".")], from_table({"select": ["TL405"]}, tmp_path)).findings
    assert trained.impact == "high" and "run every step from a training loop at train.py:10" in trained.message


_RUNS = '''import torch
from torch import nn


class Shift(nn.Module):
    def forward(self, x):
        return torch.roll(x, 1, -1)


class Solver:
    def __init__(self, sig):
        self.model = nn.Linear(4, 4).cuda()
        self.augment = Shift()
        self.loaders = {"train": torch.utils.data.DataLoader(list(range(8)))}


def get_solver(sig):
    return Solver(sig)


def get_state(model):
    return {k: p.data.to(device="cpu") for k, p in model.state_dict().items()}
'''
_EXPORT = '''import sys

import torch
from runs import get_solver, get_state

{before}for sig in sys.argv[1:]:
    {made}
    batch = solver.augment(next(iter(solver.loaders["train"])))
    torch.save(get_state(solver.model), sig + ".th")
'''


@pytest.mark.parametrize(("before", "made", "steps"), [
    ("", "solver = get_solver(sig)", False),
    ('solver = get_solver("best")\n', "pass", True),  # near-miss: one model, made before the loop
    ('name = "best"\n', "solver = get_solver(name)", True),  # near-miss: made in the loop, but not from its item
])
def test_a_loop_whose_model_is_made_from_its_item_goes_over_runs_not_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str, made: str, steps: bool) -> None:
    """demucs' tools/export.py (review 13): `for sig in args.signatures: solver = get_solver_from_sig(sig)`, then
    `solver.augment(...)` once: each iteration is another experiment, so `get_state`'s per-parameter copy runs once per
    export, not "per parameter per step" from "a per-batch loop"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs.py").write_text(_RUNS)
    (tmp_path / "export.py").write_text(_EXPORT.format(before=before, made=made))
    found = lint_paths([Path(".")], from_table({"select": ["TL102"], "min-impact": "low"}, tmp_path)).findings
    assert [(f.line, f.impact) for f in found] == ([(22, "high")] if steps else [])
    if steps:
        assert "per parameter per step" in found[0].message
