"""Shapes of models the forward reach follows (analysis/objects.py, members.py, aliases.py,
light.py, and the join's several classes per object in project.py): each case is the one
mechanism alone, with the near-miss that must stay quiet beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

HEAD = "import torch\nimport torch.nn as nn\nfrom functools import partial\n"
# Classes whose forward reads a tensor into Python (TL102 `.cpu()`): the line says which ran.
LAYERS = "".join(
    f"class {name}(nn.Module):\n    def forward(self, x):\n        return x.cpu()  # {name}\n" for name in ("A", "B", "C", "D")
)
LOOP = "def main(loader):\n    model = Net().cuda()\n    for x in loader:\n        model(x).sum().backward()\n"


def _reached(net: str, extra: str = "") -> set[str]:
    """The classes among A-D whose forward the step reaches."""
    text = HEAD + LAYERS + net + LOOP + extra
    lines = text.splitlines()
    found = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    return {lines[f.line - 1].rsplit("# ", 1)[-1] for f in found}


def _net(init: str, forward: str) -> str:
    return f"class Net(nn.Module):\n    def __init__(self, cfg):\n        super().__init__()\n{init}    def forward(self, x):\n{forward}"


@pytest.mark.parametrize("first", ["A", "B"])
def test_an_attribute_set_in_two_branches_runs_either_forward(first: str) -> None:
    second = "B" if first == "A" else "A"
    init = f"        if cfg.flash:\n            self.attn = {first}()\n        else:\n            self.attn = {second}()\n        self.head = C()\n"
    assert _reached(_net(init, "        return self.attn(x)\n")) == {"A", "B"}  # not C: forward never calls self.head


def test_a_branch_with_a_library_class_hides_no_other_branch() -> None:
    # the first branch's class lives outside the project: the join resolves it to nothing
    init = "        if cfg.flash:\n            self.attn = flash_attn.FlashAttention()\n        else:\n            self.attn = B()\n"
    assert _reached(_net(init, "        return self.attn(x)\n"), "import flash_attn\n") == {"B"}


def test_an_attribute_chosen_by_a_conditional_expression() -> None:
    init = "        self.norm = A() if cfg.rms else nn.Identity()\n        self.out = B() if cfg.big else C()\n"
    assert _reached(_net(init, "        return self.out(self.norm(x))\n")) == {"A", "B", "C"}


def test_classes_through_partial_and_a_chosen_class() -> None:
    init = (
        "        block = partial(A, groups=8)\n        Full = partial(B, flash=True)\n"
        "        klass = Full if cfg.full else C\n        unused = partial(D)\n"
        "        self.block = block()\n        self.attn = klass()\n"
    )
    assert _reached(_net(init, "        return self.attn(self.block(x))\n")) == {"A", "B", "C"}


def test_rows_of_a_container_unpacked_by_position() -> None:
    # lucidrains' Unet: `self.downs.append(ModuleList([...]))`; the position forward skips stays quiet
    init = (
        "        self.downs = nn.ModuleList([])\n"
        "        for last in (False, True):\n"
        "            self.downs.append(nn.ModuleList([A(), B(), C() if not last else nn.Conv2d(4, 4, 1), D()]))\n"
    )
    forward = "        for block, attn, down, _ in self.downs:\n            x = down(attn(block(x)))\n        return x\n"
    assert _reached(_net(init, forward)) == {"A", "B", "C"}


def test_rows_built_in_a_list_then_wrapped() -> None:
    init = "        rows = []\n        for _ in range(2):\n            rows.append(nn.ModuleList([A(), B()]))\n        self.rows = nn.ModuleList(rows)\n"
    forward = "        for first, second in self.rows:\n            x = first(x)\n        return x\n"
    assert _reached(_net(init, forward)) == {"A"}


def test_a_row_that_is_no_literal_names_no_class() -> None:
    # `nn.ModuleList(layers)` of unknown rows: no position can be told, so nothing is guessed
    init = "        self.rows = nn.ModuleList(cfg.rows)\n        self.keep = nn.ModuleList([A(), B()])\n"
    forward = "        for first, second in self.rows:\n            x = first(x)\n        return x\n"
    assert _reached(_net(init, forward)) == set()


def test_a_module_dict_iterated_with_items() -> None:
    init = "        self.heads = nn.ModuleDict({'a': A(), 'b': B()})\n"
    forward = "        return [head(x) for name, head in self.heads.items()]\n"
    assert _reached(_net(init, forward)) == {"A", "B"}


def test_container_methods_are_not_members_methods() -> None:
    # `self.blocks.append(...)` is the list's own method; only `self.blocks(x)` runs members
    init = "        self.blocks = nn.Sequential()\n        self.blocks.append(A())\n        self.blocks.append(B())\n"
    assert _reached(_net(init, "        return self.blocks(x)\n")) == {"A", "B"}


def test_an_object_built_in_the_call_that_passes_it() -> None:
    trainer = (
        "class Trainer:\n    def __init__(self, model, loss_func):\n        self.model = model\n        self.loss_func = loss_func\n"
        "    def fit(self, loader, opt):\n        for x, y in loader:\n"
        "            self.loss_func(self.model(x.cuda()), y.cuda()).backward()\n            opt.step()\n"
    )
    text = HEAD + LAYERS + trainer + "def main(loader, opt):\n    Trainer(A().cuda(), loss_func=B()).fit(loader, opt)\n    C()\n"
    lines = text.splitlines()
    found = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    assert {lines[f.line - 1].rsplit("# ", 1)[-1] for f in found} == {"A", "B"}


def test_every_class_callers_pass_to_one_helper() -> None:
    # a GAN step: one helper runs the generator and the discriminator
    extra = (
        "def run(net, x):\n    return net(x)\n"
        "def gan(loader, opt):\n    g, d = A().cuda(), B().cuda()\n    for x in loader:\n"
        "        run(d, run(g, x.cuda())).sum().backward()\n        opt.step()\n"
    )
    assert _reached("class Net(nn.Module):\n    def forward(self, x):\n        return x\n", extra) == {"A", "B"}


def _project(root: Path, files: dict[str, str]) -> set[tuple[str, int]]:
    for name, text in files.items():
        (root / name).write_text(text)
    findings = lint_paths([root], from_table({"select": ["TL102"]}, root)).findings
    return {(Path(f.path).name, f.line) for f in findings}


def test_a_base_class_in_another_module_with_an_attribute_in_two_branches(tmp_path: Path) -> None:
    files = {
        "layers.py": HEAD + LAYERS,
        "base.py": "import torch.nn as nn\nfrom layers import A, B, C\n\n\nclass Base(nn.Module):\n"
                   "    def __init__(self, flash):\n        super().__init__()\n        self.attn = A() if flash else B()\n        self.head = C()\n",
        "net.py": "from base import Base\n\n\nclass Net(Base):\n    def forward(self, x):\n        return self.attn(x)\n",
        "train.py": "from net import Net\n\n\n" + LOOP,
    }
    assert _project(tmp_path, files) == {("layers.py", 6), ("layers.py", 9)}  # A and B, not C


def test_a_helper_without_torch_calls_the_model_it_is_given(tmp_path: Path) -> None:
    files = {
        "layers.py": HEAD + LAYERS,
        "helpers.py": "def run(model, x):\n    return model(x)\n\n\ndef rebound(model, x):\n    model = x\n    return model(x)\n",
        "train.py": HEAD + "from layers import A, B, C\nfrom helpers import rebound, run\n\n\n"
                    "def main(loader, opt):\n    a, c = A().cuda(), C().cuda()\n    step = partial(run, a)\n    for x in loader:\n"
                    "        (step(x.cuda()) + run(B().cuda(), x.cuda()) + rebound(c, x)).sum().backward()\n        opt.step()\n",
    }
    # A through partial, B built in the call; not C: `rebound` rebinds its parameter first
    assert _project(tmp_path, files) == {("layers.py", 6), ("layers.py", 9)}


def test_self_called_in_a_lightning_step_runs_its_forward() -> None:
    system = (
        "import pytorch_lightning as pl\n"
        "class System(pl.LightningModule):\n    def __init__(self, model):\n        super().__init__()\n        self.model = model\n"
        "    def forward(self, x):\n        return self.model(x)\n"
        "    def training_step(self, batch, i):\n        return self(batch).sum()\n"
        "    def predict(self, x):\n        return self.head(x)\n"
        "def main(loader):\n    pl.Trainer().fit(System(A()), loader)\n    B()\n"
    )
    text = HEAD + LAYERS + system
    lines = text.splitlines()
    found = lint_source(text, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    assert {lines[f.line - 1].rsplit("# ", 1)[-1] for f in found} == {"A"}


def test_a_training_step_that_reaches_a_layer_deeper_still_names_training() -> None:
    # an evaluation loop calls A directly, the training loop through Net.forward: A costs training steps
    net = "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.a = A()\n    def forward(self, x):\n        return self.a(x)\n"
    main = (
        "def main(loader, val, opt):\n    model, probe = Net().cuda(), A().cuda()\n"
        "    with torch.no_grad():\n        for x in val:\n            probe(x.cuda())\n"
        "    for x in loader:\n        model(x.cuda()).sum().backward()\n        opt.step()\n"
    )
    found = lint_source(HEAD + LAYERS + net + main, "t.py", from_table({"select": ["TL102"]}, Path(".")))
    # A's `x.cpu()` is the first thing the step's forward does, right after the blocking upload
    # of its argument (`x.cuda()`): that copy drained the queue, so the read waits for nothing
    # more (low); not mid-step
    assert [(f.line, f.impact) for f in found] == [(6, "low")]
    assert "called from `Net.forward()`, run every step from a training loop at line 28" in found[0].message


def test_members_of_a_module_dict_by_key() -> None:
    """nanoGPT's layout: `self.transformer = nn.ModuleDict(dict(wte=..., h=nn.ModuleList(...)))`,
    then `self.transformer.wte(x)` and `for block in self.transformer.h`; a key forward never
    reads (`unused`) is not reached, and `self.heads["b"]` reads one key of a literal dict."""
    init = (
        "        self.transformer = nn.ModuleDict(dict(wte=A(), h=nn.ModuleList([B() for _ in range(2)]), unused=C()))\n"
        "        self.heads = nn.ModuleDict({\"a\": C(), \"b\": D()})\n"
    )
    forward = "        x = self.transformer.wte(x)\n        for block in self.transformer.h:\n            x = block(x)\n        return self.heads[\"b\"](x)\n"
    assert _reached(_net(init, forward)) == {"A", "B", "D"}
