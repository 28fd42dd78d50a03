"""The files other tools read: the sampler's stacks as speedscope JSON and collapsed
stacks, and the torch.profiler traces in the layout of torch's tensorboard_trace_handler
(TensorBoard's profiler plugin, HTA)."""

from __future__ import annotations

import json
import re
import runpy
import textwrap
from pathlib import Path

import pytest

from torchlint.profiler import sampler as sampler_module
from torchlint.profiler import stacks
from torchlint.profiler.sampler import LIB_GROUP, OTHER, LineSampler

SCHEMA = Path(__file__).parent / "data" / "speedscope-schema.json"

NESTED = textwrap.dedent(
    """\
    import copy

    def inner():
        t = 0
        for i in range(300_000):
            t += i * i
        return t

    class Box:
        def __deepcopy__(self, memo):
            return inner()

    def outer():
        for _ in range(3):
            inner()
            copy.deepcopy(Box())

    outer()
    """
)


def _validate(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    (profile,) = doc["profiles"]
    assert len(profile["samples"]) == len(profile["weights"])  # what the schema cannot say
    assert all(0 <= i < len(doc["shared"]["frames"]) for s in profile["samples"] for i in s)
    assert profile["endValue"] == pytest.approx(sum(profile["weights"]))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> tuple[LineSampler, Path]:
    tmp = tmp_path_factory.mktemp("nested")
    script = tmp / "nested.py"
    script.write_text(NESTED)
    s = LineSampler(None, interval=0.002)
    s.start()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        s.stop()
    return s, script


def test_stacks_are_outermost_first_with_library_frames_folded(sampled):
    s, script = sampled
    path = str(script)
    # in this process the test's own frames and runpy come first: look from the script on
    names = set()
    for stack in s.stacks:
        start = next((i for i, f in enumerate(stack) if f[0] == path), None)
        if start is not None:
            names.add(tuple(f[2] or f[0] for f in stack[start:]))
        assert all(not (a is b is LIB_GROUP) for a, b in zip(stack, stack[1:]))  # a run of them is one
    # inner() called from outer() directly, and through copy.deepcopy (stdlib: one [lib] frame)
    assert ("<module>", "outer", "inner") in names
    assert ("<module>", "outer", "[lib]", "__deepcopy__", "inner") in names
    # every sampled second is in a stack
    assert sum(s.stacks.values()) == pytest.approx(s.sampled_s, rel=0.05)


def test_speedscope_and_collapsed_files(sampled, tmp_path):
    s, script = sampled
    names = stacks.write(tmp_path, s.stacks, cwd=str(script.parent), name="nested.py", exporter="torchlint test")
    assert names == [stacks.SPEEDSCOPE_FILE, stacks.COLLAPSED_FILE]
    doc = json.loads((tmp_path / stacks.SPEEDSCOPE_FILE).read_text())
    _validate(doc)
    assert doc["profiles"][0]["unit"] == "seconds"
    assert stacks.read_speedscope(tmp_path / stacks.SPEEDSCOPE_FILE) == pytest.approx(s.stacks)
    lines = (tmp_path / stacks.COLLAPSED_FILE).read_text().splitlines()
    parsed = [re.fullmatch(r"(.+) (\d+)", line) for line in lines]
    assert all(parsed)
    total_us = sum(int(m.group(2)) for m in parsed)
    assert total_us == pytest.approx(sum(s.stacks.values()) * 1e6, abs=len(lines))
    assert any(re.search(r"(^|;)<module> \(nested\.py:\d+\);outer \(nested\.py:\d+\);inner \(nested\.py:\d+\)$",
                         m.group(1)) for m in parsed)


def test_distinct_stacks_are_bounded(monkeypatch):
    monkeypatch.setattr(sampler_module, "MAX_STACKS", 3)
    s = LineSampler(None)
    for i in range(10):
        s._add_stack([("f.py", i, "g")], 0.5)
    assert len(s.stacks) == 4 and s.stacks[OTHER] == pytest.approx(3.5)
    assert sum(s.stacks.values()) == pytest.approx(5.0)


def test_real_run_writes_valid_speedscope(html_run):
    doc = json.loads((html_run / stacks.SPEEDSCOPE_FILE).read_text())
    _validate(doc)
    frames = doc["shared"]["frames"]
    assert any(f["name"] == "main" and f["file"].endswith("mlp_slow_loader.py") for f in frames)
    assert {"name": "[torch]"} in frames
    session = json.loads((html_run / "session.json").read_text())
    assert sum(doc["profiles"][0]["weights"]) <= session["coverage"]["sampler"]["sampled_s"] + 1e-9


# -- the traces --------------------------------------------------------------------


def _window_dir(run: Path) -> Path:
    (trace,) = json.loads((run / "report.json").read_text())["artifacts"]["traces"]
    return (run / trace).parent


def test_trace_layout_names_worker_and_rank(html_run):
    (path,) = _window_dir(html_run).iterdir()
    # TensorBoard's profiler plugin: <worker>[.<span>].pt.trace.json in a run folder
    assert re.fullmatch(r"[^.]+\.\d+\.pt\.trace\.json", path.name)
    assert _window_dir(html_run).parent.name == "traces"
    data = json.loads(path.read_text())
    assert data["distributedInfo"]["rank"] == 0 and data["distributedInfo"]["world_size"] == 1


def test_hta_reads_the_trace(html_run):
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(_window_dir(html_run)))
    assert list(analysis.t.traces) == [0]
    df = analysis.t.get_trace(0)
    names = {analysis.t.symbol_table.sym_table[i] for i in df["name"].unique()}
    assert "aten::addmm" in names and any(n.startswith("torchlint mlp_slow_loader.py:") for n in names)


def test_tensorboard_profiler_plugin_reads_the_trace(html_run):
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.io.cache import Cache
    from torch_tb_profiler.profiler.loader import RunLoader

    cache = Cache()
    run = RunLoader("window-1", str(_window_dir(html_run)), cache).load()
    (profile,) = run.get_profiles()
    assert {v.name for v in profile.views} >= {"overall", "operator", "trace"}
    ops = {row["name"] for row in profile.operation_table_by_name["data"]}
    assert "aten::addmm" in ops
