"""Findings one fix removes together (engine/groups.py): one finding at the first member, the
others related, repeated once per member in its step; a `# noqa` on the first line suppresses it
whole, one on another member's line takes that member out (its comment used: no TL001)."""

from __future__ import annotations

import json
from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source

_UPDATE = """import torch
from torch.utils.data.sampler import BatchSampler, SubsetRandomSampler


def update(model, opt, obs, acts, rets, advs, n, mb):
    obs, acts, rets, advs = obs.cuda(), acts.cuda(), rets.cuda(), advs.cuda()
    for epoch in range(4):
        for indices in BatchSampler(SubsetRandomSampler(range(n)), mb, drop_last=True):
            o = obs[indices]{a}
            a = acts[indices]{b}
            r = rets[indices]{c}
            g = advs[indices]{d}
            w = obs[indices].sum(-1){e}
            loss = (model(o, a) - r).pow(2).mean() * (g * w).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""
_CONFIG = from_table({"select": ["TL114", "TL001"], "min-impact": "low"}, Path("."))


def _lint(**noqa: str) -> list:
    text = _UPDATE.format(**{key: noqa.get(key, "") for key in "abcde"})
    return [(f.line, f.code, f.impact, f.message, tuple(r.line for r in f.related)) for f in lint_source(text, "update.py", _CONFIG)]


def test_one_index_at_five_indexings_is_one_high_finding_with_the_others_related() -> None:
    found = _lint()
    assert [(line, code, impact, related) for line, code, impact, _, related in found] == [(9, "TL114", "high", (10, 11, 12, 13))]
    assert "5 indexings with `indices` in this step, here and at lines 10, 11, 12, 13" in found[0][3]


def test_json_carries_the_other_members_as_related_locations() -> None:
    text = _UPDATE.format(a="", b="", c="", d="", e="")
    (finding,) = lint_source(text, "update.py", _CONFIG)
    shown = json.loads(json.dumps(finding.to_dict()))
    assert [r["line"] for r in shown["related"]] == [10, 11, 12, 13]


def test_noqa_on_the_first_line_suppresses_the_whole_group() -> None:
    assert _lint(a="  # noqa: TL114") == []


def test_noqa_on_another_member_takes_it_out_of_the_group_and_is_used() -> None:
    found = _lint(c="  # noqa: TL114")
    # four left: still one finding at the first, the suppressed line neither counted nor an unused noqa
    assert [(line, code, related) for line, code, _, _, related in found] == [(9, "TL114", (10, 12, 13))]
    assert "4 indexings with `indices` in this step, here and at lines 10, 12, 13" in found[0][3]
    assert found[0][2] == "medium"  # four back to back at the step's start: a few, about one wait's worth


def test_noqa_on_every_member_leaves_nothing_and_no_unused_noqa() -> None:
    assert _lint(a="  # noqa: TL114", b="  # noqa: TL114", c="  # noqa", d="  # noqa: TL114", e="  # noqa: TL114") == []


def test_one_member_left_after_noqa_is_a_finding_of_its_own() -> None:
    found = _lint(b="  # noqa: TL114", c="  # noqa: TL114", d="  # noqa: TL114", e="  # noqa: TL114")
    # one member left: a finding of its own, no group words
    assert [(line, code) for line, code, _, _, _ in found] == [(9, "TL114")]
    assert "indexings with" not in found[0][3]
