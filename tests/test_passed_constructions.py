"""What a step function is handed, followed to what this file's calls of it pass
(`ValueReturns.constructors_passed`, `LocalFunctions.passed_in_file`): TL310 reads the
optimizers a VITS-style `train_and_evaluate(..., [optim_g, optim_d], ...)` is given."""

import libcst as cst

from torchlint.analysis.context import FileContext

_CODE = '''
import torch

def run(net_g, net_d, loader):
    optim_g = torch.optim.AdamW(net_g.parameters())
    optim_d = torch.optim.AdamW(net_d.parameters())
    train(loader, [optim_g, optim_d], optim_d)

def train(loader, optims, alone):
    optim_g, optim_d = optims
    optim_d.zero_grad()
    alone.zero_grad()

def elsewhere(optims):
    optim_g, optim_d = optims
    optim_d.zero_grad()

def mixed(optims):
    optim_g, optim_d = optims
    optim_d.zero_grad()

mixed([torch.optim.SGD([]), torch.optim.Adam([])])
mixed(make_optimizers())
'''


def _made(ctx: FileContext, function: str, receiver: str) -> list[str]:
    calls = [c for c in ctx.tree.nodes(cst.Call) if isinstance(c.func, cst.Attribute) and c.func.attr.value == "zero_grad"
             and ctx.tree.enclosing_function(c).name.value == function and ctx.module.code_for_node(c.func.value) == receiver]
    (call,) = calls
    return [ctx.module.code_for_node(m) for m in ctx.values.constructors_passed(call.func.value, call)]


def test_an_unpacked_list_and_a_plain_parameter_are_what_the_file_passes() -> None:
    ctx = FileContext(cst.parse_module(_CODE), "m.py")
    assert _made(ctx, "train", "optim_d") == ["torch.optim.AdamW(net_d.parameters())"]
    assert _made(ctx, "train", "alone") == ["torch.optim.AdamW(net_d.parameters())"]


def test_nothing_where_no_call_is_in_sight_or_one_passes_something_else() -> None:
    ctx = FileContext(cst.parse_module(_CODE), "m.py")
    assert _made(ctx, "elsewhere", "optim_d") == []  # called by no code of this file
    assert _made(ctx, "mixed", "optim_d") == []  # one call passes a helper's result: not a list of constructions
