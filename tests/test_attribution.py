"""Attribution defects of `torchlint profile` (issue 8): each test fails without its fix.

The line sampler test runs a pure-Python script in-process (no torch); the others
read small real sessions or synthetic ones.
"""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

from torchlint.profiler.sampler import LineSampler

GIL_SCRIPT = textwrap.dedent(
    """\
    big = list(range(2_000_000))

    def work():
        for _ in range(5):
            z = big * 5
            w = [i for i in range(150_000)]
        return z, w

    work()
    """
)


def _self_by_line(tmp_path: Path) -> dict[int, float]:
    script = tmp_path / "gil_bound.py"
    script.write_text(GIL_SCRIPT)
    s = LineSampler(None, interval=0.002)
    s.start()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        s.stop()
    out: dict[int, float] = {}
    for h in s.hotspots():
        if h.path == str(script):
            out[h.line] = out.get(h.line, 0.0) + h.self_s
    return out


def test_sampler_charges_a_gil_holding_line_to_itself_not_the_next(tmp_path):
    """``big * 5`` keeps the GIL with no eval-breaker check, so the sampler only gets
    to look at the next line; py-spy (which needs no GIL) puts most of the time on
    line 5. Without the fix line 5 got nothing and line 6 everything."""
    by_line = _self_by_line(tmp_path)
    heavy, light = by_line.get(5, 0.0), by_line.get(6, 0.0)
    assert heavy > light, by_line
    assert heavy > 0.5 * (heavy + light), by_line
