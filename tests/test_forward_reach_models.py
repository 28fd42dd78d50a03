"""A model no step in the project is seen to call (built from a config or a registry, a
library's model) still runs its ``forward`` on every call of whoever uses it: a wait in that
forward, or in what it calls, is reported on every call of the model (``Steps.models``,
``impact.per_call``), high where each call repeats it (per frame, once in each block),
medium once per call. Near misses stay quiet: a file the steps reach into, a class that is
no module, a logging guard, a model some step does run (reported from that step)."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

HEAD = "import torch\nfrom torch import nn\n\n\n"
BLOCK = ("class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n\n"
         "    def forward(self, x):\n        return self.fc(x)\n\n\n")
# KAIR's RVRT: long videos are reconstructed frame by frame, each frame read back to the host.
VIDEO = (
    "class Video(nn.Module):\n    def __init__(self, cache_length=100):\n        super().__init__()\n"
    "        self.body = Block()\n        self.cache_length = cache_length\n\n"
    "    def forward(self, lqs):\n        self.cpu_cache = lqs.size(1) > self.cache_length\n"
    "        return self.upsample(lqs, self.body(lqs))\n\n"
    "    def upsample(self, lqs, feats):\n        if self.cpu_cache:\n            outputs = []\n"
    "            for i in range(0, feats.shape[1]):\n                hr = self.body(feats[:, i].cuda())\n"
    "                outputs.append(hr.cpu())  # per frame\n            return torch.cat(outputs, dim=1)\n"
    "        return self.body(feats)\n\n\n"
)
SELECT = ["TL101", "TL102", "TL103", "TL113", "TL114"]


def _found(text: str) -> list[tuple[str, str, str]]:
    lines = text.splitlines()
    findings = lint_source(text, "net.py", from_table({"select": SELECT}, Path(".")))
    return [(lines[f.line - 1].rsplit("# ", 1)[-1], f.impact, f.message) for f in findings]


def test_a_read_per_frame_in_a_method_the_forward_of_an_unreached_model_calls() -> None:
    [(where, impact, message)] = _found(HEAD + BLOCK + VIDEO)
    assert (where, impact) == ("per frame", "high")
    assert "`Video.upsample()` (called from `Video.forward()`, on every call of the model `Video.forward()`" in message
    assert "per iteration per model call" in message


def test_one_read_per_call_is_medium() -> None:
    model = ("class Gate(nn.Module):\n    def forward(self, x):\n        x = x.cuda()\n"
             "        keep = x.sum().item()  # once\n        return x * keep\n")
    [(where, impact, message)] = _found(HEAD + model)
    assert (where, impact) == ("once", "medium")
    assert "`Gate.forward()` (every call of the model; no loop that runs it is visible)" in message


def test_a_read_in_each_block_counts_the_blocks() -> None:
    model = (
        "class Noisy(nn.Module):\n    def forward(self, x):\n        x = x.cuda()\n        print(x.max().item())  # each block\n        return x\n\n\n"
        "class Stack(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.blocks = nn.ModuleList([Noisy() for _ in range(12)])\n\n"
        "    def forward(self, x):\n        for block in self.blocks:\n            x = block(x)\n        return x\n"
    )
    [(where, impact, message)] = _found(HEAD + model)
    assert (where, impact) == ("each block", "high")
    # the model that runs the blocks is named (Noisy, defined first, is no model of its own here)
    assert "`Noisy.forward()` (called from `Stack.forward()`, on every call of the model `Stack.forward()`" in message
    assert "12 times per model call: once in each `Noisy.forward()`" in message


def test_a_model_some_step_runs_is_reported_from_that_step_alone() -> None:
    train = "def main(loader):\n    model = Video().cuda()\n    for x in loader:\n        model(x.cuda()).sum().backward()\n"
    [(where, impact, message)] = _found(HEAD + BLOCK + VIDEO + train)
    assert "run every step from a training loop" in message and "every call of the model" not in message


def test_a_model_in_a_file_the_steps_reach_into_stays_quiet() -> None:
    # the steps use this file's Block, never Video: Video is not part of any step seen here
    train = "def main(loader):\n    model = Block().cuda()\n    for x in loader:\n        model(x.cuda()).sum().backward()\n"
    assert _found(HEAD + BLOCK + VIDEO + train) == []


def test_a_read_under_a_logging_guard_stays_quiet() -> None:
    model = ("class Logged(nn.Module):\n    def forward(self, x, step=0):\n        x = x.cuda()\n"
             "        if step % 100 == 0:\n            print(x.sum().item())\n        return x\n")
    assert _found(HEAD + model) == []


def test_a_forward_of_a_class_that_is_no_module_stays_quiet() -> None:
    plain = "class Runner:\n    def forward(self, x):\n        x = x.cuda()\n        return x.sum().item()\n"
    assert _found(HEAD + plain) == []


def test_module_ness_through_a_base_in_another_file(tmp_path: Path) -> None:
    (tmp_path / "base.py").write_text(HEAD + "class Base(nn.Module):\n    pass\n\n\nclass Plain:\n    pass\n")
    model = ("class {name}({base}):\n    def forward(self, x):\n        x = x.cuda()\n        return x * x.sum().item()\n\n\n")
    (tmp_path / "net.py").write_text("import torch\nfrom base import Base, Plain\n\n\n"
                                     + model.format(name="Model", base="Base") + model.format(name="Helper", base="Plain"))
    findings = lint_paths([tmp_path], from_table({"select": SELECT}, tmp_path)).findings
    assert [(Path(f.path).name, f.line, f.impact) for f in findings] == [("net.py", 8, "medium")]  # Model's, not Helper's


def test_a_model_in_test_code_reaches_nothing(tmp_path: Path) -> None:
    # detectron2's export tests wrap a head in a module `M` inside a `Test…` class: a test's toy model
    (tmp_path / "lib.py").write_text("import torch\n\n\ndef post(x):\n    return x.cuda().sum().item()\n")
    (tmp_path / "check_lib.py").write_text(
        "import unittest\nimport torch\nfrom torch import nn\nfrom lib import post\n\n\n"
        "class TestPost(unittest.TestCase):\n    def test_it(self):\n        class M(nn.Module):\n"
        "            def forward(self, x):\n                return post(x)\n\n        M()(torch.ones(2))\n"
    )
    assert lint_paths([tmp_path], from_table({"select": SELECT}, tmp_path)).findings == []


def test_the_model_that_repeats_a_shared_helper_is_the_one_named() -> None:
    # detectron2's pooler helper: one model calls it once, another once per stage; the count
    # and the model named in the words come from the same reach
    model = (
        "def boxes_to_rois(x):\n    return x.cuda() * x.cuda().sum().item()  # helper\n\n\n"
        "class Once(nn.Module):\n    def forward(self, x):\n        return boxes_to_rois(x)\n\n\n"
        "class Staged(nn.Module):\n    def forward(self, x):\n        for stage in range(3):\n            x = boxes_to_rois(x)\n        return x\n"
    )
    [(where, impact, message)] = _found(HEAD + model)
    assert (where, impact) == ("helper", "high")
    assert "on every call of the model `Staged.forward()`" in message and "3 times per model call" in message


def test_a_read_behind_a_debug_parameter_off_by_default_is_not_reported() -> None:
    """stylegan2-ada's ``AugmentPipe.forward(self, images, debug_percentile=None)``: the reads
    under ``if debug_percentile is not None:`` run only when a caller passes it, and whoever
    calls the model is not seen; its rebinding under that same test keeps it off by default.
    The read outside the guard is still reported (near miss)."""
    model = ("class Augment(nn.Module):\n    def forward(self, x, debug_percentile=None):\n        x = x.cuda()\n"
             "        if debug_percentile is not None:\n            debug_percentile = torch.as_tensor(debug_percentile, device=x.device)\n"
             "        p = torch.rand([x.size(0)], device=x.device)\n"
             "        if debug_percentile is not None:\n            p = torch.full_like(p, debug_percentile.item())  # debug\n"
             "        keep = p.sum().item()  # once\n        return x * keep\n")
    assert [(where, impact) for where, impact, _ in _found(HEAD + model)] == [("once", "medium")]


# StyleTTS2's iSTFTNet: the vocoder keeps an alternative path `fw_phase` that no code calls,
# looping over its own blocks; its decoder uploads a smoothing kernel in every training forward.
VOCODER = (
    "class Generator(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.blocks = nn.ModuleList([Block() for _ in range(3)])\n\n"
    "    def forward(self, x):\n        return self.blocks[0](x)\n\n"
    "    def fw_phase(self, x):\n        for i in range(3):\n            x = self.blocks[i](x){extra}\n        return x\n\n\n"
    "class Decoder(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.generator = Generator()\n\n"
    "    def forward(self, f0):\n        f0 = f0.cuda()\n        f0 = f0 * torch.ones(1, 1, 3).to('cuda')  # smoothing\n"
    "        return self.generator(f0)\n"
)


def test_a_method_looping_over_its_own_layers_is_no_step_loop() -> None:
    """iSTFTNet's ``Generator.fw_phase`` runs the module's own blocks in a loop: part of a
    model's computation, not a step. Taken for a step loop it made the file "reached by a
    step", and the decoder's per-forward upload fell to once (low) where the identical
    HiFi-GAN decoder, in a file without such a method, was medium on every call of the model."""
    found = lint_source(HEAD + BLOCK + VOCODER.format(extra=""), "net.py", from_table({"select": ["TL110"]}, Path(".")))
    assert [(f.line, f.impact) for f in found] == [(len((HEAD + BLOCK + VOCODER).splitlines()) - 1, "medium")]
    assert "on every call of the model" in found[0].impact_reason


def test_a_module_method_that_trains_in_its_loop_still_steps() -> None:
    # near miss: an agent module whose method loops over batches with a backward and a step is a training loop
    extra = "\n            x.sum().backward()\n            self.opt.step()"
    found = lint_source(HEAD + BLOCK + VOCODER.format(extra=extra), "net.py", from_table({"select": ["TL110"]}, Path(".")))
    assert [f.impact for f in found] == ["low"]  # the file is reached by that loop: the decoder's forward is not seen to run per step
