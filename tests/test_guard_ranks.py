"""Main-process guards (analysis/guard_ranks.py): `if rank == 0:` runs on every step, on one
process, so a read under it keeps the every-step tier, in its own file and through the join,
with words that say so; a test of one step (`step == 0`) or a modulo stays every-N."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.guard_ranks import main_process_test
from torchlint.analysis.guard_shapes import is_rare_test
from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.mark.parametrize("test", ["rank == 0", "0 == rank", "dist.get_rank() == 0", "self.global_rank == 0", "local_rank in (-1, 0)",
                                  "args.local_rank in [-1, 0]", "accelerator.is_main_process", "is_main_process()", "trainer.is_global_zero",
                                  "accelerator.process_index == 0"])
def test_main_process_tests_are_every_step(test: str) -> None:
    expression = cst.parse_expression(test)
    assert main_process_test(expression) and not is_rare_test(expression, lambda n: ())


@pytest.mark.parametrize("test", ["step == 0", "rank == 1", "rank < 2", "local_rank in (1, 2)", "self.is_training"])
def test_near_misses_are_no_main_process_test(test: str) -> None:
    assert not main_process_test(cst.parse_expression(test))


def test_one_particular_step_and_a_modulo_stay_rare() -> None:
    for test in ("step == 0", "rank == 0 and step % 100 == 0"):
        expression = cst.parse_expression(test)
        assert is_rare_test(expression, lambda n, e=expression: [x for x in _walk(e)])


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    for child in node.children:
        found += [child, *_walk(child)]
    return found


HELPER = '''def log_loss(loss):
    print(loss.item())


def log_often(loss):
    print(loss.item())
'''

TRAIN = '''import torch.distributed as dist
from logs import log_loss, log_often


def train(model, loader, opt):
    for i, x in enumerate(loader):
        loss = model(x.cuda()).mean()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            log_loss(loss)
        if i % 100 == 0:
            log_often(loss)
'''


def test_a_helper_called_on_the_main_process_keeps_its_tier_through_the_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    assert not result.errors
    found = {(Path(f.path).name, f.line): f for f in result.findings}
    main = found[("logs.py", 2)]
    assert main.impact == "medium" and "on the main process (`if dist.get_rank() == 0:`)" in main.impact_reason
    assert ("logs.py", 6) not in found  # every 100 steps: every-N, below the rule's floor
