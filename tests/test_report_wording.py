"""The profile report says what is true (issue 36, item 4): TL401 applies on any device,
the sync rules' CPU note names the rule's own call, report.html shows no empty heading,
and a TLR05 card links its rule page and points at the optimizer's constructor."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from test_estimate import f, hot, session

from torchlint.estimate import analyse
from torchlint.estimate.syncs import SYNCS_ON_THE_CPU
from torchlint.experiment.plan import candidates_for
from torchlint.report import profile_html, profile_json

TRAIN = """import torch
model = Net()
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4)
opt = torch.optim.Adam(
    model.parameters(), lr=1e-3,
)
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt_d.step()
"""
STEP_LINE, CONSTRUCTOR_LINE = 10, 4


def test_conv_bias_before_batchnorm_is_not_a_gpu_only_rule(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    hs = [hot("sampler", str(script), 3, total=5.0)]
    (c,) = analyse([f("TL401", 3)], session(str(script), hs)).findings
    assert c.expected is None or c.expected.not_applicable is None  # bias-before-BN saves work on any device
    (gpu_only,) = analyse([f("TL402", 3)], session(str(script), hs)).findings
    assert gpu_only.expected.not_applicable  # near miss: tensor-core alignment is the GPU's


def test_the_cpu_sync_note_names_the_rule_s_own_call(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    for code, op, says in (("TL102", "Tensor.cpu", "`.cpu()`"), ("TL101", "Tensor.item", "`.item()`")):
        (c,) = analyse([f(code, 8)], session(str(script), [hot("probe", str(script), 8, op, calls=100, total=1.0)])).findings
        assert says in c.expected.model and "no device to wait for" in c.expected.model, c.expected.model
    assert ".item()" not in SYNCS_ON_THE_CPU["TL102"]


def _tlr05_report(tmp_path: Path, line: int = STEP_LINE) -> tuple[dict, object]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    record = {"class": "Adam", "has_foreach": True, "has_fused": True, "impl": "for-loop", "forced": False, "tensors": 200,
              "elements": 200 * 1024, "devices": ["cpu"], "path": str(script), "line": line, "function": "<module>", "steps": 10, "step_s": 0.5}
    s = session(str(script), [], meta={"patterns": {"optimizers": [record]}})
    result = analyse([], s)
    return profile_json.build(result, s, run_dir=str(tmp_path), static={}, artifacts={}, snakeviz={}), result


class _Headings(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[list[str]] = []  # each h2's text, then the tags under it
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "h2":
            self._in_h2 = True
            self.sections.append([""])
        elif self.sections:
            self.sections[-1].append(tag)

    def handle_endtag(self, tag: str) -> None:
        self._in_h2 = self._in_h2 and tag != "h2"

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.sections[-1][0] += data


def _findings_html(report: dict, tmp_path: Path) -> _Headings:
    parser = _Headings()
    parser.feed(profile_html._findings(report, str(tmp_path)))
    return parser


def test_tlr05_points_at_the_constructor_links_its_page_and_is_switched_at_step(tmp_path: Path) -> None:
    report, result = _tlr05_report(tmp_path)
    (tlr05,) = report["runtime_findings"]
    assert (tlr05["code"], tlr05["line"]) == ("TLR05", CONSTRUCTOR_LINE)
    assert [r["line"] for r in tlr05["related"]] == [STEP_LINE]
    (c,) = result.runtime
    assert [r.line for r in c.finding.related] == [STEP_LINE]
    html = profile_html._findings(report, str(tmp_path))
    assert "TLR05-optimizer-single-tensor.md" in html
    (candidate,) = candidates_for(c.finding, cuda=False, cores=2)
    assert candidate.switches[0]["lines"] == [STEP_LINE, STEP_LINE]  # the experiment still switches the stepped optimizer
    # The second optimizer, stepped at line 11, is its own constructor's (line 3).
    other, _ = _tlr05_report(tmp_path, line=11)
    assert other["runtime_findings"][0]["line"] == 3


def test_no_empty_runtime_findings_heading(tmp_path: Path) -> None:
    report, _ = _tlr05_report(tmp_path)
    sections = {s[0]: s[1:] for s in _findings_html(report, tmp_path).sections}
    runtime = sections.get("Runtime findings")
    ranked = [f for f in report["runtime_findings"] if f.get("rank") is not None]
    assert ranked  # TLR05's CPU model gives it an expected saving: its card is in the ranking
    assert runtime is None  # ... so the section would have nothing under its heading
    report["runtime_findings"] = []
    sections = {s[0]: s[1:] for s in _findings_html(report, tmp_path).sections}
    assert sections["Runtime findings"]  # "none", said under it
    for finding in ranked:
        finding["rank"] = None
    report["runtime_findings"] = ranked
    sections = {s[0]: s[1:] for s in _findings_html(report, tmp_path).sections}
    assert "div" in sections["Runtime findings"]  # an unranked one has its card there
