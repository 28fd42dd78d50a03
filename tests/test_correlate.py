"""The join of findings with measurements (torchlint.correlate): pure, no torch, no engine."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchlint.correlate import correlate, display_path, enclosing_function
from torchlint.estimate import analyse
from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.report import profile_json, profile_text

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "fixtures" / "profiles" / "mlp_slow_loader.session.json"
SCRIPTS = ROOT / "fixtures" / "scripts"

SOURCE = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(ds, batch_size=32)

    def deco(f):
        return f

    @deco
    def train(model, opt):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
            print(loss.item())
            model.eval()
            out = model(x)
            z = out.to(
                "cpu"
            )
        return z
    """
)


def finding(code: str, path: str, line: int, *, end_line: int | None = None, related=()) -> Finding:
    return Finding(
        code=code,
        name=code.lower(),
        message=f"{code} message",
        location=Location(path, line, 5, end_line=end_line),
        related=tuple(related),
    )


def hot(source: str, path: str, line: int, op: str | None = None, *, calls: int = 0, total: float = 0.0,
        self_s: float | None = None, kind: str | None = None, function: str = "train",
        granularity: str = "line", samples: int = 0, dataloader_s: float = 0.0, device_s: float = 0.0) -> Hotspot:
    return Hotspot(
        source=source, path=path, line=line, granularity=granularity, function=function, op=op,
        self_s=total if self_s is None else self_s, total_s=total, calls=calls, kind=kind,
        samples=samples, dataloader_s=dataloader_s, device_s=device_s,
    )


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, str]:
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    return tmp_path, str(script)


COVERAGE = {
    "cprofile": {"span": "script"},
    "sampler": {"span": "script", "interval_s": 0.005, "samples": 2000},
    "probes": {"span": "script", "ops": ["Tensor.item", "DataLoader.__next__"]},
    "torch_profiler": {"ran": False, "not_run_reason": "disabled"},
}


def session_for(cwd: Path, hotspots: list[Hotspot], **extra) -> ProfileSession:
    meta = {"cwd": str(cwd), "script_wall_s": 10.0, "script": str(cwd / "train.py")}
    meta.update(extra.pop("meta", {}))
    extra.setdefault("coverage", COVERAGE)
    return ProfileSession(meta=meta, hotspots=hotspots, **extra)


def test_line_match_counts_only_the_rules_probes(project):
    cwd, script = project
    s = session_for(cwd, [
        hot("probe", script, 15, "Tensor.item", calls=100, total=0.5),
        hot("probe", script, 15, "Tensor.to", calls=100, total=3.0),  # same line, other call
        hot("torch", script, 15, "aten::_local_scalar_dense", calls=5, total=0.01, kind="Tensor.item"),
        hot("torch", script, 15, "aten::copy_", calls=5, total=0.2, kind="Tensor.to"),
    ])
    (c,) = correlate([finding("TL101", "train.py", 15)], s).findings
    assert c.observed and c.basis == "probe"
    assert c.calls == 100
    assert c.cost_s == pytest.approx(0.5)
    assert c.share == pytest.approx(0.05)
    assert [e.op for e in c.window] == ["aten::_local_scalar_dense"]


def test_related_loop_line_carries_the_dataloader_cost(project):
    cwd, script = project
    s = session_for(cwd, [
        hot("probe", script, 11, "DataLoader.__next__", calls=101, total=4.0),
        hot("probe", script, 11, "DataLoader.__iter__", calls=1, total=0.1),
        hot("probe", script, 11, "Tensor.item", calls=1, total=0.001),  # the loader's seed draw
        hot("probe", script, 15, "Tensor.item", calls=100, total=0.5),
    ])
    tl201 = finding("TL201", "train.py", 4, related=[Location("train.py", 11, 9)])
    tl101 = finding("TL101", "train.py", 15)
    result = analyse([tl101, tl201], s)
    first, second = result.findings
    assert first.finding.code == "TL201" and first.rank == 1
    assert second.finding.code == "TL101" and second.rank == 2
    assert {e.op for e in first.evidence} == {"DataLoader.__next__", "DataLoader.__iter__"}
    assert all(e.via == "related" for e in first.evidence)
    assert first.cost_s == pytest.approx(4.1)
    assert first.calls == 102


def test_pin_memory_is_measured_by_pageable_copies_in_the_loop_body(project):
    cwd, script = project
    fetch = hot("probe", script, 11, "DataLoader.__next__", calls=101, total=4.0)
    tl202 = finding("TL202", "train.py", 4, related=[Location("train.py", 11, 9)])
    # a CPU run: nothing copied to a device; the fetch time is context only
    (c,) = correlate([tl202], session_for(cwd, [fetch])).findings
    assert not c.observed and c.rank is None
    assert [e.op for e in c.context] == ["DataLoader.__next__"]
    # a GPU run: pageable copies in the loop body (line 12..20), not after the loop (21)
    copies = [
        hot("probe", script, 12, "Tensor.to", calls=100, total=0.3, kind="HtoD pageable"),
        hot("probe", script, 18, "Tensor.to", calls=100, total=0.1, kind="HtoD pinned"),
        hot("probe", script, 21, "Tensor.to", calls=1, total=0.2, kind="HtoD pageable"),
    ]
    (c,) = correlate([tl202], session_for(cwd, [fetch, *copies])).findings
    assert c.observed and c.calls == 100 and c.cost_s == pytest.approx(0.3)
    assert [(e.line, e.via) for e in c.evidence] == [(12, "related")]


