"""Random small projects through the cross-file stages: `check` never meets an internal error.

Each project is two to four modules put together from realistic snippets that the join
and settling have to resolve across files: DataLoaders over datasets that are classes,
factory functions, imports from sibling modules or attributes of them; models; training
loops calling helpers of other files; argparse settings; aliases; and names shadowed or
bound to something else than they look (a dataset name bound to a function or a module,
the crash that once cost a whole check its findings). Names are drawn from one small pool,
so that modules, classes and functions collide as they do in real projects.

The whole project is checked, and one file of it alone (its project's other files joined
as context: the findings at its call sites), with every rule selected and ``debug`` on,
so that anything raised fails the example with its traceback. Deterministic
(``derandomize``) and kept to a few seconds with ``max_examples``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchlint.config import from_table
from torchlint.engine import lint_paths

MODULES = ["data", "models", "utils", "train", "helpers"]
NAMES = ["data", "dataset", "Net", "acc", "helper", "step", "Images", "build", "model", "train", "utils"]
IMPORTS = [
    "import torch", "import torch.nn as nn", "from torch.utils.data import DataLoader, Dataset, TensorDataset",
    "import argparse", "from PIL import Image", "import numpy as np",
    "from {M} import {A}", "from {M} import {A} as {B}", "import {M}", "import {M} as {A}", "from {M} import *",
    "from .{M} import {A}", "from . import {M}",
]
SNIPPETS = [
    # datasets: a class (cheap, heavy, or calling a helper), a factory function, a name bound to one
    "class {C}(Dataset):\n    def __init__(self, n=8):\n        self.x = torch.randn(n, 4)\n\n    def __len__(self):\n"
    "        return len(self.x)\n\n    def __getitem__(self, i):\n        return {ITEM}\n",
    "class {C}(torch.utils.data.IterableDataset):\n    def __iter__(self):\n        for p in self.paths:\n            yield torch.load(p)\n",
    "def {A}(n=8):\n    return {C}(n)\n",
    "def {A}(n=8):\n    return TensorDataset(torch.randn(n, 4))\n",
    "{A} = {B}\n", "{A} = {M}.{B}\n", "{A} = {B}()\n", "{A} = lambda *a: {B}(*a)\n", "{A} = {M}\n",
    # models
    "class {C}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 2)\n"
    "        self.sub = {B}()\n\n    def forward(self, x):\n        y = self.fc(x)\n        {CALL}\n        return y\n",
    "class {C}(torch.nn.Module):\n    def forward(self, x):\n        for layer in self.layers:\n            x = layer(x)\n"
    "        return {A}(x)\n",
    "def {A}():\n    return {C}()\n",
    # helpers
    "def {A}(x):\n    return x.item()\n",
    "def {A}(x, model=None):\n    if model is None:\n        return x.sum().item()\n    return {B}(model(x))\n",
    "def {A}(out):\n    if out.sum() > 0:\n        print(out.cpu())\n    return {B}(out)\n",
    "def {A}(*args, **kwargs):\n    return {M}.{B}(*args, **kwargs)\n",
    # settings
    "parser = argparse.ArgumentParser()\nparser.add_argument('--workers', type=int, default={N})\nargs = parser.parse_args()\n",
    # loaders
    "loader = DataLoader({DS}, batch_size=8{WORKERS})\n",
    "{A} = DataLoader({DS}, batch_size=8{WORKERS})\n",
    # training loops and functions that hold one
    "model = {MODEL}\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n    out = model(x.cuda())\n"
    "    loss = out.sum()\n    loss.backward()\n    opt.step()\n    {CALL}\n",
    "def {A}(model, loader):\n    opt = torch.optim.Adam(model.parameters())\n    for x in loader:\n        out = model(x)\n"
    "        out.mean().backward()\n        opt.step()\n        {CALL}\n",
    "{A}({MODEL}, {DS})\n",
    "if __name__ == '__main__':\n    {A}()\n",
    "class {C}:\n    def training_step(self, batch, i):\n        return {A}(batch)\n",
    "def {A}(x):\n    global model\n    model = {MODEL}\n    return model(x)\n",
]
ITEMS = ["self.x[i]", "torch.load(self.x[i])", "Image.open(self.x[i])", "{A}(self.x[i])", "np.load(self.x[i])"]
CALLS = ["{A}(out)", "{M}.{A}(out)", "print(loss.item())", "{A}(out, model)", "{A}(x)", "pass", "{M}.{A}(y)"]
DATASETS = ["{A}()", "{C}(8)", "{M}.{A}(8)", "{A}", "{M}.{C}()", "{A}.{B}", "dataset", "data", "{M}"]
MODELS = ["{C}()", "{M}.{C}()", "{A}()", "{A}", "{M}.{A}()", "torch.nn.Linear(4, 2)"]
WORKERS = ["", ", num_workers=0", ", num_workers=args.workers", ", num_workers=4", ", num_workers=1"]


@st.composite
def snippets(draw: st.DrawFn, modules: list[str]) -> str:
    """One import or one block, its placeholders filled from the shared pools."""
    names = st.sampled_from(NAMES)
    fill = {"A": draw(names), "B": draw(names), "C": draw(st.sampled_from(["Images", "Net", "Data", "dataset", "model"])),
            "M": draw(st.sampled_from(modules)), "N": draw(st.sampled_from(["0", "4"]))}
    nested = {"ITEM": ITEMS, "CALL": CALLS, "DS": DATASETS, "MODEL": MODELS, "WORKERS": WORKERS}
    fill.update({key: draw(st.sampled_from(options)).format(**fill) for key, options in nested.items()})
    template = draw(st.one_of(st.sampled_from(IMPORTS), st.sampled_from(SNIPPETS)))
    return template.format(**fill)


@st.composite
def projects(draw: st.DrawFn) -> dict[str, str]:
    """Two to four modules (one may sit in a package that re-exports it), each a few snippets."""
    modules = draw(st.lists(st.sampled_from(MODULES), min_size=2, max_size=4, unique=True))
    files: dict[str, str] = {}
    packaged = draw(st.sampled_from([None, *modules]))
    for module in modules:
        blocks = draw(st.lists(snippets(modules), min_size=1, max_size=6))
        head = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, Dataset\n" if draw(st.booleans()) else ""
        path = f"pkg/{module}.py" if module == packaged else f"{module}.py"
        files[path] = head + "\n".join(blocks)
    if packaged is not None:
        files["pkg/__init__.py"] = f"from .{packaged} import *\n"
    return files


def _checked(root: Path, given: list[Path]) -> None:
    config = from_table({"select": ["ALL"], "min-impact": "low"}, root)
    result = lint_paths(given, config, debug=True, project=True)  # debug: anything raised fails the example
    assert not result.errors, [f"{e.code} on {e.path}: {e.error}" for e in result.errors]


@settings(max_examples=40, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(projects())
def test_check_never_meets_an_internal_error_in_a_generated_project(files: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
        for name, text in files.items():
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_text(text)
        old = Path.cwd()
        os.chdir(root)
        try:
            _checked(root, [Path(".")])
            _checked(root, [Path(sorted(files)[0])])  # one file given, the rest its context
        finally:
            os.chdir(old)
