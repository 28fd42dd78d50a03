"""The words of a finding reached from two callers as often name the one that needs no mode of the run
(issue 32, review 20's ppo2): `RolloutStorage.feed_forward_generator()` runs from PPO's update on every
step, and from GAIL's discriminator only under `if args.gail:`; the message named the discriminator,
the first reach the join met (its training loop calls it first)."""

from __future__ import annotations

from collections import deque

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext
from torchlint.analysis.join_spread import _spread
from torchlint.analysis.join_steps import StepInfo
from torchlint.analysis.multiplicity import Multiplicity, Repeat, Where
from torchlint.findings import Location

_GAIL = StepInfo("a training loop", (Location("main.py", 149, 1),), Where.TRAIN, via="Discriminator.update", run_mode=True,
                 per_step=Multiplicity((Repeat("iteration"),)))
_PPO = StepInfo("a training loop", (Location("main.py", 160, 1),), Where.TRAIN, via="PPO.update",
                per_step=Multiplicity((Repeat("iteration"),)))


def _words(*reaches: StepInfo) -> StepInfo:
    steps: dict[str, dict[str, StepInfo]] = {}
    work = deque(("storage.py", "RolloutStorage.feed_forward_generator", reach) for reach in reaches)
    _spread(None, work, steps, {}, {}, {})  # type: ignore[arg-type]
    return steps["storage.py"]["RolloutStorage.feed_forward_generator"]


def test_a_reach_without_a_mode_of_the_run_takes_the_words() -> None:
    found = _words(_GAIL, _PPO)
    assert found.via == "PPO.update" and found.sites[0].line == 160 and not found.run_mode
    assert "called from `PPO.update()`" in found.text("RolloutStorage.feed_forward_generator", "storage.py")


def test_the_first_reach_keeps_the_words_when_neither_needs_a_mode() -> None:
    from dataclasses import replace
    assert _words(replace(_GAIL, run_mode=False), _PPO).via == "Discriminator.update"


def test_a_reach_under_a_mode_that_repeats_more_keeps_the_words() -> None:
    from dataclasses import replace
    hotter = replace(_GAIL, per_step=Multiplicity((Repeat("iteration"), Repeat("element"))))
    assert _words(hotter, _PPO).via == "Discriminator.update"


@pytest.mark.parametrize(("test", "under"), [
    ("args.gail", True),
    ("args.gail and step > 3", True),
    ("not args.gail", False),  # (the mode's absence: what runs by default)
    ("flag", False),  # a local name: no setting of the run
])
def test_a_call_under_a_settings_truth_test_runs_in_a_mode_of_the_run(test: str, under: bool) -> None:
    source = f"def main(args, step, flag):\n    for j in range(9):\n        if {test}:\n            discr.update(rollouts)\n"
    ctx = FileContext(cst.parse_module(source), "main.py")
    call = next(c for c in ctx.tree.nodes(cst.Call) if ctx.module.code_for_node(c.func) == "discr.update")
    assert ctx.guards.under_run_mode(call) is under
