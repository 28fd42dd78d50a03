"""Settings off at their default (`Guards.option_off`), PPO's epoch loop inside its
iteration (`Loops.local_hot_loop`), and a parameter's default branch every call passes."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.multiplicity import Where
from torchlint.config import from_table
from torchlint.engine import lint_source

SETTINGS = '''
import argparse
from dataclasses import dataclass

DEBUG = False
VERBOSE = True

@dataclass
class Args:
    target_kl: float = None
    trace: bool = False
    clip: bool = True

parser = argparse.ArgumentParser()
parser.add_argument("--max-loss", type=float)
parser.add_argument("--need", type=float, required=True)
args = Args()
args.trace2 = None
'''


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def _option(code: str, test: str) -> str | None:
    ctx = _context(code + f"\nif {test}:\n    pass\n")
    branch = ctx.tree.nodes(cst.If)[-1]
    return ctx.guards.option_off(branch.test)


def test_a_setting_off_at_its_default_is_named_with_its_default() -> None:
    assert _option(SETTINGS, "args.target_kl is not None and kl > args.target_kl") == \
        "only when `args.target_kl` is set (it defaults to None)"
    assert _option(SETTINGS, "args.max_loss is not None") == "only when `args.max_loss` is set (it defaults to None)"


def test_a_setting_on_required_or_assigned_is_no_guard() -> None:
    assert _option(SETTINGS, "args.trace") is None  # a flag: no rare guard; the join lowers it (`Guards.run_flags`, test_run_flags_project)
    assert _option(SETTINGS, "DEBUG") is None
    assert _option(SETTINGS, "args.need is not None") is None  # required: always given
    assert _option(SETTINGS, "args.trace2 is not None") is None  # assigned in the file
    assert _option(SETTINGS, "args.target_kl is None") is None  # runs at the default
    assert _option(SETTINGS.replace("args = Args()", "args = Args()\nargs.target_kl = 0.02"), "args.target_kl is not None") is None


PPO = '''
import numpy as np
import torch
from torch import nn

agent = nn.Linear(8, 2).cuda()
optimizer = torch.optim.Adam(agent.parameters())
inds = np.arange(128)
for iteration in range(100):
    obs = torch.randn(128, 8, device="cuda")
    for step in range(128):  # the rollout: the iteration loop runs the agent
        with torch.no_grad():
            obs[step] = agent(obs[step]).sum()
    with torch.no_grad():
        next_value = agent(obs)  # bootstrapped in the iteration's own body
    for epoch in range(4):
        for start in range(0, 128, 32):
            loss = agent(obs[inds[start:start + 32]]).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(loss.item())
'''


def test_a_read_after_the_minibatches_of_an_epoch_inside_a_hot_loop_is_once_per_epoch() -> None:
    ctx = _context(PPO)
    reads = [c for c in ctx.tree.nodes(cst.Call) if ctx.method_name(c) == "item"]
    loop = ctx.loops.local_hot_loop(reads[0])
    assert type(loop) is cst.For and ctx.loops.where(loop) is Where.EPOCH
    findings = lint_source(PPO, "ppo.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    line = PPO.splitlines().index("        print(loss.item())") + 1
    assert [(f.line, f.impact) for f in findings] == [(line, "low")]
    assert "once per epoch" in findings[0].message and "times per step" not in findings[0].message


def test_minibatch_steps_inside_an_update_loop_are_steps_not_micro_batches() -> None:
    code = PPO.replace("        print(loss.item())\n", "").replace("            optimizer.step()\n", "            optimizer.step()\n            print(loss.item())\n")
    findings = lint_source(code, "ppo.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    line = code.splitlines().index("            print(loss.item())") + 1
    assert [(f.line, f.impact) for f in findings] == [(line, "medium")]


SAMPLER = '''import torch

TOP_P = 0.0


def sample(logits, top_p=1.0):
    probs = logits.softmax(-1)
    if top_p > 0:
        probs = probs / probs.sum().item()
    return torch.multinomial(probs, 1)


model = torch.nn.Linear(8, 8).cuda()
x = torch.zeros(1, 8, device="cuda")
for i in range(100):
    x = x + sample(model(x), TOP_P)
'''
OTHER = '''import torch
from sampler import sample

model = torch.nn.Linear(8, 8).cuda()
x = torch.zeros(1, 8, device="cuda")
for i in range(100):
    x = x + sample(model(x), 0.5)
'''


def test_a_branch_every_call_of_its_file_skips_is_opt_in_unless_another_file_calls_it(tmp_path: Path) -> None:
    """`if top_p > 0:` with every call passing `TOP_P = 0.0`: an opt-in path (low) while the
    file's own calls are all of the project's (`Guards.never_taken`, `Conditional.off_here`);
    another file's `sample(..., 0.5)` takes the branch every step: medium again."""
    from torchlint.engine import lint_paths

    (tmp_path / "sampler.py").write_text(SAMPLER)
    config = from_table({"select": ["TL101"]}, tmp_path)

    def read() -> tuple[str, str]:
        found = {f.line: (f.impact, f.impact_reason) for f in lint_paths([tmp_path], config).findings if Path(f.path).name == "sampler.py"}
        return found[9]

    impact, reason = read()
    assert impact == "low" and "in every call of `sample()`, `TOP_P` = 0.0 fails `top_p > 0`" in reason
    (tmp_path / "other.py").write_text(OTHER)
    impact, reason = read()
    assert impact == "medium" and "TOP_P" not in reason


def _flags(code: str, test: str) -> tuple[tuple[str, bool], ...]:
    ctx = _context(code + f"\ndef step(opts):\n    for _ in range(9):\n        if {test}:\n            run()\n        else:\n            other()\n")
    return ctx.guards.run_flags(ctx.tree.nodes(cst.Call)[-2])


def test_the_run_flags_a_call_waits_for() -> None:
    # a field off here, known off; another namespace's flag, for the join to look up where it is parsed
    assert _flags(SETTINGS, "args.trace") == (("args.trace", True, True),)
    assert _flags(SETTINGS, "opts.gail and x > 0") == (("opts.gail", False, True),)
    assert _flags(SETTINGS, "args.clip") == ()  # on by default here
    assert _flags(SETTINGS, "args.trace2") == ()  # assigned in the file
    assert _flags(SETTINGS, "args.trace == 'on'") == ()  # a comparison: `option_off`'s
    assert _flags(SETTINGS, "not opts.amp") == ()  # holds at a false default


def test_a_flag_outside_loops_counts_for_the_line_itself_only() -> None:
    code = SETTINGS + "\ndef main(opts):\n    if opts.subset:\n        make()\n    if opts.do_train:\n        for x in xs:\n            step(x)\n"
    ctx = _context(code)
    make, step = ctx.tree.nodes(cst.Call)[-2], ctx.tree.nodes(cst.Call)[-1]
    # a call outside loops may run a whole training loop elsewhere (`if args.do_train: trainer.train()`): the run's mode
    assert ctx.guards.run_flags(make) == (("opts.subset", False, False),)
    # the line itself, setup the run may leave out (ogb's `if args.train_subset: train_loader = DataLoader(...)`)
    assert ctx.guards.run_flags(make, direct=True) == (("opts.subset", False, True),)
    # a whole loop under the flag: the run's mode, whatever the line
    assert ctx.guards.run_flags(step, direct=True) == (("opts.do_train", False, False),)
