"""How often a model's own code runs per step (issue 32): once in each block of a container of one
class, each head a method's loop runs, each layer of a zip over the layers, and a module-level model's
forward reached through the functions that call it."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


BLOCK = """import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()
"""
NET = """import torch
import torch.nn as nn
from block import Block


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.layers = nn.ModuleList([Block(d), nn.Linear(d, d)])
{extra}
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return {ret}


model = Net(8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    model(x.cuda()).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize(("extra", "ret", "words"), [
    ("", "x", None),  # a list of several classes: each member's forward runs once
    ("        self.stack = nn.Sequential(*[Block(d) for _ in range(6)])\n", "self.stack(x)", "6 times per step: once in each `Block.forward()`"),
])
def test_containers_of_one_class_repeat_its_forward(tmp_path: Path, extra: str, ret: str, words: str | None) -> None:
    (tmp_path / "block.py").write_text(BLOCK)
    (tmp_path / "net.py").write_text(NET.format(extra=extra, ret=ret))
    found = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    [block] = found
    # inside forward: mid-step, one wait per step (medium); six blocks of one class: six waits per step (high)
    assert block.impact == ("high" if words else "medium") and "mid-step" in block.impact_reason or words
    assert (words in block.message) if words else "times per step" not in block.message and "per step)" not in block.message


GLOBAL_MODEL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        scale = y.abs().max().item()
        return self.fc(y / scale)


MODEL = Net().cuda()


def predict(x):
    return MODEL(x)


def shape_of(x):
    return tuple(x.shape)
"""


def test_a_loop_calling_a_function_of_a_module_level_model_is_an_inference_step(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(GLOBAL_MODEL)
    (tmp_path / "serve.py").write_text("import torch\nimport net\n\nfor x in requests:\n    y = net.predict(x.cuda())\n")
    found = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    [read] = found
    assert read.line == 12 and read.impact == "medium" and "mid-step" in read.impact_reason  # mid-forward: more layers follow it, once per step
    assert "called from `predict()`, run every step from a sampling loop" in read.message
    # a loop over a function that never runs the model is no step: the forward is not reached
    # (the forward's read still holds on every call of the model, once per call: medium, from no step)
    (tmp_path / "serve.py").write_text("import torch\nimport net\n\nfor x in requests:\n    y = net.shape_of(x.cuda())\n")
    [unreached] = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    assert unreached.line == 12 and unreached.impact == "medium" and "run every step" not in unreached.message
    assert "(every call of the model; no loop that runs it is visible)" in unreached.message


def test_functions_stored_in_a_dict_are_followed(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(GLOBAL_MODEL + "\n\ndef classify(x):\n    return MODEL(x).argmax().item()\n")
    (tmp_path / "serve.py").write_text("import torch\nfrom net import classify, shape_of\n\nHANDLERS = {'cls': classify, 'shape': shape_of}\n\n"
                                       "for x in requests:\n    out = HANDLERS[kind](x.cuda())\n")
    found = {f.line: f for f in lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings}
    assert set(found) == {12, 28}
    assert found[28].impact == "medium" and "in `classify()`" in found[28].message  # the handler's last work: the step's end


HEADS = """import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()


class Decoder(nn.Module):
    def __init__(self, d, n=4):
        super().__init__()
        self.n = n
        self.heads = nn.ModuleList([Head(d) for _ in range(n)])
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.predict(self.proj(x))

    def predict(self, x):
        outs = []
        for i in range(self.n):
            outs.append(self.heads[i](x[:, i]))
        return torch.stack(outs, 1)
"""


def test_a_loop_in_a_method_the_forward_calls_repeats_within_the_step(tmp_path: Path) -> None:
    """segment-anything's ``MaskDecoder.forward`` calls ``self.predict_masks``, whose loop runs a
    head per mask token: a loop within each call of the model, never a step of its own."""
    (tmp_path / "decoder.py").write_text(HEADS)
    (tmp_path / "serve.py").write_text("import torch\nfrom decoder import Decoder\n\nmodel = Decoder(8).cuda()\nfor x in requests:\n    y = model(x.cuda())\n")
    [read] = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)).findings
    assert read.line == 11 and read.impact == "high"  # mid-forward, 4 times per step; not an evaluation loop's low
    assert "called from `Decoder.predict()`" in read.message and "4 times per step: once in each `Head.forward()`" in read.message


PAIRS = """import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x) / x.abs().max().item()


class FF(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


class Sequence(nn.Module):
    def __init__(self, d, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([Attn(d), FF(d)]) for _ in range(depth)])

    def forward(self, x, args):
{loop}
            x = x + f(x, **f_args)
            x = x + g(x, **g_args)
        return x


model = Sequence(8, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    model(x.cuda(), [({{}}, {{}})] * 4).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("loop", [
    "        for (f, g), (f_args, g_args) in zip(self.layers, args):",
    # DALLE's SequentialSequence: the pairs made first, as a list, under a name of their own
    "        layers_and_args = list(zip(self.layers, args))\n        for (f, g), (f_args, g_args) in layers_and_args:",
])
def test_blocks_unpacked_from_a_zip_over_the_layers_run_once_per_layer(loop: str) -> None:
    config = from_table({"select": ["TL101"], "min-impact": "low"}, Path("."))
    [read] = lint_source(PAIRS.format(loop=loop), "net.py", config)
    assert read.line == 11 and read.impact == "high"
    assert "called from `Sequence.forward()`" in read.message and "per layer per step: once in each `Attn.forward()`" in read.message
