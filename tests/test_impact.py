"""Impact: the model's table is docs/impact.md's, every rule names a cost and its fixtures
show every tier it can take, and a finding's impact follows where its code runs: its
own loop, the step that calls its function from another file, a host-only module."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, expected_impacts, run_check
from torchlint.analysis import impact as impact_module
from torchlint.analysis.impact import Cost, assess, tiers
from torchlint.analysis.multiplicity import Multiplicity, Place, Position, Repeat, Where, at_call
from torchlint.checks import all_checks
from torchlint.config import ConfigError, from_table
from torchlint.engine import lint_paths
from torchlint.findings import HIGH, IMPACTS, LOW, MEDIUM

DOC = (ROOT / "docs" / "impact.md").read_text(encoding="utf-8")
COLUMNS = {"train": Where.TRAIN, "infer": Where.INFER, "eval": Where.EVAL, "batch": Where.BATCH, "epoch": Where.EPOCH, "every_n": Where.EVERY_N, "once": Where.ONCE}


def _table(after: str) -> list[list[str]]:
    """The rows of the first Markdown table after the line holding ``after``."""
    text = DOC[DOC.index(after):]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # the header and its rule


def test_the_docs_table_is_the_model() -> None:
    header = [cell.strip() for cell in DOC[DOC.index("| cost | train"):].splitlines()[0].strip("|").split("|")][1:]
    assert header == list(COLUMNS)
    documented = {Cost[row[0].strip("`")]: {COLUMNS[c]: tier for c, tier in zip(header, row[1:])} for row in _table("| cost | train")}
    assert documented == tiers()


def test_every_rule_names_a_cost_and_the_docs_say_which() -> None:
    documented = {row[0].split()[0]: row[1].strip("`") for row in _table("| rule | cost |")}
    declared = {check.code: check.cost.name for check in all_checks()}
    assert {code: cost for code, cost in documented.items() if code not in ("TL000", "TL001")} == declared
    assert documented["TL000"] == "none"  # a file that cannot be parsed: no performance tier (report/concise.summary says it)
    assert documented["TL001"] == Cost.SUPPRESSION.name


def test_fixtures_show_every_tier_a_rule_can_take() -> None:
    """Each rule's fixtures name the impact of its findings; together they show every
    tier of the rule's cost that the rule can reach (a per-step sync is never `low`: the
    rule stays quiet in rare branches and host-only code)."""
    shown: dict[str, set[str]] = {}
    for path in (FIXTURES / "rules").glob("TL*/*.py"):
        if not path.name.startswith("fix"):
            shown.setdefault(path.parent.name, set()).update(expected_impacts(path.read_text(encoding="utf-8")).values())
    # (TL311's gradient norm runs where gradients are made, a training step; every N steps, once per epoch or once it is quiet)
    # (TL104's and TL106's high was a single mid-step condition's or mask's; one wait per step is medium now, issue 32,
    # and one repeated within the step is left to TL101/TL105's reads: rules/TL106)
    unreachable = {"TL101": {LOW}, "TL103": {LOW}, "TL104": {LOW, HIGH}, "TL106": {HIGH}, "TL302": {LOW}, "TL403": {LOW}, "TL404": {LOW},
                   "TL501": {MEDIUM, LOW}, "TL305": {LOW}, "TL311": {LOW}, "TL603": {MEDIUM, LOW}, "TL405": {LOW}, "TL407": {MEDIUM}, "TL601": {LOW}, "TL602": {MEDIUM, LOW}, "TL202": {HIGH}, "TL301": {HIGH}}
    # Not shown yet: these rules' high is now only a wait repeated within the step (issue 32 made a single mid-step
    # one medium), and their fixtures show no repeated case yet. A gap to fill with fixtures, not a tier they cannot take.
    not_yet_shown = {"TL111": {HIGH}}  # (opt-in: its fixtures show one blocking copy per step)
    for check in all_checks():
        reachable = set(tiers()[check.cost].values()) - unreachable.get(check.code, set()) - not_yet_shown.get(check.code, set())
        assert reachable <= shown.get(check.code, set()), (check.code, reachable - shown.get(check.code, set()))


def test_place_is_data_and_tiers_follow_it() -> None:
    """A device read's tier follows how many times per step it runs and where it sits;
    the words of the reason are rendered from that data."""
    # one read per step mid-step (the default place) is one pipeline refill per step: medium, its place named (issue 32, review 11)
    impact, reason = assess(Cost.SYNC, Where.TRAIN)
    assert impact == MEDIUM and reason.startswith("a host-device sync that stalls the GPU pipeline, every step of a training loop, once per step, mid-step:")
    assert assess(Cost.SYNC, Where.INFER)[0] == MEDIUM and assess(Cost.UPLOAD, Where.TRAIN)[0] == MEDIUM
    assert assess(Cost.SYNC, Place(Where.TRAIN, Multiplicity((Repeat("layer"),))))[0] == HIGH  # repeated within the step: high
    impact, reason = assess(Cost.SYNC, Where.TRAIN, host_only=True)
    assert impact == LOW and "on the host only" in reason
    assert assess(Cost.API_AGE, Where.TRAIN) == (LOW, Cost.API_AGE.value)
    end = assess(Cost.SYNC, Place(Where.TRAIN, position=Position.STEP_END))
    assert end[0] == MEDIUM and "one sync per step" in end[1] and "1 %" in end[1]
    assert assess(Cost.SYNC, Place(Where.TRAIN, position=Position.AFTER_SYNC))[0] == LOW
    assert assess(Cost.SYNC, Place(Where.TRAIN, position=Position.BEFORE_SYNC))[0] == LOW
    blocks = Place(Where.TRAIN, Multiplicity((Repeat("block", 24, "Block.forward"),)), Position.STEP_END)
    impact, reason = assess(Cost.SYNC, blocks)
    assert impact == HIGH and "24 times per step: once in each `Block.forward()`" in reason
    decode = Multiplicity((Repeat("decoded token"), Repeat("beam"), Repeat("candidate")))
    assert decode.words() == "per candidate per beam per decoded token per step" and decode.count is None
    assert assess(Cost.HOST_COPY, Place(Where.INFER, decode))[0] == HIGH  # predictions per step are low; per candidate, not
    assert assess(Cost.HOST_COPY, Place(Where.INFER))[0] == LOW
    assert assess(Cost.SYNC, Place(Where.EVAL, decode))[0] == MEDIUM  # one tier up from an evaluation loop's
    assert assess(Cost.SMALL_WORK, Place(Where.TRAIN, decode, Position.AFTER_SYNC))[0] == LOW  # not a read: only the table
    assert not hasattr(impact_module, "where_of")  # the place is data, never a sentence parsed back


@pytest.mark.parametrize(("position", "where", "tier"), [
    (Position.AFTER_SYNC, Where.TRAIN, MEDIUM),  # drained before the loop: a copy per row, about one sync's worth
    (Position.AFTER_SYNC, Where.EVAL, LOW),
    (Position.AFTER_SYNC, Where.INFER, LOW),
    (Position.STEP_END, Where.TRAIN, MEDIUM),  # the first row's read is the step's one real wait, at its end
    (Position.MID_STEP, Where.TRAIN, MEDIUM),  # one real wait mid-step: one pipeline refill per step, as at its end
    (Position.MID_STEP, Where.EVAL, LOW),  # as one mid-step read in an evaluation loop, not a wait per row
])
def test_rows_of_copies_cost_one_wait_plus_a_copy_each(position: Position, where: Where, tier: str) -> None:
    """Issue 32, review 8: a per-row loop whose body queues nothing (``int(lengths[i].item())``,
    slices, host work) waits once; the rows after the first wait only for their copies. Before,
    every row counted as a wait of its own: high in a training loop, medium in an evaluation's."""
    rows = Multiplicity((Repeat("batch row", copies=True),))
    impact, reason = assess(Cost.SYNC, Place(where, rows, position))
    assert impact == tier
    assert "copies" in reason or "copy" in reason
    # the same loop with a wait of its own per row (a model call in it) stays a wait per row
    assert assess(Cost.SYNC, Place(where, Multiplicity((Repeat("batch row"),)), position))[0] == (MEDIUM if where is Where.EVAL else HIGH)


