"""Blocks a container module runs when the container is chosen at construction (DALLE's
``execute_type = ReversibleSequence if reversible else SequentialSequence``, then
``self.layers = execute_type(layers)``) and its members are handed to it: the name bound to
several classes constructs each (analysis/aliases.py), the container a caller passes is
whatever the callers pass (analysis/members.py, resolved in the join), and an
``autograd.Function``'s ``forward(ctx, ...)`` takes ``apply``'s arguments after ``ctx``
(analysis/project.py). Each case has the near miss that must stay quiet beside it."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

HEAD = "import torch\nimport torch.nn as nn\nfrom functools import partial\n"
# Blocks whose forward reads a tensor into Python (TL102 `.cpu()`): the line says which ran.
LAYERS = "".join(
    f"class {name}(nn.Module):\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n"
    f"    def forward(self, x):\n        return x.cpu()  # {name}\n" for name in ("A", "B", "C", "D")
)
# Two containers, each given its rows when it is built: one runs them in a zipped loop, the
# other hands them to an autograd.Function.
CONTAINERS = (
    "class Seq(nn.Module):\n    def __init__(self, layers, route=None):\n        super().__init__()\n        self.layers = layers\n"
    "    def forward(self, x):\n        layers_and_args = list(zip(self.layers, [{}] * len(self.layers)))\n"
    "        for (f, g), (f_args, g_args) in layers_and_args:\n            x = g(f(x, **f_args), **g_args)\n        return x\n"
    "class _RunAll(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x, blocks):\n"
    "        for block in blocks:\n            x = block(x)\n        return x\n"
    "class Rev(nn.Module):\n    def __init__(self, blocks, route=None):\n        super().__init__()\n        self.blocks = blocks\n"
    "    def forward(self, x):\n        return _RunAll.apply(x, self.blocks)\n"
)
LOOP = "def main(loader, opt):\n    model = Net().cuda()\n    for x in loader:\n        model(x.cuda()).sum().backward()\n        opt.step()\n"
ROWS = "        layers = nn.ModuleList([])\n        for _ in range(4):\n            layers.append(nn.ModuleList([A(), B()]))\n"


def _findings(text: str) -> dict[str, str]:
    """The classes among A-D whose forward the step reaches, and each finding's message."""
    lines = text.splitlines()
    found = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    return {lines[f.line - 1].rsplit("# ", 1)[-1]: f.message for f in found}


def _net(init: str, forward: str = "        return self.layers(x)\n", extra: str = "") -> str:
    net = f"class Net(nn.Module):\n    def __init__(self, reversible=False):\n        super().__init__()\n{init}    def forward(self, x):\n{forward}"
    return HEAD + LAYERS + CONTAINERS + extra + net + LOOP


def test_a_container_chosen_by_a_conditional_expression_runs_the_blocks_it_is_given() -> None:
    found = _findings(_net(ROWS + "        execute_type = Rev if reversible else Seq\n        self.layers = execute_type(layers, route={})\n"))
    assert set(found) == {"A", "B"}
    assert "per layer per step" in found["A"] and "called from `Seq.forward()`" in found["A"]


def test_a_container_chosen_in_an_if_statement_runs_the_blocks_it_is_given() -> None:
    init = ROWS + "        if reversible:\n            execute_type = Rev\n        else:\n            execute_type = Seq\n        self.layers = execute_type(layers)\n"
    assert set(_findings(_net(init))) == {"A", "B"}


def test_the_blocks_an_autograd_function_runs_after_its_ctx() -> None:
    # `Rev` alone: its blocks reach the Function's `forward(ctx, x, blocks)` through `apply(x, self.blocks)`
    init = "        self.layers = Rev(nn.ModuleList([C() for _ in range(3)]))\n"
    found = _findings(_net(init))
    assert set(found) == {"C"}
    assert "per block per step" in found["C"]


def test_each_class_of_an_if_elif_chain_is_built() -> None:
    init = (
        "        for kind in ('a', 'b', 'c'):\n"
        "            if kind == 'a':\n                attn_class = A\n"
        "            elif kind == 'b':\n                attn_class = partial(B, stable=True)\n"
        "            else:\n                attn_class = C\n"
        "        self.attn = attn_class(8)\n"
    )
    assert set(_findings(_net(init, "        return self.attn(x)\n"))) == {"A", "B", "C"}


