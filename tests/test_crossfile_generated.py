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
# Names by role, each pool overlapping the next: a dataset maker named like a model, a
# helper like a training function, a module like a dataset ("data", "utils").
ROLES = {
    "D": ["dataset", "data", "Images"],  # a dataset: class, factory function, or whatever shadows it
    "K": ["Net", "model", "build", "Images"],  # a model: class or factory
    "H": ["acc", "helper", "step", "utils"],  # a helper a step calls
    "T": ["train", "fit", "step"],  # a function holding a training loop
}
IMPORTS = [
    "import torch", "import torch.nn as nn", "from torch.utils.data import DataLoader, Dataset, TensorDataset",
    "import argparse", "from PIL import Image", "import numpy as np",
    "from {M} import {D}", "from {M} import {K}", "from {M} import {H}", "from {M} import {T}", "from {M} import {D} as {K}",
    "import {M}", "import {M} as {D}", "from {M} import *", "from .{M} import {H}", "from . import {M}",
]
DEFINITIONS = [
    # datasets: a class (cheap, heavy, or calling a helper), a stream, a factory function
    "class {D}(Dataset):\n    def __init__(self, n=8):\n        self.x = torch.randn(n, 4)\n\n    def __len__(self):\n"
    "        return len(self.x)\n\n    def __getitem__(self, i):\n        return {ITEM}\n",
    "class {D}(torch.utils.data.IterableDataset):\n    def __iter__(self):\n        for p in self.paths:\n            yield torch.load(p)\n",
    "def {D}(n=8):\n    return TensorDataset(torch.randn(n, 4))\n",
    "def {D}(n=8):\n    return {M}.{D}(n)\n",
    "def {D}(paths=()):\n    return DataLoader({DS}, batch_size=8{WORKERS})\n",
    # names bound to something else than they look
    "{D} = {H}\n", "{D} = {M}.{D}\n", "{K} = {D}()\n", "{D} = lambda *a: {K}(*a)\n", "{D} = {M}\n", "{H} = {T}\n",
    # models
    "class {K}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 2)\n"
    "        self.sub = {D}()\n\n    def forward(self, x):\n        y = self.fc(x)\n        {CALL}\n        return y\n",
    "class {K}(torch.nn.Module):\n    def forward(self, x):\n        for layer in self.layers:\n            x = layer(x)\n"
    "        return {H}(x)\n",
    "def {K}():\n    return {M}.{K}()\n",
    # helpers
    "def {H}(x):\n    return x.item()\n",
    "def {H}(x, model=None):\n    if model is None:\n        return x.sum().item()\n    return {T}(model(x))\n",
    "def {H}(out):\n    if out.sum() > 0:\n        print(out.cpu())\n    return {M}.{H}(out)\n",
    "def {H}(*args, **kwargs):\n    return {M}.{H}(*args, **kwargs)\n",
    "def {T}(x):\n    global model\n    model = {MODEL}\n    return model(x)\n",
]
_TRAIN = ("def {T}(model, loader):\n    opt = torch.optim.Adam(model.parameters())\n    for x in loader:\n        out = model(x)\n"
          "        out.mean().backward()\n        opt.step()\n        {CALL}\n")
_LOOP = ("model = {MODEL}\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n    out = model(x.cuda())\n"
         "    loss = out.sum()\n    loss.backward()\n    opt.step()\n    {CALL}\n")
