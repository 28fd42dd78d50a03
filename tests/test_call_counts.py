"""A helper called from several sure call sites of one step runs that many times per step (analysis/join_counts.py):
summed over its callers, the larger arm of an if/else, not across steps, not through a rare guard (fixtures/projects/callcount)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.analysis.arms_counts import arms_count, arms_sum
from torchlint.analysis.call_arms import call_arms
from torchlint.analysis.tree import Tree
from torchlint.config import from_table
from torchlint.engine import lint_paths


def _findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, tuple[str, str]] | None = None):  # type: ignore[no-untyped-def]
    root = copied_project("callcount", tmp_path, edits)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL113"], "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_markers_hold(*_findings(tmp_path, monkeypatch))


def test_the_sampling_helper_says_its_callers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, findings = _findings(tmp_path, monkeypatch)
    extract = next(f for f in findings if f.path.endswith("sampler.py"))
    assert extract.message.endswith("(8 times per denoising step: from 4 calls in `Sampler.posterior()`, "
                                    "2 in `Sampler.mean_variance()`, 2 in `Sampler.predict_start()`)")


def test_two_calls_outside_the_if_else_add_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edits = {"schedule.py": ("        return lookup(COSINE, t)\n    else:\n        return lookup(LINEAR, t)",
                             "        pass\n    return lookup(COSINE, t) + lookup(LINEAR, t)")}
    _, findings = _findings(tmp_path, monkeypatch, edits)
    lookup = next(f for f in findings if f.path.endswith("schedule.py") and f.line == 10)
    # (two are a few: the second copy, side by side with the first, waits only for its own small kernels; the
    # message says both, the tier stays one wait's)
    assert lookup.impact == "medium" and "(2 times per step: from 2 calls in `noise_scale()`)" in lookup.message


def test_five_calls_in_one_step_are_high(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edits = {"schedule.py": ("        return lookup(COSINE, t)\n    else:\n        return lookup(LINEAR, t)",
                             "        pass\n    return lookup(COSINE, t) + lookup(LINEAR, t) + lookup(COSINE, t) "
                             "+ lookup(LINEAR, t) + lookup(COSINE, t) + lookup(LINEAR, t)")}
    _, findings = _findings(tmp_path, monkeypatch, edits)
    lookup = next(f for f in findings if f.path.endswith("schedule.py") and f.line == 10)
    assert lookup.impact == "high" and "(6 times per step: from 6 calls in `noise_scale()`)" in lookup.message


def test_an_if_else_of_two_helpers_that_both_call_it_runs_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the larger side of the chain, key by key through the helpers, not one count per helper: improved-diffusion's
    # `optimize_fp16()` or `optimize_normal()`, each calling `_log_grad_norm()`)
    edits = {"schedule.py": ("        return lookup(COSINE, t)\n    else:\n        return lookup(LINEAR, t)",
                             "        return cosine_scale(t)\n    else:\n        return linear_scale(t)\n\n\n"
                             "def cosine_scale(t):\n    return lookup(COSINE, t)\n\n\ndef linear_scale(t):\n    return lookup(LINEAR, t)")}
    _, findings = _findings(tmp_path, monkeypatch, edits)
    lookup = next(f for f in findings if f.path.endswith("schedule.py") and f.line == 10)
    assert lookup.impact == "medium" and "times per step" not in lookup.message


def test_arms_sum_takes_the_larger_arm_key_by_key() -> None:
    sites = [(((1, 0),), {"f1": 1, "h": 1}), (((1, 1),), {"f2": 1, "h": 2}), ((), {"h": 1})]
    assert arms_sum(sites) == {"f1": 1, "f2": 1, "h": 3}  # type: ignore[arg-type]


def test_a_sampling_step_that_repeats_it_outweighs_a_training_step_that_calls_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edits = {"train.py": ("from schedule import noise_scale, shift, weight", "from sampler import extract\nfrom schedule import COSINE, noise_scale, shift, weight")}
    root = copied_project("callcount", tmp_path, edits)
    (root / "train.py").write_text((root / "train.py").read_text().replace("    offset = shift(t)\n", "    offset = shift(t) * extract(COSINE, t)\n"))
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL113"], "min-impact": "low"}, root))
    extract = next(f for f in result.findings if f.path.endswith("sampler.py"))
    assert extract.impact == "high" and "run every step from a sampling loop at line 34" in extract.message
    assert "8 times per denoising step" in extract.message


def _arms(source: str) -> list[tuple[tuple[int, int], ...] | None]:
    tree = Tree(cst.parse_module(source))
    return [call_arms(tree, call) for call in tree.nodes(cst.Call) if type(call.func) is cst.Name and call.func.value == "f"]


@pytest.mark.parametrize(("source", "count"), [
    ("def g(a):\n    f()\n    f()\n", 2),
    ("def g(a):\n    if a:\n        f()\n    else:\n        f()\n", 1),
    ("def g(a):\n    if a:\n        f()\n    elif a > 1:\n        f()\n        f()\n    else:\n        f()\n", 2),
    ("def g(a):\n    if a:\n        f()\n    f()\n", 2),
    ("def g(a):\n    if a is None:\n        return f()\n    return f()\n", 1),
    ("def g(a):\n    return f() if a else f()\n", 1),
    ("def g(a):\n    x = f(f())\n", 2),
])
def test_arms_count(source: str, count: int) -> None:
    assert arms_count(_arms(source)) == count  # type: ignore[arg-type]


def test_a_call_in_a_comprehension_has_no_sure_count() -> None:
    assert _arms("def g(xs):\n    return [f(x) for x in xs]\n") == [None]


def test_a_call_under_an_every_n_test_has_no_sure_count() -> None:
    # (cleanrl's `if global_step % args.train_frequency == 0:` around its update: on some iterations only)
    assert _arms("def g(step, n):\n    f()\n    if step > 10 and step % n == 0:\n        f()\n") == [(), None]


def test_the_words_of_a_count_with_a_loop_of_no_known_count_inside() -> None:
    from torchlint.analysis.multiplicity import CALL_SITE, Multiplicity, Repeat
    summed = Repeat(CALL_SITE, 6, calls=(("Logger.log", 1, 4), ("step", 2, 1)))
    assert Multiplicity((summed,)).words() == "6 times per step: from 4 calls in `Logger.log()`, 1 in each of 2 runs of `step()`"
    assert Multiplicity((summed, Repeat("iteration"))).words() == \
        "per iteration per step, in each of 6 calls per step (from 4 calls in `Logger.log()`, 1 in each of 2 runs of `step()`)"


def test_a_step_in_a_hot_comprehension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a comprehension is a hot loop too: its calls' step is told by the loop's place in the file, not a loop key)
    (tmp_path / "run.py").write_text(
        "import torch\n\nmodel = torch.nn.Linear(4, 4).cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = torch.utils.data.DataLoader(torch.randn(64, 4), batch_size=8)\n\n\ndef train_step(x):\n"
        "    loss = model(x.cuda()).pow(2).mean()\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n\n\n"
        "for epoch in range(10):\n    losses = [train_step(x) for x in loader]\n")
    monkeypatch.chdir(tmp_path)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    assert not result.errors
    assert [(f.line, f.impact) for f in result.findings] == [(12, "medium")]
