"""`torchlint profile` on a compiled training script, on the CPU: its graph breaks (TLR14) and
recompilations (TLR15) at the right lines, in report.json and the text report, and the
profiler's own instruments invisible to torch.compile.

One run of fixtures/scripts/compiled_train.py (backend="aot_eager": inductor's C++ code
generation takes tens of seconds on a 2-core CPU; dynamo's breaks and guards, which these
findings are about, are the same), 8 steps, a 4-step window.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from conftest import FIXTURES, ahead, child_env

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SCRIPT = FIXTURES / "scripts" / "compiled_train.py"
SOURCE = SCRIPT.read_text(encoding="utf-8").splitlines()


def _line(needle: str) -> int:
    return next(n for n, text in enumerate(SOURCE, 1) if needle in text)


ITEM_LINE = _line("if h.mean().item() > 0.5:")
PRINT_LINE = _line('print(f"activation mean')
FORWARD_LINE = _line("def forward(self, x, scale):")
REPORT_LINE = _line("def report(h):")
CALL_LINE = _line("loss = compiled(x, scale)")


@ahead()
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("compiled")
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    out = cwd / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--out", str(out), "--wait", "1", "--warmup", "1",
         "--active", "4", SCRIPT.name, "--steps", "8"],
        cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"proc": proc, "report": json.loads((out / "report.json").read_text()), "text": (out / "report.txt").read_text(),
            "session": json.loads((out / "session.json").read_text()), "dir": out}


def _runtime(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["runtime_findings"] if f["code"] == code]


def test_the_script_runs_as_it_does_without_torchlint(run: dict[str, Any]) -> None:
    assert "trained 8 steps" in run["proc"].stdout
    assert run["report"]["run"]["stop_reason"] == "completed" and run["report"]["run"]["steps"] == 8


def test_the_item_graph_break_at_its_line_with_torch_reason_and_crossings(run: dict[str, Any]) -> None:
    at = [f for f in _runtime(run["report"], "TLR14") if f["line"] == ITEM_LINE]
    assert len(at) == 1, [(f["line"], f["message"]) for f in _runtime(run["report"], "TLR14")]
    f = at[0]
    assert f["path"] == SCRIPT.name and "Tensor.item()" in f["message"] and "`forward()`" in f["message"]
    assert "crossed 1 time a step" in f["message"]  # once per forward, and one forward per step
    assert "compile-graph-break-site" in f["fix_hint"]  # torch's own page on the break
    assert f["expected"]["bound"] is False and f["expected"]["total"] > 0
    assert f["evidence"][0]["source"] == "compile" and f["evidence"][0]["calls"] == 8
    assert f["rank"] is None  # TL504 found the same break statically: it ranks there, once


def test_a_break_inside_a_called_helper_is_at_the_helper_line(run: dict[str, Any]) -> None:
    at = [f for f in _runtime(run["report"], "TLR14") if f["line"] == PRINT_LINE]
    assert len(at) == 1
    assert "`report()`" in at[0]["message"] and "print" in at[0]["fix_hint"]
    assert "crossed 1 time a step" in at[0]["message"]
    assert len(_runtime(run["report"], "TLR14")) == 2  # no break of torchlint's own


def test_recompilations_name_the_guard_at_the_compiled_function(run: dict[str, Any]) -> None:
    at = {(f["line"], f["message"].split(" because ")[1].split(":")[0]): f for f in _runtime(run["report"], "TLR15")}
    shape = at[(FORWARD_LINE, "a tensor's shape changed")]
    assert "tensor 'x' 8 -> 12" in shape["message"]  # the batch size
    value = next(f for (line, kind), f in at.items() if line == FORWARD_LINE and kind.startswith("a Python value"))
    assert f"scale == 1 (read at line {_line('return self.fc2(h) * scale')})" in value["message"]
    for f in (shape, value):
        assert f["expected"]["bound"] is True and f["expected"]["total"] > 0  # measured compile time
        assert all(e["source"] == "compile" and e["total_s"] > 0 for e in f["evidence"])
        assert f["rank"] is not None


def test_the_compile_section_and_the_text_report(run: dict[str, Any]) -> None:
    c = run["report"]["compile"]
    assert c["compile_s"] > 0 and c["compilations"] >= 4 and c["recompilations"] >= 3 and c["graph_breaks"] == 2
    breaks = [f for f in run["report"]["runtime_findings"] if f["code"] == "TLR14"]
    assert c["between_graphs_s"] == pytest.approx(sum(f["cost_s"] for f in breaks)) and c["between_graphs_s"] > 0
    forward = next(fn for fn in c["functions"] if fn["function"] == "forward")
    assert forward["line"] == FORWARD_LINE and forward["called_at"] == {"path": SCRIPT.name, "line": CALL_LINE}
    assert not c["errors"], c["errors"]
    text = run["text"]
    for line in (ITEM_LINE, PRINT_LINE, FORWARD_LINE):
        assert f"{SCRIPT.name}:{line}:1  TLR1" in text
    assert "torch.compile (compile time" in text


def test_torchlint_left_no_trace_in_what_dynamo_compiled(run: dict[str, Any]) -> None:
    """Dynamo compiled only the user's frames: no probe, hook or trace function of torchlint's
    (they run as they are, and dynamo traces through the wrappers), and no break is theirs."""
    compile_data = run["session"]["meta"]["compile"]
    for record in compile_data["compiles"]:
        assert "torchlint" not in str(record["path"] or "") and "torchlint" not in str(record["frame"] or ""), record
    for brk in compile_data["graph_breaks"]:  # where dynamo broke, and the frame it traced then
        assert "torchlint" not in str(brk["at"][0]) and "torchlint/" not in str(brk["frames"][-1][0]), brk
    # the global module hooks stay off in a compiling script: dynamo would trace them
    assert not run["report"]["modules"]
    assert any("module times not recorded" in w for w in run["report"]["run"]["warnings"])


def test_the_static_graph_break_findings_take_the_measurements(run: dict[str, Any]) -> None:
    """TL504 finds both breaks without running the script (the `.item()` in the compiled
    forward, the `print` in the helper it calls); the run joins them by file:line: each
    takes its break's measurements and ranks, and the TLR14 at its line is shown, not
    ranked again."""
    static = {f["line"]: f for f in run["report"]["findings"] if f["code"] == "TL504"}
    assert set(static) == {ITEM_LINE, PRINT_LINE}, static
    runtime = {f["line"]: f for f in _runtime(run["report"], "TLR14")}
    for line, finding in static.items():
        assert [e["source"] for e in finding["evidence"]] == ["compile"] and finding["evidence"][0]["calls"] == 8
        assert finding["rank"] is not None and finding["expected"]["total"] == pytest.approx(runtime[line]["expected"]["total"])
        assert runtime[line]["rank"] is None
    assert "`Net.forward()` (compiled by `torch.compile(model)`" in static[ITEM_LINE]["message"]