def test_relative_and_absolute_paths_join(project, monkeypatch):
    cwd, script = project
    s = session_for(cwd, [hot("probe", script, 15, "Tensor.item", calls=3, total=0.1)])
    # a finding path relative to the run's cwd, one absolute, one through a `..` detour
    for path in ("train.py", script, str(cwd / "sub" / ".." / "train.py")):
        (c,) = correlate([finding("TL101", path, 15)], s).findings
        assert c.calls == 3, path


def test_multiline_call_matches_its_span(project):
    cwd, script = project
    s = session_for(cwd, [hot("probe", script, 19, "Tensor.to", calls=7, total=0.2, kind="DtoH")])
    (c,) = correlate([finding("TL102", "train.py", 18, end_line=20)], s).findings
    assert c.calls == 7
    (c,) = correlate([finding("TL102", "train.py", 18)], s).findings
    assert not c.observed


def test_copy_direction_filters_transfer_evidence(project):
    cwd, script = project
    s = session_for(cwd, [hot("probe", script, 18, "Tensor.to", calls=7, total=0.2, kind="HtoD pageable")])
    (c,) = correlate([finding("TL102", "train.py", 18)], s).findings  # a device-to-host rule
    assert not c.observed
    (c,) = correlate([finding("TL111", "train.py", 18)], s).findings  # a host-to-device rule
    assert c.observed and c.calls == 7


def test_rules_without_probes_use_the_line_sampler(project):
    cwd, script = project
    s = session_for(cwd, [hot("sampler", script, 17, total=2.0, self_s=0.0, samples=0)])
    (c,) = correlate([finding("TL301", "train.py", 17)], s).findings
    assert c.basis == "sampler" and c.cost_s == pytest.approx(2.0)
    assert c.calls == 0


def test_static_only_findings_keep_source_order_after_measured_ones(project):
    cwd, script = project
    s = session_for(cwd, [hot("probe", script, 15, "Tensor.item", calls=1, total=0.001)])
    fs = [finding("TL203", "train.py", 3), finding("TL101", "train.py", 15), finding("TL202", "train.py", 4)]
    result = analyse(fs, s)
    assert [c.finding.code for c in result.findings] == ["TL101", "TL203", "TL202"]
    assert [c.rank for c in result.findings] == [1, None, None]
    assert [c.finding.code for c in result.static_only] == ["TL203", "TL202"]


def test_enclosing_function_uses_the_decorator_line_too(project):
    cwd, script = project
    assert enclosing_function(script, 15) == (9, 10, "train")
    # pstats keys a decorated function by its first decorator line (9)
    s = session_for(cwd, [
        hot("probe", script, 15, "Tensor.item", calls=1, total=0.001),
        hot("cprofile", script, 9, None, calls=1, total=8.0, self_s=0.5, granularity="function"),
    ])
    (c,) = correlate([finding("TL101", "train.py", 15)], s).findings
    assert c.function is not None and c.function.name == "train" and c.function.total_s == 8.0
    assert c.cost_s == pytest.approx(0.001)  # function time is context, never the cost


def test_unexplained_hotspots_skip_explained_lines(project):
    cwd, script = project
    s = session_for(cwd, [
        hot("sampler", script, 11, total=5.0, self_s=3.0, samples=600),
        hot("sampler", script, 13, total=2.0, self_s=2.0, samples=400),
        hot("sampler", script, 12, total=0.5, self_s=0.05, samples=10),  # below 1 %
        hot("probe", script, 11, "DataLoader.__next__", calls=10, total=3.0),
    ])
    tl201 = finding("TL201", "train.py", 4, related=[Location("train.py", 11, 9)])
    result = correlate([tl201], s)
    assert [(h.line, h.source_line) for h in result.hotspots] == [(13, "loss.backward()")]
    assert result.hotspots[0].share == pytest.approx(0.2)


def test_dataloader_wait_share_becomes_a_runtime_finding(project):
    cwd, script = project
    hs = [hot("probe", script, 11, "DataLoader.__next__", calls=10, total=3.0)]
    s = session_for(cwd, hs, dataloader={"wait_share": 0.4, "fetch_s": 3.0})
    (r,) = correlate([], s).runtime
    assert r.finding.code == "TLR01" and r.finding.name == "dataloader-wait-share"
    assert r.finding.location.path == "train.py" and r.finding.line == 11
    assert "40%" in r.finding.message
    assert r.calls == 10
    s = session_for(cwd, hs, dataloader={"wait_share": 0.01, "fetch_s": 0.1})
    assert correlate([], s).runtime == []


