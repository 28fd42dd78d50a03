"""Review 18's minRF miss: the member a loop unpacks from a list of pairs built elsewhere in
the file (a method's return, a returned dict's entry) is a device tensor where the pair's
member was a row of one (`analysis/item_members.py`), and is not where it was read first."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import FileContext, Options

FLOW = """
import torch

class Flow:
    def __init__(self, model):
        self.model = model

    def forward(self, x):
        t = torch.rand(x.size(0), device=x.device)
        losses = self.model(x, t).mean(1).tolist()
        pairs = [(tv, lv) for tv, lv in zip(t, losses)]
        listed = [(tv, lv) for tv, lv in zip(t.tolist(), losses)]
        return t.sum(), pairs, {"pairs": pairs, "listed": listed}

def train(model, loader):
    flow = Flow(model)
    for x in loader:
        loss, pairs, info = flow.forward(x.cuda())
        for a, b in pairs:
            use(a, b)
        for c, d in info["pairs"]:
            use(c, d)
        for e, f in info["listed"]:
            use(e, f)
        again = [(g, h) for g, h in pairs]
        while again:
            again = [(g, h) for g, h in again]
            for i, j in again:
                use(i, j)
"""


def _device_names(code: str) -> dict[str, bool]:
    """Each argument of a ``use(...)`` call: is it a device tensor there?"""
    ctx = FileContext(cst.parse_module(code), "m.py", Options())
    found = {}
    for call in ctx.tree.nodes(cst.Call):
        if type(call.func) is cst.Name and call.func.value == "use":
            for arg in call.args:
                found[arg.value.value] = ctx.syncs.device_tensor(arg.value, call)
    return found


def test_members_of_returned_pairs() -> None:
    device = _device_names(FLOW)
    # the rows of `t`, through the method's return and through the returned dict's key
    assert device["a"] and device["c"]
    # the Python floats beside them, and rows read first with `.tolist()`
    assert not device["b"] and not device["d"] and not device["e"] and not device["f"]
    # a list remade from itself in a loop: followed to the pairs it came from, and the search ends
    assert device["i"] and not device["j"]


def test_a_call_of_the_object_runs_forward() -> None:
    code = FLOW.replace("class Flow:", "class Flow(torch.nn.Module):").replace("flow.forward(x.cuda())", "flow(x.cuda())")
    assert _device_names(code)["a"]


def test_pairs_not_made_in_sight() -> None:
    # a parameter's pairs: what the caller passes is not in sight, so nothing is claimed
    code = "def report(pairs):\n    for a, b in pairs:\n        use(a, b)\n"
    assert _device_names(code) == {"a": False, "b": False}


def test_through_a_wrapping_engine() -> None:
    # minRF's main_t2i: the module handed to deepspeed's engine, whose call runs its forward
    code = ("import deepspeed\n" + FLOW.replace("class Flow:", "class Flow(torch.nn.Module):")
            .replace("    flow = Flow(model)\n", "    flow = Flow(model).cuda()\n    engine, opt, _, _ = deepspeed.initialize(model=flow, config={})\n")
            .replace("flow.forward(x.cuda())", "engine(x.cuda())"))
    device = _device_names(code)
    assert device["a"] and device["c"] and not device["b"]