def test_nested_rows_of_copies_add_up_to_waits() -> None:
    # per token per row (StyleTTS2's `_s2s_trg[p, :_text_input[p]] = 1`): thousands of copies, as costly as waits
    nested = Multiplicity((Repeat("batch row", copies=True), Repeat("batch row", copies=True)))
    assert nested.waits_again and not nested.copies
    assert assess(Cost.SYNC, Place(Where.TRAIN, nested, Position.AFTER_SYNC))[0] == HIGH
    within_few = Multiplicity((Repeat("iteration", 3, few=True), Repeat("batch row", copies=True)))
    assert not within_few.waits_again and within_few.copies
    assert assess(Cost.SYNC, Place(Where.TRAIN, within_few, Position.AFTER_SYNC))[0] == MEDIUM


@pytest.mark.parametrize(("repeats", "unit", "words"), [
    # a decode loop in a function that a decode step calls: each level once, the inner one named so
    ((Repeat("decoded token"),), "decoded token", "per inner decoded token per decoded token"),
    ((Repeat("beam"), Repeat("beam")), "step", "per inner beam per beam per step"),
    ((Repeat("token"),), "decoded token", "per token per decoded token"),
    ((Repeat("beam"),), "decoded token", "per beam per decoded token"),
])
def test_multiplicity_names_each_level_once(repeats: tuple[Repeat, ...], unit: str, words: str) -> None:
    rendered = Multiplicity(repeats, unit).words()
    assert rendered == words
    phrases = rendered.split("per ")[1:]
    assert len(phrases) == len(set(phrases))


