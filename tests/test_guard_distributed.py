"""Reads run only in a multi-process run are one tier lower (analysis/guard_distributed.py),
in their own file and through the join when the helper is in another file."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.guard_distributed import multi_process_test, one_process_test
from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.mark.parametrize("test", ["world_size > 1", "dist.get_world_size() > 1", "dist.is_initialized()", "torch.distributed.is_initialized()",
                                  "is_dist_avail_and_initialized()", "self.multi_gpu", "args.distributed", "args.local_rank != -1",
                                  "1 < self.world_size", "dist.is_initialized() and step > 0"])
def test_multi_process_tests(test: str) -> None:
    assert multi_process_test(cst.parse_expression(test)) and not one_process_test(cst.parse_expression(test))


@pytest.mark.parametrize("test", ["rank == 0", "args.n_gpu > 1", "dist.is_initialized() or force", "world_size > 0", "is_main_process()"])
def test_near_misses_hold_in_one_process(test: str) -> None:
    assert not multi_process_test(cst.parse_expression(test))


@pytest.mark.parametrize("test", ["world_size == 1", "get_world_size() < 2", "not dist.is_initialized()", "not is_distributed() or not params"])
def test_one_process_exits(test: str) -> None:
    assert one_process_test(cst.parse_expression(test))


HELPER = '''import torch
import torch.distributed as dist


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce_mean(x):
    world_size = get_world_size()
    if world_size > 1:
        x_reduce = torch.tensor(x).cuda()
        dist.all_reduce(x_reduce)
        return x_reduce.item()
    return x


def value_of(x):
    return x.item()
'''

TRAIN = '''import torch
from misc import all_reduce_mean, value_of


def train(model, loader, opt, args):
    model.cuda()
    for x in loader:
        loss = model(x.cuda()).mean()
        loss.backward()
        opt.step()
        all_reduce_mean(1.0)
        if args.distributed:
            value_of(loss)
'''


def test_a_helper_in_another_file_is_lowered_through_the_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "misc.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    assert not result.errors
    found = {(Path(f.path).name, f.line): f for f in result.findings}
    # the helper's own guard (`if world_size > 1:`), and a guard at the call site (`if args.distributed:`)
    assert found[("misc.py", 14)].impact == "low" and "only in a multi-process run (`if world_size > 1:`)" in found[("misc.py", 14)].impact_reason
    assert found[("misc.py", 19)].impact == "low" and "only in a multi-process run (`if args.distributed:`)" in found[("misc.py", 19)].impact_reason


def _results(path: str, text: str):  # type: ignore[no-untyped-def]
    from torchlint.analysis.context import Options
    from torchlint.checks import all_checks
    from torchlint.engine.runner import run_checks
    from torchlint.engine.source import Source

    return run_checks(Source(path, text), [c for c in all_checks() if c.code == "TL101"], Options())


def test_the_fact_is_a_field_set_where_the_words_are_made() -> None:
    # the helper's reads wait for the join: each carries its guard's words and, beside them, the fact
    helper = {condition.finding.location.line: condition for condition in _results("misc.py", HELPER).conditional}
    assert helper[14].distributed_only and helper[14].guard == "only in a multi-process run (`if world_size > 1:`)"
    assert not helper[19].distributed_only and helper[19].guard == ""
    # the call under `if args.distributed:`: its site carries both to what it runs
    calls = {call.target: call for call in _results("train.py", TRAIN).summary.calls if call.caller == "train"}
    assert calls[("import", 0, "misc.value_of")].distributed_only
    assert calls[("import", 0, "misc.value_of")].guard == "only in a multi-process run (`if args.distributed:`)"
    assert not calls[("import", 0, "misc.all_reduce_mean")].distributed_only


def test_the_tier_follows_the_field_not_the_words() -> None:
    from torchlint.analysis.impact import Cost, assess, per_call
    from torchlint.analysis.multiplicity import ONCE_PER_STEP, Place, Where

    words = "only in a multi-process run (`if world_size > 1:`)"
    plain, lowered = assess(Cost.SYNC, Place(Where.TRAIN, guard=words)), assess(Cost.SYNC, Place(Where.TRAIN, guard=words, distributed_only=True))
    assert (plain[0], lowered[0]) == ("medium", "low") and "the other ranks" in lowered[1] and "the other ranks" not in plain[1]
    assert per_call(Cost.SYNC, ONCE_PER_STEP, guard=words)[0] == "medium"  # type: ignore[index]
    assert per_call(Cost.SYNC, ONCE_PER_STEP, guard=words, distributed_only=True)[0] == "low"  # type: ignore[index]