_ARGS = "parser = argparse.ArgumentParser()\nparser.add_argument('--workers', type=int, default={N})\nargs = parser.parse_args()\n"
# What runs: a script's loop, a main() that builds the loader and hands it to a training
# function (here or in a sibling module), a training function others call, a framework hook.
ENTRIES = [
    "",
    "loader = DataLoader({DS}, batch_size=8{WORKERS})\n" + _LOOP,
    "import argparse\n" + _ARGS + "loader = DataLoader({DS}, batch_size=8, num_workers=args.workers)\n" + _LOOP,
    _TRAIN + "\n\ndef main():\n    data = {DS}\n    loader = DataLoader(data, batch_size=8{WORKERS})\n    {T}({MODEL}, loader)\n"
    "\n\nif __name__ == '__main__':\n    main()\n",
    "def main():\n    data = {DS}\n    loader = DataLoader(data, batch_size=8{WORKERS})\n    {M}.{T}({MODEL}, loader)\n",
    _TRAIN,
    "{T}({MODEL}, DataLoader({DS}, batch_size=8{WORKERS}))\n",
    "for x in {D}():\n    out = model(x.cuda())\n    out.sum().backward()\n    opt.step()\n",
    "class {K}:\n    def training_step(self, batch, i):\n        return {H}(batch)\n",
]
ITEMS = ["self.x[i]", "torch.load(self.x[i])", "Image.open(self.x[i])", "{H}(self.x[i])", "np.load(self.x[i])"]
CALLS = ["{H}(out)", "{M}.{H}(out)", "print(loss.item())", "{H}(out, model)", "{H}(x)", "pass", "{M}.{T}(y)"]
DATASETS = ["{D}()", "{D}(8)", "{M}.{D}(8)", "{D}", "{M}.{D}()", "{M}", "{D}.{H}"]
MODELS = ["{K}()", "{M}.{K}()", "{K}", "{M}.{K}()", "torch.nn.Linear(4, 2)"]
WORKERS = ["", ", num_workers=0", ", num_workers=args.workers", ", num_workers=4", ", num_workers=1"]


def _filled(draw: st.DrawFn, template: str, modules: list[str], names: dict[str, str]) -> str:
    """``template`` with its placeholders filled: mostly the project's ``names`` for each
    role (a dataset defined here is the one a loader there builds), else any of the pool."""
    fill = {role: names[role] if draw(st.integers(0, 3)) else draw(st.sampled_from(pool)) for role, pool in ROLES.items()}
    fill.update(M=draw(st.sampled_from(modules)), N=draw(st.sampled_from(["0", "4"])))
    nested = {"ITEM": ITEMS, "CALL": CALLS, "DS": DATASETS, "MODEL": MODELS, "WORKERS": WORKERS}
    fill.update({key: draw(st.sampled_from(options)).format(**fill) for key, options in nested.items()})
    return template.format(**fill)


@st.composite
def modules_text(draw: st.DrawFn, modules: list[str], names: dict[str, str]) -> str:
    """A module as projects write them: imports, definitions, then what runs."""
    head = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, Dataset, TensorDataset\n" if draw(st.booleans()) else ""
    parts = [*draw(st.lists(st.sampled_from(IMPORTS), max_size=3)), *draw(st.lists(st.sampled_from(DEFINITIONS), max_size=4)),
             draw(st.sampled_from(ENTRIES))]
    return head + "\n".join(_filled(draw, part, modules, names) for part in parts)


@st.composite
def projects(draw: st.DrawFn) -> dict[str, str]:
    """Two to four modules (one may sit in a package that re-exports it)."""
    modules = draw(st.lists(st.sampled_from(MODULES), min_size=2, max_size=4, unique=True))
    files: dict[str, str] = {}
    packaged = draw(st.sampled_from([None, *modules]))
    names = {role: draw(st.sampled_from(pool)) for role, pool in ROLES.items()}
    for module in modules:
        files[f"pkg/{module}.py" if module == packaged else f"{module}.py"] = draw(modules_text(modules, names))
    if packaged is not None:
        files["pkg/__init__.py"] = f"from .{packaged} import *\n"
    return files


def _checked(root: Path, given: list[Path]) -> None:
    config = from_table({"select": ["ALL"], "min-impact": "low"}, root)
    result = lint_paths(given, config, debug=True, project=True)  # debug: anything raised fails the example
    assert not result.errors, [f"{e.code} on {e.path}: {e.error}" for e in result.errors]


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
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