def test_a_chosen_class_or_function_builds_only_the_class() -> None:
    # the other branch is a function: what it returns is not guessed (D is built nowhere per step)
    extra = "def run_rows(layers, route=None):\n    return D()\n"
    init = ROWS + "        execute_type = Seq if reversible else run_rows\n        self.layers = execute_type(layers, route={})\n"
    assert set(_findings(_net(init, extra=extra))) == {"A", "B"}


def test_rows_unpacked_straight_from_a_passed_container_name_no_class() -> None:
    # `for f, g in self.layers` of a container a caller passes: its rows are in another call, so
    # which position holds which block is not known here, and nothing is guessed
    extra = (
        "class Pairs(nn.Module):\n    def __init__(self, layers):\n        super().__init__()\n        self.layers = layers\n"
        "    def forward(self, x):\n        for f, g in self.layers:\n            x = f(x)\n        return x\n"
    )
    init = ROWS + "        self.layers = Pairs(layers)\n"
    assert _findings(_net(init, extra=extra)) == {}


def test_a_partial_with_positional_arguments_fills_the_first_parameters() -> None:
    # `partial(Seq, rows)` fills Seq's `layers`: the call's own argument lands in `route`, so
    # the blocks Seq runs are D, not the A and B the call passes. One binding: the partial's
    # arguments come first. A choice with such a partial: the call's arguments are not passed
    # on at all (they would fill the wrong parameters); the partial's D is then missed, never A or B.
    single = ROWS + "        execute_type = partial(Seq, nn.ModuleList([nn.ModuleList([D(), D()])]))\n        self.layers = execute_type(layers)\n"
    assert set(_findings(_net(single))) == {"D"}
    chosen = (ROWS + "        execute_type = partial(Seq, nn.ModuleList([nn.ModuleList([D(), D()])])) if reversible else nn.Identity\n"
              "        self.layers = execute_type(layers)\n")
    assert not {"A", "B"} & set(_findings(_net(chosen)))


def test_a_passed_list_of_plain_functions_reaches_nothing() -> None:
    extra = "def run_all(fns, x):\n    for fn in fns:\n        x = fn(x)\n    return x\n"
    init = "        self.layers = nn.Identity()\n"
    forward = "        return run_all([torch.relu, torch.tanh], self.layers(x))\n"
    assert _findings(_net(init, forward, extra)) == {}


def test_a_container_chosen_in_another_module(tmp_path: Path) -> None:
    """DALLE's layout: the containers in one file, the chosen one built with the blocks in another."""
    files = {
        "layers.py": HEAD + LAYERS,
        "containers.py": HEAD + CONTAINERS,
        "model.py": HEAD + "from layers import A, B\nfrom containers import Rev, Seq\n\n\n"
                    + _net(ROWS + "        execute_type = Rev if reversible else Seq\n        self.layers = execute_type(layers, route={})\n")[len(HEAD + LAYERS + CONTAINERS):],
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    findings = lint_paths([tmp_path], from_table({"select": ["TL102"]}, tmp_path)).findings
    lines = files["layers.py"].splitlines()
    assert {lines[f.line - 1].rsplit("# ", 1)[-1] for f in findings if f.path.endswith("layers.py")} == {"A", "B"}
    assert all("per layer per step" in f.message or "per block per step" in f.message for f in findings if f.path.endswith("layers.py"))


def test_a_method_of_a_member_of_a_passed_container_is_not_followed() -> None:
    # detectron2's DatasetEvaluators: `for evaluator in self._evaluators: evaluator.process(...)`;
    # what the members are handed is not known here (outputs already on the host, often), so
    # only calls of the members themselves are followed
    text = HEAD + (
        "class Eval:\n    def process(self, out):\n        return out.cpu()  # E\n"
        "class Evals:\n    def __init__(self, evaluators):\n        self._evaluators = evaluators\n"
        "    def process(self, out):\n        for evaluator in self._evaluators:\n            evaluator.process(out)\n"
        "def main(loader, model):\n    found = []\n    found.append(Eval())\n    evals = Evals(found)\n    for x in loader:\n        evals.process(model(x.cuda()))\n"
    )
    assert _findings(text) == {}
