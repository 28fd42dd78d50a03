"""report.html from a real profiled run (conftest.html_run): a DOM-level check with
html.parser that always runs, and a headless-browser check where one is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote
from urllib.request import url2pathname

import pytest

from conftest import run_cli

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}
ALLOWED_REMOTE = {"https://ui.perfetto.dev"}


class Page(HTMLParser):
    """Tags must balance; collects every src/href and the step chart's parts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.polylines: list[dict[str, str]] = []
        self.step_dots = 0
        self.flame: list[dict[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("src", "href"):
            if key in a:
                self.urls.append((tag, key, a[key]))
        if tag == "polyline" and a.get("class") == "steps":
            self.polylines.append(a)
        if tag == "circle" and a.get("class") == "step":
            self.step_dots += 1
        if tag == "div" and a.get("class", "").startswith("fg "):
            self.flame.append(a)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


@pytest.fixture(scope="module")
def page(html_run: Path) -> tuple[str, Page]:
    html = (html_run / "report.html").read_text(encoding="utf-8")
    return html, _parse(html)


def test_page_is_well_formed_and_self_contained(page):
    html, parsed = page
    assert parsed.errors == [] and parsed.stack == []
    remote = [u for u in parsed.urls if re.match(r"(?i)https?:", u[2]) and u[2] not in ALLOWED_REMOTE]
    assert remote == []
    assert not any(tag in ("script", "link", "img") for tag, _attr, _url in parsed.urls)  # CSS, JS inline
    assert "<style>" in html and "<script>" in html
    assert ("a", "href", "https://ui.perfetto.dev") in parsed.urls


def test_page_names_the_top_finding_with_its_source(page, html_run):
    html, parsed = page
    report = json.loads((html_run / "report.json").read_text())
    top = min((f for f in report["findings"] if f.get("rank") is not None), key=lambda f: f["rank"])
    text = "".join(parsed.text)
    assert f"{top['path']}:{top['line']}:{top['column']}" in text and top["code"] in text
    assert escape(top["message"]) in html
    source_line = (html_run.parent / top["path"]).read_text().splitlines()[top["line"] - 1]
    assert f'<span class="hit">{top["line"]:>5}  {escape(source_line)}</span>' in html
    # the rule's page, linked from its finding
    assert any(u[2].endswith(f"/rules/{top['code']}-{top['name']}.md") for u in parsed.urls)
    # the figures as report.json has them
    assert "expected saving" in text and "observed" in text


def test_step_chart_has_one_point_per_recorded_step(page, html_run):
    _html, parsed = page
    durations = json.loads((html_run / "session.json").read_text())["steps"]["durations_s"]
    assert len(durations) == 7  # 8 steps: one time between each two
    (line,) = parsed.polylines
    assert int(line["data-steps"]) == len(line["points"].split()) == len(durations) == parsed.step_dots


def test_flame_graph_and_module_breakdown(page, html_run):
    html, parsed = page
    labels = [d["title"] for d in parsed.flame]
    assert parsed.flame[0]["class"] == "fg root" and parsed.flame[0]["data-w"] == "1.000000"
    assert any(t.startswith("main (mlp_slow_loader.py:") for t in labels)
    assert any(d["class"] == "fg torch" for d in parsed.flame)
    modules = json.loads((html_run / "session.json").read_text())["torch_window"]["modules"]
    names = {m["module"] for m in modules}
    assert {"Sequential", "Sequential.0", "Sequential.2"} <= names
    assert all(m["calls"] == 3 for m in modules if m["module"].startswith("Sequential"))  # 3 active steps
    assert "<code>Sequential.0</code>" in html


def test_rebuilding_with_report_writes_the_same_page(html_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(html_run, copy)
    (copy / "report.html").unlink()
    rc, out, err = run_cli(html_run.parent, "profile", "--report", str(copy), "--no-browser")  # runs nothing: in this process
    assert rc == 0, err
    assert f"HTML report: {(copy / 'report.html').resolve().as_uri()}" in out
    assert "report.html" in out.split("Run directory:")[1].splitlines()[1]  # the text report's file list
    original = (html_run / "report.html").read_text()
    rebuilt = (copy / "report.html").read_text()
    # the same page but for where the run directory now is
    assert rebuilt.replace(str(copy.resolve()), str(html_run.resolve())) == original


def test_open_without_a_browser_prints_the_path(html_run):
    # runs nothing: in this process, with no display, CI or SSH session in its environment
    unset = dict.fromkeys(("CI", "DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_TTY", "SSH_CLIENT"))
    rc, _out, err = run_cli(html_run.parent, "profile", "--report", str(html_run), "--no-browser", "--open", env=unset)
    assert rc == 0 and "Traceback" not in err
    assert f"could not open a browser (no display); the report: {(html_run / 'report.html').resolve().as_uri()}" in err


def test_old_run_directory_with_trace_json(html_run, tmp_path):
    """A run made before the traces/ layout still reports, its trace linked by its old name."""
    old = tmp_path / "old"
    shutil.copytree(html_run, old)
    session = json.loads((old / "session.json").read_text())
    (trace,) = session["artifacts"]["traces"]
    (old / trace).rename(old / "trace.json")
    shutil.rmtree(old / "traces")
    session["artifacts"]["traces"] = ["trace.json"]
    session["coverage"]["torch_profiler"]["cycles"][0]["trace"] = "trace.json"
    for name in ("samples.speedscope.json", "samples.collapsed.txt", "report.html"):
        (old / name).unlink()
    (old / "session.json").write_text(json.dumps(session))
    rc, out, err = run_cli(html_run.parent, "profile", "--report", str(old), "--no-browser", "--output-format", "json")
    assert rc == 0, err
    report = json.loads(out)
    assert report["artifacts"]["traces"] == ["trace.json"] and report["torch_window"]["ops"]
    html = (old / "report.html").read_text()
    assert '<a href="trace.json">' in html and "no sampled stacks" in html
    assert _parse(html).errors == []


def _browser() -> str | None:
    found = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if found is None and os.environ.get("TORCHLINT_REQUIRE_BROWSER"):
        pytest.fail("TORCHLINT_REQUIRE_BROWSER is set (.ci/run installed Chromium) but no browser is on PATH")
    return found


@pytest.mark.skipif(_browser() is None, reason="no chromium or google-chrome on PATH: the DOM-level tests above stand in")
def test_page_loads_in_a_headless_browser_without_console_errors(html_run, tmp_path):
    """The page as a browser builds it (scripts run): no console error, a card for every
    ranked finding, the step chart and the flame graph drawn, and every link resolves."""
    report = json.loads((html_run / "report.json").read_text())
    ranked = [f for f in report["findings"] if f.get("rank") is not None]
    proc = subprocess.run(
        [_browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", (html_run / "report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    dom = _parse(proc.stdout)
    text = "".join(dom.text)
    assert ranked and all(f"{f['path']}:{f['line']}:{f['column']}" in text for f in ranked)
    ids = set(re.findall(r'\bid="([^"]+)"', proc.stdout))
    assert all(f"{f['code']}-{f['path']}:{f['line']}:{f['column']}" in ids for f in ranked)  # one card each
    assert len(dom.polylines) == 1 and dom.step_dots == int(dom.polylines[0]["data-steps"]) > 0
    assert dom.flame and dom.flame[0]["class"] == "fg root"
    for _tag, _attr, url in dom.urls:
        if url.startswith("#"):
            assert url[1:] in ids, url
        elif url.startswith("file:"):
            assert Path(url2pathname(unquote(url.removeprefix("file://")))).is_file(), url
        elif not re.match(r"(?i)(https?|data|javascript|mailto):", url):
            assert (html_run / url).is_file(), url


# -- the parts, on synthetic input ----------------------------------------------------


def test_step_chart_marks_every_window_and_the_experiment():
    from torchlint.report import svg

    durations = [0.1] * 18 + [0.5]  # steps 2..20
    windows = [{"steps": [3, 7], "eval": False}, {"steps": [], "eval": True, "after_step": 20}]
    chart = svg.step_chart(durations, windows, {"mode": "steps", "max_steps": 12, "warmup": 2})
    parsed = _parse(chart)
    assert parsed.errors == [] and parsed.stack == []
    assert int(parsed.polylines[0]["data-steps"]) == 19 == parsed.step_dots
    assert chart.count('class="band-window"') == 1 and chart.count('class="band-eval"') == 1
    assert "experiment: 12-step windows compare steps 3-12" in chart and "torch.profiler window, steps 3-7" in chart
    # the slowest step is drawn highest (smallest y)
    ys = [float(p.split(",")[1]) for p in parsed.polylines[0]["points"].split()]
    assert ys.index(min(ys)) == 18
    assert "fewer than two optimizer steps" in svg.step_chart([], windows, None)


def test_flame_graph_widths_are_shares_and_tiny_frames_are_left_out():
    from torchlint.report import svg

    stacks = [([("main", "user"), ("[torch]", "torch")], 3.0), ([("main", "user"), ("step", "user")], 1.0),
              ([("other", "user")], 0.001)]  # 0.025 % of the samples: not drawn
    parsed = _parse(svg.flame_graph(stacks))
    cells = {d["title"].split(":")[0]: d for d in parsed.flame}
    assert set(cells) == {"all samples", "main", "[torch]", "step"}
    assert float(cells["main"]["data-w"]) == pytest.approx(4.0 / 4.001, abs=1e-6)
    assert float(cells["[torch]"]["data-w"]) == pytest.approx(3.0 / 4.001, abs=1e-6)
    # children sit side by side under their parent, the heaviest first
    assert float(cells["step"]["data-x"]) == pytest.approx(float(cells["[torch]"]["data-w"]), abs=1e-6)
    assert cells["[torch]"]["data-d"] == cells["step"]["data-d"] == "2"
    assert "<b>" not in svg.flame_graph([([("<b>", "user")], 1.0)])  # names are escaped


def test_module_timer_names_modules_by_their_path():
    torch = pytest.importorskip("torch")
    from torch import nn

    from torchlint.profiler.modules import ModuleTimer

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            self.head = nn.Linear(4, 2)
            self.boom = Boom()

        def forward(self, x, fail=False):
            if fail:
                try:
                    self.boom(x)
                except ValueError:
                    pass
            return self.head(self.features(x))

    net, timer = Net(), ModuleTimer()
    net(torch.randn(2, 4))  # before start(): not counted
    timer.start()
    net(torch.randn(2, 4), fail=True)  # a forward that raised leaves no stale entry behind
    net(torch.randn(2, 4))
    timer.stop()
    net(torch.randn(2, 4))  # after stop(): not counted, hooks gone
    rows = {r["module"]: r for r in timer.summary()}
    # Net.boom raised: it is not timed, and the modules after it are still Net's
    assert set(rows) == {"Net", "Net.features", "Net.features.0", "Net.features.1", "Net.head"}
    assert all(r["calls"] == 2 for r in rows.values())
    net_row, children = rows["Net"], [rows["Net.features"], rows["Net.head"]]
    assert net_row["total_s"] >= sum(c["total_s"] for c in children)
    assert net_row["self_s"] == pytest.approx(net_row["total_s"] - sum(c["total_s"] for c in children), abs=1e-3)
    assert not timer.active and timer._stack == []
