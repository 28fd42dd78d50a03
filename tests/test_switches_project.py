"""A finding behind a switch off by default (a keyword of its function, or a constructor keyword an
attribute holds) is low where no call in the project can turn it on, and keeps its tier where one
may: a literal on from another file, a variable, `**` options, a call the join cannot resolve that
names it, a parameter handed on whose own callers turn it on (fixtures/projects/switches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, copied_project, findings_by_line, project_findings

SELECT = "TL101"


def _copy(tmp_path: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    return copied_project("switches", tmp_path, edits)


def test_switches_project_markers_and_impacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("switches", tmp_path, monkeypatch)
    findings = project_findings(root, SELECT)
    assert_markers_hold(root, findings)
    found = {(Path(f.path).as_posix(), f.line): f for f in findings}
    synced = found[("gen/sampler.py", 21)].impact_reason  # type: ignore[attr-defined]
    assert "`Sampler.sample()` runs it only with `synced=True`, off by default, and no call in the project passes it" in synced
    assert "`AuxLoss()` runs it only with `report=True`" in found[("gen/losses.py", 16)].impact_reason  # type: ignore[attr-defined]
    assert "`log` given" in found[("gen/sampler.py", 50)].impact_reason  # type: ignore[attr-defined]
    # `TracedLoss(trace=True)` in run.py: the switch is set by a construction, its default (off) is no run's, not said
    traced = found[("gen/losses.py", 29)].impact_reason  # type: ignore[attr-defined]
    assert "only when `trace` is set on `TracedLoss()`" in traced and "off by default" not in traced
    # a helper whose only call sits behind `if top_k is not None:` takes its caller's switch
    assert "`sample_filtered()` runs it only with `top_k` given, off by default" in found[("gen/filters.py", 9)].impact_reason  # type: ignore[attr-defined]
    # a codebook's keyword that only its stack's `**kwargs` hands on, and no construction of the stack passes
    assert "`Codes()` runs it only with `active_only=True`, off by default, and no call in the project passes it" in found[("gen/quantize.py", 18)].impact_reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(("edit", "line", "impact"), [
    (("run.py", ("generate(ids, synced=False)", "generate(ids, synced=True)")), ("gen/sampler.py", 21), "medium"),  # handed on, turned on
    (("run.py", ("sample_traced(model, ids, trace=True)", "sample_traced(model, ids, trace=False)")), ("gen/sampler.py", 41), "low"),
    (("run.py", ("check=args.check", "check=0")), ("gen/sampler.py", 32), "low"),
    # the run's flag handed on: on by default (`store_false`) it runs; a value made from it may be on
    (("run.py", ('"--check", action="store_true"', '"--check", action="store_false"')), ("gen/sampler.py", 32), "medium"),
    (("run.py", ("check=args.check", "check=args.check or ids.numel() > 4")), ("gen/sampler.py", 32), "medium"),
    (("run.py", ("TracedLoss(trace=True)", "TracedLoss()")), ("gen/losses.py", 29), "low"),
    (("run.py", ("AuxLoss(0.5)", "AuxLoss(0.5, report=args)")), ("gen/losses.py", 16), "medium"),
    (("run.py", ("sample_logged(model, ids)", "sample_logged(model, ids, log=[])")), ("gen/sampler.py", 50), "medium"),
    (("run.py", ("probe=True", "probe=None")), ("gen/sampler.py", 59), "low"),
    # a call the summary keeps no site of (every N steps) still names the keyword: the tier stays
    (("run.py", ("    sample_logged(model, ids)\n", "    for step in range(1000):\n        if step % 100 == 0:\n            sample_logged(model, ids, log=[])\n")),
     ("gen/sampler.py", 50), "medium"),
    (("run.py", ("**vars(args)", "verbose=False")), ("gen/sampler.py", 68), "low"),
    # the helper's caller turned on: the helper runs on every token
    (("run.py", ("sample_filtered(model, ids, penalty=0.5)", "sample_filtered(model, ids, top_k=5)")), ("gen/filters.py", 9), "medium"),
    # the helper handed on as a value: where it is called is not seen
    (("gen/sampler.py", ("def sample_filtered(", "FILTERS = {\"top_k\": top_k_read}\n\n\ndef sample_filtered(")), ("gen/filters.py", 9), "medium"),
    # `top_k=5` passed only behind `sample_twice`'s own switch: off until a call turns that on
    (("run.py", ("    sample_filtered(model, ids, penalty=0.5)\n", "    sample_twice(model, ids)\n")), ("gen/filters.py", 9), "low"),
    (("run.py", ("    sample_filtered(model, ids, penalty=0.5)\n", "    sample_twice(model, ids, filtered=True)\n")), ("gen/filters.py", 9), "medium"),
    # a constructor's keyword reached only through a stack's own `**kwargs`: its constructions decide
    (("run.py", ("Stack(dim=8, layers=2, size=32)", "Stack(dim=8, layers=2, size=32, active_only=True)")), ("gen/quantize.py", 18), "high"),
    (("run.py", ("Stack(dim=8, layers=2, size=32)", "Stack(dim=8, layers=2, size=32, active_only=False)")), ("gen/quantize.py", 18), "low"),
    (("run.py", ("Stack(dim=8, layers=2, size=32)", "Stack(dim=8, layers=2, **vars(model))")), ("gen/quantize.py", 18), "high"),
    (("gen/quantize.py", ("        super().__init__()\n        self.layers", "        super().__init__()\n        kwargs.update(active_only=True)\n        self.layers")),
     ("gen/quantize.py", 18), "high"),
])
def test_what_a_call_passes_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    found = findings_by_line(_copy(tmp_path, {name: change}), monkeypatch, SELECT)
    assert found[line].impact == impact, found[line].impact_reason  # type: ignore[attr-defined]


def test_a_function_no_code_calls_is_low_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a library's entry point: callers outside the project decide, the finding stays, low
    root = _copy(tmp_path, {"run.py": ("    return tools.sample_rows(model, ids, probe=True)\n", "    return None\n")})
    found = findings_by_line(root, monkeypatch, SELECT)
    reason = found[("gen/sampler.py", 59)].impact_reason  # type: ignore[attr-defined]
    assert found[("gen/sampler.py", 59)].impact == "low"  # type: ignore[attr-defined]
    assert "`sample_rows()` runs it only with `probe=True`, off by default, and no code of the project calls it" in reason


def test_a_subclass_in_the_project_keeps_the_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (its own `__init__` may pass `report=True` up, or set the attribute: the join does not follow it)
    root = _copy(tmp_path, {"gen/losses.py": ("class TracedLoss(nn.Module):", "class LoudLoss(AuxLoss):\n    pass\n\n\nclass TracedLoss(nn.Module):")})
    found = findings_by_line(root, monkeypatch, SELECT)
    assert found[("gen/losses.py", 16)].impact == "medium"  # type: ignore[attr-defined]


def _joined(root: Path):  # type: ignore[no-untyped-def]
    import libcst as cst

    from torchlint.analysis.context import FileContext
    from torchlint.analysis.project import Project
    from torchlint.analysis.setting_defaults import SettingDefaults
    from torchlint.analysis.steps import StepSummarizer

    summaries = []
    for path in sorted(root.rglob("*.py")):
        ctx = FileContext(cst.parse_module(path.read_text()), str(path))
        summaries.append(StepSummarizer(ctx).summary(str(path), lambda node: None))  # type: ignore[arg-type,return-value]
    return SettingDefaults(Project(summaries))


def test_the_join_reads_defaults_literals_and_parameters_handed_on(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    sampler, losses = str(root / "gen" / "sampler.py"), str(root / "gen" / "losses.py")
    settings = _joined(root)
    # `generate(ids, synced=False)` -> `self.sample(ids, steps, synced=synced)`: handed on, off by default
    assert settings.turned_on_nowhere(sampler, "Sampler.sample", "synced", False) is not None
    # `check=args.check`, a `store_true` flag parsed in the caller: off unless the run turns it on, and said so
    assert "the project passes it only the run's `check` setting, off by default" in settings.turned_on_nowhere(sampler, "sample_checked", "check", False)  # type: ignore[operator]
    assert settings.turned_on_nowhere(sampler, "sample_traced", "trace", False) is None  # `trace=True`, another file
    assert settings.turned_on_nowhere(sampler, "sample_options", "verbose", False) is None  # `**vars(args)`
    assert settings.turned_on_nowhere(sampler, "sample_rows", "probe", False) is None  # `tools.sample_rows(..., probe=True)`
    assert settings.turned_on_nowhere(losses, "AuxLoss.__init__", "report", False) is not None
    assert settings.turned_on_nowhere(losses, "TracedLoss.__init__", "trace", False) is None
    # a literal off passed where only leaving it out is off (`is not None`): `0 is not None` holds
    root = _copy(tmp_path / "zero", {"run.py": ("sample_logged(model, ids)", "sample_logged(model, ids, log=0)")})
    assert _joined(root).turned_on_nowhere(str(root / "gen" / "sampler.py"), "sample_logged", "log", True) is None
    assert _joined(root).turned_on_nowhere(str(root / "gen" / "sampler.py"), "sample_logged", "log", False) is not None
