"""A call site the project's join can never follow (an import that names no module of the
project) is summarised without its facts; a cached summary that left one out is read again
once the project gains a module of that name."""

from __future__ import annotations

from pathlib import Path

from torchlint.analysis.project_index import module_tails, never_resolved
from torchlint.analysis.summary import FileSummary
from torchlint.config import Config, Resolver
from torchlint.engine import lint_paths
from torchlint.engine.linter import Linter
from torchlint.engine.source import Source

# `accuracy` from `metrics`, called twice per step in a loop of its own: where `metrics.py` exists, the
# join follows the call, and its place (that inner loop) and what it passes shape the finding there
TRAIN = (
    "import torch\nfrom metrics import accuracy\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n    out = model(x.cuda())\n"
    "    torch.nn.functional.cross_entropy(out, y.cuda()).backward()\n    opt.step()\n"
    "    for k in range(3):\n        acc = accuracy(out, y)\n"
)
METRICS = "import torch\n\n\ndef accuracy(logits, labels):\n    correct = (logits.argmax(dim=1) == labels).float().mean()\n    return correct.item()\n"


def _project(root: Path, with_metrics: bool) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "train.py").write_text(TRAIN)
    if with_metrics:
        (root / "metrics.py").write_text(METRICS)
    return root


def _shown(root: Path, cache: Path | None) -> list[tuple]:
    found = lint_paths([root], Resolver(cwd=root), cache=cache, project=True).findings
    return [(Path(str(f.path)).name, f.line, f.code, f.message, f.impact) for f in found]


def test_the_tails_are_the_last_parts_of_module_names() -> None:
    tails = module_tails(["/r/pkg/__init__.py", "/r/pkg/losses.py", "/r/nb.ipynb"])
    assert tails == {"pkg", "losses", "nb", "ipynb"}
    assert never_resolved(("import", 0, "einops.rearrange"), tails)
    assert not never_resolved(("import", 0, "pkg.losses.focal"), tails)  # `pkg.losses` is a module of it
    assert not never_resolved(("import", 1, "helpers.f"), tails)  # a relative import: not judged by name
    assert never_resolved(("object", ("import", 0, "timm.Model"), "forward"), tails)
    assert never_resolved(("object", ("returned", ("import", 0, "timm.create_model"), None), "__call__"), tails)
    assert not never_resolved(("object", ("local", "Net"), "__call__"), tails)


def test_an_unfollowed_site_has_no_facts_and_says_what_it_was_judged_by(tmp_path: Path) -> None:
    path = tmp_path / "train.py"

    def summary(tails: frozenset[str]) -> FileSummary:
        made = Linter(Config(), tails=tails).lint(Source(str(path), TRAIN), path).summary
        assert made is not None
        return made

    alone = summary(frozenset({"train"}))
    site = next(c for c in alone.calls if c.target == ("import", 0, "metrics.accuracy"))
    assert site.repeats == () and alone.skipped == {"metrics", "accuracy"}
    joined = summary(frozenset({"train", "metrics"}))
    site = next(c for c in joined.calls if c.target == ("import", 0, "metrics.accuracy"))
    assert [key for key, _ in site.repeats] and joined.skipped == frozenset()  # the loop of 3 around it
    assert alone.calls != joined.calls and summary(frozenset()).calls == alone.calls


def test_a_cached_summary_that_left_out_a_call_of_a_new_module_is_read_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "p").mkdir()
    root = _project(tmp_path / "p", with_metrics=False)
    _shown(root, cache)  # train.py cached, its call of `metrics.accuracy` unfollowed: no such module
    (root / "metrics.py").write_text(METRICS)
    cold = _shown(root, None)
    assert any(code == "TL101" and name == "metrics.py" for name, _, code, _, _ in cold)
    assert _shown(root, cache) == cold
