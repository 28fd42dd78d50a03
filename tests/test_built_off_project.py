"""Code only a construction's option turns on, which no construction in the project sets (review 21's nine false
findings' shape, fixtures/projects/built_off): a mixture of experts built only under `if num_experts > 0:` in a base
layer's constructor, its default 0 handed down from a classmethod's `cls(...)` and the run's option (`group.add(...,
default=0)`), and a looped model's early exit under `elif self.looped:` (`looped=False`, keyword-only), built once
through `**` of a dict whose keys are seen. Low, saying why; a construction that sets it keeps its tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("built_off", tmp_path, monkeypatch)


def _reads(project: Path) -> dict[tuple[str, int], tuple[str, str]]:
    return {(Path(f.path).as_posix(), f.line): (str(getattr(f.impact, "value", f.impact)), f.impact_reason)
            for f in project_findings(project, "TL101")}


def _edit(project: Path, name: str, old: str, new: str) -> None:
    path = project / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL101"))


def test_the_words_name_the_test_and_the_constructor(project: Path) -> None:
    reads = _reads(project)
    _, experts = reads[("nmt/experts.py", 17)]
    assert "only when `num_experts > 0`" in experts and "`LayerBase()`" in experts and "only that branch builds the object it runs" in experts
    _, looped = reads[("looped.py", 23)]
    assert "only when `looped` is true" in looped and "`Looped()`" in looped


def test_an_option_turned_on_by_default_keeps_the_experts_tier(project: Path) -> None:
    _edit(project, "opts.py", 'type=int, default=0, help="experts', 'type=int, default=4, help="experts')
    assert _reads(project)[("nmt/experts.py", 17)][0] == "high"


def test_a_construction_passing_experts_keeps_its_tier(project: Path) -> None:
    _edit(project, "nmt/layers.py", "return cls(opt.dim, 6, num_experts=opt.num_experts)", "return cls(opt.dim, 6, num_experts=8)")
    assert _reads(project)[("nmt/experts.py", 17)][0] == "high"


def test_a_subclass_that_sets_its_own_experts_keeps_the_tier(project: Path) -> None:
    # (its `__init__` calls no `super().__init__`: what it passes the base is not seen)
    _edit(project, "nmt/layers.py", "        super(Layer, self).__init__(dim, num_experts=num_experts)\n",
          "        nn.Module.__init__(self)\n        self.feed_forward = Experts(4, dim)\n")
    assert _reads(project)[("nmt/experts.py", 17)][0] == "high"


def test_a_looped_construction_keeps_the_early_exit_high(project: Path) -> None:
    _edit(project, "sample.py", "Sampler(Looped(dim=16))", "Sampler(Looped(dim=16, looped=True))")
    assert _reads(project)[("looped.py", 23)][0] == "high"


def test_a_key_the_splatted_dict_gains_may_turn_it_on(project: Path) -> None:
    _edit(project, "pair.py", 'enc_kwargs["recycling"]', 'enc_kwargs["looped"]')
    assert _reads(project)[("looped.py", 23)][0] == "high"


def test_a_dict_handed_to_another_function_may_gain_any_key(project: Path) -> None:
    _edit(project, "pair.py", "        self.encoder = Looped(**enc_kwargs)", "        configure(enc_kwargs)\n        self.encoder = Looped(**enc_kwargs)")
    _edit(project, "pair.py", "def pick_and_pop(keys, d):", "def configure(d):\n    d.update(looped=True)\n\n\ndef pick_and_pop(keys, d):")
    assert _reads(project)[("looped.py", 23)][0] == "high"


def test_a_subclass_with_a_constructor_of_its_own_that_skips_super_keeps_the_tier(project: Path) -> None:
    # (`GatedLayer` builds through `LayerBase.__init__` where it has none; with one that calls no `super().__init__`,
    # what reaches the base's test is not seen)
    _edit(project, "nmt/layers.py", "class GatedLayer(LayerBase):\n",
          "class GatedLayer(LayerBase):\n    def __init__(self, dim):\n        nn.Module.__init__(self)\n        self.feed_forward = nn.Linear(dim, dim)\n\n")
    assert _reads(project)[("nmt/experts.py", 17)][0] == "high"


def test_an_object_the_constructor_may_be_handed_keeps_the_tier(project: Path) -> None:
    # (`self.feed_forward = feed_forward` beside the branch: an `Experts` made elsewhere may be held)
    _edit(project, "nmt/layers.py", "    def __init__(self, dim, num_experts=0):\n        super().__init__()\n        if num_experts > 0:",
          "    def __init__(self, dim, num_experts=0, feed_forward=None):\n        super().__init__()\n        if feed_forward is not None:\n"
          "            self.feed_forward = feed_forward\n        elif num_experts > 0:")
    _edit(project, "train.py", "model = Stack.from_opt(opt).cuda()",
          "model = Stack.from_opt(opt).cuda()\nfrom nmt.experts import Experts\nfrom nmt.layers import Layer\nextra = Layer(opt.dim, feed_forward=Experts(4, opt.dim))")
    assert _reads(project)[("nmt/experts.py", 17)][0] == "high"
