"""torch facilities the torch.compile collection (profiler/compilewatch.py, traceregions.py)
stands on, checked against the installed torch so that a torch that renames or drops one
fails here, loudly, instead of giving an empty report; and the decisions on what they give.

One small compiled function (backend="eager": dynamo's graph breaks and guards without a
backend compile, which would take seconds) with a graph break and a recompilation, in this
process, under a CompileWatch and torch.profiler.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchlint.correlate.compiled import reason_parts  # noqa: E402
from torchlint.correlate.guards import guard_of  # noqa: E402
from torchlint.profiler import compilewatch  # noqa: E402
from torchlint.profiler.traceregions import LOOKUP, REGION, RegionStats  # noqa: E402

pytestmark = pytest.mark.slow

SOURCE = Path(__file__).read_text(encoding="utf-8").splitlines()
BREAK_LINE = next(n for n, text in enumerate(SOURCE, 1) if text.endswith("> 0:  # graph break: .item()"))
SCALE_LINE = next(n for n, text in enumerate(SOURCE, 1) if text.strip() == "return y * scale")


def _compiled_with_a_break():  # type: ignore[no-untyped-def]
    def step(x, scale):
        y = x * 2
        if y.sum().item() > 0:  # graph break: .item()
            y = y + 1
        return y * scale

    return step


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The watch's records and a window's trace of a compiled function run with three
    batch sizes and two values of an int argument."""
    import torch._dynamo
    from torch._dynamo.utils import clear_compilation_metrics
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    clear_compilation_metrics()
    watch = compilewatch.CompileWatch()
    watch.install()
    try:
        step = torch.compile(_compiled_with_a_break(), backend="eager")
        for n, scale in ((4, 1), (4, 2), (6, 2)):  # an int that changes, then a size
            step(torch.ones(n), scale)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                step(torch.ones(6), 2)
        trace = tmp_path_factory.mktemp("trace") / "window.json"
        prof.export_chrome_trace(str(trace))
    finally:
        watch.finish()
        summary = watch.summary()
    return {"summary": summary, "trace": trace, "watch": watch}


def test_the_graph_breaks_logger_is_registered_and_restored(watched: dict[str, Any]) -> None:
    loggers = compilewatch.graph_break_loggers()
    assert loggers, "torch._logging has no graph_breaks artifact logger: graph breaks would go unrecorded"
    # after the run, torch's loggers are as they were: no handler of ours, nothing enabled
    assert all(watched["watch"].handler not in log.handlers for log in loggers)
    assert not any(log.isEnabledFor(logging.DEBUG) for log in loggers)
    assert not watched["summary"]["errors"], watched["summary"]["errors"]


def test_a_graph_break_is_recorded_at_the_user_line_with_torch_reason(watched: dict[str, Any]) -> None:
    breaks = watched["summary"]["graph_breaks"]
    assert len(breaks) == 1, breaks
    brk = breaks[0]
    assert brk["path"] == __file__ and brk["line"] == BREAK_LINE and brk["function"] == "step"
    head, more, url = reason_parts(brk["reason"])
    assert "Tensor.item()" in head
    assert url and url.startswith("https://")
    assert brk["compiles"] >= 2  # the first compilation and the recompilations of `step` meet it again
    assert all("/" in cid for cid in brk["compile_ids"])


def test_compilation_records_carry_what_the_findings_read(watched: dict[str, Any]) -> None:
    records = watched["summary"]["compiles"]
    frames = {r["frame"] for r in records if r["frame"]}
    assert "step" in frames and any(f.startswith("torch_dynamo_resume_in_step_at_") for f in frames)
    first = next(r for r in records if r["frame"] == "step")
    assert first["path"] == __file__ and first["user_code"] and first["seconds"] > 0
    reasons = [r["recompile_reason"] for r in records if r["recompile_reason"]]
    kinds = {guard_of(r).kind for r in reasons}
    assert {"shape", "value"} <= kinds, reasons
    value = next(guard_of(r) for r in reasons if guard_of(r).kind == "value")
    assert value.name == "scale" and value.used_at == (__file__, SCALE_LINE)


def test_compiled_regions_are_in_the_trace_and_nest_at_the_break(watched: dict[str, Any]) -> None:
    events = [e for e in json.loads(Path(watched["trace"]).read_text())["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert LOOKUP in names and any(n.startswith(REGION) for n in names), "dynamo's trace marks changed"
    stats = RegionStats()
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        by_thread.setdefault(e.get("tid"), []).append(e)
    for thread in by_thread.values():
        stats.read_thread(sorted(thread, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0)))))
    rows = stats.to_dict()
    nested = {cid: r for cid, r in rows.items() if r["nested"]}
    top = {cid: r for cid, r in rows.items() if not r["nested"]}
    assert sum(r["calls"] for r in top.values()) == 3  # three calls of the compiled function
    assert sum(r["nested"] for r in nested.values()) == 3  # each crossed the break once
    assert all(r["timed"] == r["calls"] for r in rows.values())  # nothing compiled in the window
    assert all(r["median_outside_s"] is not None and r["median_outside_s"] > 0 for r in nested.values())


def test_torchlint_frames_are_hidden_from_dynamo_frame_evaluation() -> None:
    from torch._dynamo.eval_frame import skip_code  # the marker compilewatch.skip_frames calls

    assert callable(skip_code)
    assert callable(torch.compiler.is_compiling)  # every wrapper checks it first


def test_a_region_run_that_compiled_is_counted_not_timed() -> None:
    """torch's own layout after a cache miss: the lookup, dynamo's compile, then the region."""
    def ev(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": 1}

    outer = [ev(LOOKUP, 0, 5), ev(REGION + "0/0", 10, 1000), ev("CompiledFunction", 20, 100)]
    miss = [ev(LOOKUP, 200, 5), ev("dynamo", 210, 600), ev(REGION + "1/0", 820, 150), ev("CompiledFunction", 830, 100)]
    hit = [ev(LOOKUP, 1200, 5), ev(REGION + "0/0", 1210, 400), ev("CompiledFunction", 1220, 100),
           ev(LOOKUP, 1400, 7), ev(REGION + "1/0", 1410, 150), ev("CompiledFunction", 1420, 100)]
    stats = RegionStats()
    stats.read_thread(sorted(outer + miss + hit, key=lambda e: (e["ts"], -e["dur"])))
    rows = stats.to_dict()
    assert rows["1/0"]["calls"] == 2 and rows["1/0"]["timed"] == 1 and rows["1/0"]["nested"] == 2
    # the timed crossing: the gap from the graph's end (1320) to the lookup (1400), the lookup, and
    # the resume's own time outside its graph (150 - 100)
    assert rows["1/0"]["gap_s"] == pytest.approx(80e-6)
    assert rows["1/0"]["median_outside_s"] == pytest.approx((80 + 7 + 50) * 1e-6)
    assert rows["0/0"]["timed"] == 1  # the first run compiled the resume function inside it