HELPER = "import torch\n\n\ndef accuracy(logits, y):\n    return (logits.argmax(1) == y).float().mean().item()\n\n\ndef smooth(n):\n    return torch.ones(n, n).cuda()\n"
TRAIN = (
    "import torch\nfrom helper import accuracy, smooth\n\nmodel = torch.nn.Linear(8, 2).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n\nfor x, y in loader:\n    out = model(x.cuda())\n"
    "    out.sum().backward()\n    opt.step()\n    acc = accuracy(out, y)\n    w = smooth(8)\n"
)


def test_a_helper_another_file_calls_every_step_has_the_steps_impact(tmp_path: Path) -> None:
    """`.item()` in a helper is conditional on the join; TL110 in a helper is a finding of
    its own whose impact the join raises from `once` to the training step's."""
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    config = from_table({"select": ["TL101", "TL110"]}, tmp_path)
    found = {(Path(f.path).name, f.line, f.code): (f.impact, f.impact_reason) for f in lint_paths([tmp_path], config).findings}
    # the read is the step's last device work (after `opt.step()`): one sync per step, at its end
    assert found[("helper.py", 5, "TL101")][0] == MEDIUM and "one sync per step" in found[("helper.py", 5, "TL101")][1]
    # the upload is placed like a read: the step's last work, its copy waits for the queue once per step
    impact, reason = found[("helper.py", 9, "TL110")]
    assert impact == MEDIUM and reason.startswith("a tensor made on the host and copied over, the host waiting for the copy, every step of a training loop: one blocking copy per step")
    # Alone, the helper is checked as code that runs once.
    alone = lint_paths([tmp_path / "helper.py"], config).findings
    assert [(f.code, f.impact) for f in alone] == [("TL110", LOW)]