def test_cuda_runtime_findings(project):
    cwd, script = project
    hs = [
        hot("sync", script, 15, "cuda sync", calls=200),
        hot("sync", script, 18, "cuda sync", calls=100),
        hot("probe", script, 12, "Tensor.to", calls=100, total=0.3, kind="HtoD pageable"),
    ]
    s = session_for(
        cwd, hs, steps={"count": 100},
        torch_window={"gpu_idle_share": 0.7, "window_s": 1.0, "pageable_copies": 10},
        meta={"device": "cuda (test)"},
    )
    result = correlate([finding("TL101", "train.py", 15)], s)
    codes = {r.finding.code: r for r in result.runtime}
    assert set(codes) == {"TLR02", "TLR03", "TLR04"}
    assert codes["TLR02"].finding.line == 15 and "3.0 host-device" in codes["TLR02"].finding.message
    assert codes["TLR03"].finding.line == 12 and codes["TLR03"].calls == 100
    assert codes["TLR04"].share == pytest.approx(0.7)
    (c,) = result.findings
    assert c.syncs == 200 and c.observed


def test_recorded_session_joins_a_real_run():
    data = json.loads(RECORDED.read_text())
    s = ProfileSession.from_dict(data)
    s.meta["cwd"] = str(SCRIPTS)
    script = "mlp_slow_loader.py"
    lines = (SCRIPTS / script).read_text().splitlines()
    ctor = next(i for i, t in enumerate(lines, 1) if "DataLoader(ds" in t)
    loop = next(i for i, t in enumerate(lines, 1) if "in enumerate(loader)" in t)
    item = next(i for i, t in enumerate(lines, 1) if "loss.item()" in t)
    steps = s.steps["count"]
    result = analyse(
        [
            finding("TL201", script, ctor, related=[Location(script, loop, 5)]),
            finding("TL101", script, item),
        ],
        s,
    )
    tl201, tl101 = result.findings
    assert tl201.finding.code == "TL201" and tl201.rank == 1
    assert tl101.calls == steps and tl101.cost_s > 0
    assert tl201.cost_s > tl101.cost_s
    assert any(e.op == "DataLoader.__next__" and e.calls >= steps for e in tl201.evidence)
    assert tl101.window and {e.op for e in tl101.window} >= {"aten::item"}
    assert [r.finding.code for r in result.runtime] == ["TLR01"]
    # the Dataset's sleep is a hot line nobody flagged, spent inside DataLoader fetches
    (sleep,) = [h for h in result.hotspots if "time.sleep" in h.source_line]
    assert sleep.function == "__getitem__" and sleep.dataloader_s == pytest.approx(sleep.self_s)


def test_session_round_trip(tmp_path):
    s = ProfileSession.from_dict(json.loads(RECORDED.read_text()))
    s.save(tmp_path / "s.json")
    again = ProfileSession.load(tmp_path / "s.json")
    assert again.to_dict() == s.to_dict()
    newer = dict(s.to_dict(), schema_version=99)
    with pytest.raises(ValueError, match="newer"):
        ProfileSession.from_dict(newer)


def test_reports_render_the_same_content(project):
    cwd, script = project
    s = session_for(cwd, [
        hot("probe", script, 11, "DataLoader.__next__", calls=10, total=3.0),
        hot("probe", script, 15, "Tensor.item", calls=10, total=0.01),
        hot("sampler", script, 13, total=2.0, self_s=2.0, samples=400),
    ], dataloader={"wait_share": 0.3, "fetch_s": 3.0}, steps={"count": 10})
    fs = [finding("TL201", "train.py", 4, related=[Location("train.py", 11, 9)]), finding("TL101", "train.py", 15),
          finding("TL303", "train.py", 2)]
    result = analyse(fs, s)
    report = profile_json.build(result, s, run_dir=str(cwd / "run"), static={"available": True, "files_checked": 1},
                                artifacts={"profile": "profile.prof"}, snakeviz={"command": "snakeviz x", "launched": False})
    data = json.loads(profile_json.render(report))
    assert data["schema"] == "torchlint.profile-report" and data["schema_version"] == 2
    assert [f["code"] for f in data["findings"]] == ["TL201", "TL101", "TL303"]
    f0 = data["findings"][0]
    for key in ("code", "path", "line", "message", "calls", "self_s", "total_s", "share", "evidence"):
        assert key in f0
    text = profile_text.render(data)
    assert text.index("TL201") < text.index("TL101") < text.index("TL303")
    assert "train.py:13" in text and "TLR01" in text and "snakeviz x" in text
    assert "whole script" in text  # coverage of each profiler is stated


def test_display_path():
    assert display_path("/a/b/c.py", "/a") == "b/c.py"
    assert display_path("/x/c.py", "/a") == "/x/c.py"


def test_runtime_modules_import_neither_torch_nor_libcst_nor_snakeviz():
    code = (
        "import sys\n"
        "import torchlint.profiler, torchlint.cli.profile, torchlint.profiler.run\n"
        "import torchlint.correlate, torchlint.report.profile_text, torchlint.report.profile_json\n"
        "bad = sorted(m for m in ('torch', 'libcst', 'snakeviz', 'tornado') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
