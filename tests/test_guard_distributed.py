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