def test_cached_results_keep_their_impact(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    cold = run_check(tmp_path, "--output-format", "json", "--cache-dir", str(tmp_path / ".cache"), ".")[1]
    warm = run_check(tmp_path, "--output-format", "json", "--cache-dir", str(tmp_path / ".cache"), ".")[1]
    # TL101 from the join (at the step's end: medium), TL110 raised by it (once per step, at the end: medium)
    assert cold == warm and warm.count('"impact": "low"') == 0 and warm.count('"impact": "medium"') == 2


def test_host_only_code_is_low_where_a_device_would_make_it_cost(tmp_path: Path) -> None:
    """A copy of an array every training step costs an allocation on a GPU run; in a module
    that never touches a device it is a host copy like any other."""
    loop = (
        "import numpy as np\nimport torch\n{device}model = torch.nn.Linear(8, 2){move}\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for array, y in batches:\n    x = torch.tensor(np.stack(array)){move}\n    model(x).sum().backward()\n    opt.step()\n"
    )
    (tmp_path / "cpu.py").write_text(loop.format(device="", move=""))
    (tmp_path / "gpu.py").write_text(loop.format(device="device = torch.device('cuda')\n", move=".to(device)"))
    config = from_table({"select": ["TL203"]}, tmp_path)
    found = {Path(f.path).name: (f.impact, f.impact_reason) for f in lint_paths([tmp_path], config).findings}
    assert found["gpu.py"][0] == MEDIUM
    assert found["cpu.py"][0] == LOW and "on the host only" in found["cpu.py"][1]


@pytest.mark.parametrize("value", ["none", "HIGH", 3])
def test_min_impact_must_be_a_tier(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="min-impact"):
        from_table({"min-impact": value}, tmp_path)
    assert set(IMPACTS) == {"high", "medium", "low"}


def test_config_and_findings_agree_on_the_tiers() -> None:
    from torchlint import config

    assert config._IMPACTS == IMPACTS


def test_the_profile_report_lists_static_findings_by_impact() -> None:
    from torchlint.report.profile_text import static_by_impact

    findings = [
        {"code": "TL303", "rank": None, "observed": None, "impact": "low"},
        {"code": "TL201", "rank": 1, "observed": {"seconds": 1.0}, "impact": "high"},  # ranked: not static-only
        {"code": "TL101", "rank": None, "observed": None, "impact": "high"},
        {"code": "TL202", "rank": None, "observed": None, "impact": "medium"},
    ]
    assert [f["code"] for f in static_by_impact(findings)] == ["TL101", "TL202", "TL303"]


def test_the_language_server_maps_impact_to_severity() -> None:
    pytest.importorskip("pygls")
    from lsprotocol import types

    from torchlint.findings import Finding, Location
    from torchlint.server.actions import _severity

    def finding(code: str, impact: str) -> Finding:
        return Finding(code, "x", "m", Location("a.py", 1), impact=impact)

    assert _severity(finding("TL101", HIGH)) == types.DiagnosticSeverity.Warning
    assert _severity(finding("TL202", MEDIUM)) == types.DiagnosticSeverity.Information
    assert _severity(finding("TL303", LOW)) == types.DiagnosticSeverity.Hint
    assert _severity(finding("TL000", HIGH)) == types.DiagnosticSeverity.Error


def test_a_helpers_own_work_after_a_sync_puts_its_last_read_at_the_steps_end() -> None:
    # minGPT-ddp's `_run_batch(source, targets)` called right after the batch's blocking copies:
    # its forward, backward and step come after that drain, so its final `loss.item()` waits for them
    assert at_call(Position.CALL_END, Position.AFTER_SYNC) is Position.STEP_END
    assert at_call(None, Position.AFTER_SYNC) is Position.AFTER_SYNC  # nothing of its own before: still drained
    assert at_call(Position.CALL_END, Position.MID_STEP) is Position.MID_STEP


def test_a_sync_in_an_elif_sits_where_its_if_does(tmp_path: Path) -> None:
    """The work before an `elif`'s body is the work before its `if` statement: llm.c's timing
    synchronize after `optimizer.step()` is at the step's end, not at its start."""
    source = (FIXTURES / "rules" / "TL103" / "flagged_device_chain.py").read_text()
    (tmp_path / "train.py").write_text(source)
    findings = lint_paths([tmp_path], from_table({"select": ["TL103"]}, tmp_path)).findings
    [sync] = [f for f in findings if f.line == 22]
    assert sync.impact == MEDIUM and "at its end" in sync.impact_reason and "at its start" not in sync.impact_reason
