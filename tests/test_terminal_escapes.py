"""No control sequence from checked source, file names or config values reaches a terminal
raw: every text output escapes them (torchlint/terminal.py), every machine format stays
valid and exact. Parametrised over report.FORMATS, so a new format is covered by itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from conftest import ROOT, ahead, child_env
from torchlint.cli import main
from torchlint.report import FORMATS, HUMAN_FORMATS
from torchlint.terminal import SafeStream, json_safe, printable, xml_safe

# What a terminal acts on: C0 but tab and newline, DEL, C1, the bidi overrides and isolates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile("\x1b\\[[0-9;]*m")  # torchlint's own colours, when colour is forced

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write the clipboard
CLEAR = "\x1b[2J"
TITLE = "\x1b]0;title\x07"
LINK = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 hyperlink
CSI_8BIT = "\x9b31m"  # C1 CSI
RLO = "\u202e"  # Trojan Source
CONCEAL = "\x1b[8m"  # a colour code (SGR) torchlint never writes: hides what follows
MARKUP = "[link=file:///etc/passwd]x[/link][bold]b[/bold]"
HOSTILE = CLIPBOARD + CLEAR + TITLE + LINK + CSI_8BIT + RLO + CONCEAL + "\x7f"  # no CR: Python would end the line there

QUOTED = "\x1b]0;t\x07\u202e\x9b\x1b[8m"  # short enough for a message to quote it whole
NAME = f"t{TITLE}{RLO}{CSI_8BIT}{CONCEAL}.py"
SOURCE = f"""import torch
# {HOSTILE} {MARKUP}


def train(model, loader, opt):
    for x in loader:
        loss = model(x)
        print(loss.item(), r"{HOSTILE}")  # noqa:{TITLE} {HOSTILE}
        z = torch.zeros(len(r"{QUOTED}")).cuda()  # {MARKUP}
        opt.step()  # noqa {TITLE}
"""


def assert_safe(text: str, colour: bool = False) -> None:
    if colour:
        text = SGR.sub("", text)
    found = UNSAFE.findall(text)
    assert not found, f"raw control characters reach the terminal: {found!r}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / NAME).write_text(SOURCE, encoding="utf-8")
    return tmp_path


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", "--no-cache", "--min-impact", "low", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("colour", ["never", "always"])
@pytest.mark.parametrize("output_format", sorted(FORMATS))
def test_every_format_escapes_what_it_quotes(project: Path, output_format: str, colour: str) -> None:
    code, out, err = run(project, "--output-format", output_format, "--color", colour, "src")
    assert code == 1, err
    coloured = colour == "always" and output_format in HUMAN_FORMATS
    assert_safe(out, coloured)
    assert_safe(err)
    if coloured:
        assert SGR.search(out), "colour was forced: torchlint's own colour codes stay"
        assert CONCEAL not in out, "a colour code from the source passed as torchlint's own"
    if output_format in ("full", "text"):
        assert MARKUP in out  # shown as written: no markup is interpreted
        assert "\\x1b]52;c;ZXZpbA==\\x07" in out and "\\u202e" in out and "\\x9b31m" in out


@pytest.mark.parametrize("output_format", sorted(set(FORMATS) - HUMAN_FORMATS - {"github"}))
def test_machine_formats_stay_valid_and_exact(project: Path, output_format: str) -> None:
    _, out, _ = run(project, "--output-format", output_format, "src")
    if output_format == "junit":
        root = ET.fromstring(out)  # XML 1.0 cannot hold C0 controls: they were escaped validly
        names = {suite.get("name") for suite in root.iter("testsuite")}
        # C0 controls cannot be carried: visible; C1 and bidi controls round-trip exactly.
        assert names == {re.sub("[\x00-\x1f]", lambda m: f"\\x{ord(m.group()):02x}", f"src/{NAME}")}
        return
    documents = [json.loads(line) for line in out.splitlines()] if output_format == "json-lines" else [json.loads(out)]
    values = set(strings(documents))
    assert any(unquote(value).endswith(NAME) for value in values)  # the file's real name (SARIF: its URI)
    assert any(f"torch.zeros(len(r\"{QUOTED}\"))" in value for value in values)  # TL110's message quotes the call


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [text for item in items for text in strings(item)]


def test_statistics_show_fixes_and_show_files(project: Path) -> None:
    for args in (["--statistics"], ["--statistics", "--output-format", "json"], ["--show-fixes"], ["--show-files"]):
        _, out, err = run(project, *args, "src")
        assert_safe(out)
        assert_safe(err)
    _, out, _ = run(project, "--show-files", "src")
    assert out.strip() == printable(f"src/{NAME}", one_line=True)


def test_errors_and_warnings_on_stderr(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchlint.engine import suppress

    monkeypatch.setattr(suppress, "_warned", set())  # warned once per process: earlier tests named the same line
    (project / "pyproject.toml").write_text(f'[tool.torchlint]\nselect = ["{TITLE.replace(chr(7), "")}{CLEAR}"]\n', encoding="utf-8")
    code, out, err = run(project, "src", f"missing{CLEAR}{TITLE}.py")
    assert code == 2 and "torchlint: error" in err
    assert_safe(out)
    assert_safe(err)
    (project / "pyproject.toml").unlink()
    code, out, err = run(project, "-j", "1", "src")  # the malformed `# noqa:` is warned of in this process
    assert code == 1 and "malformed `# noqa:\\x1b]0;title\\x07`" in err
    assert_safe(err)


def test_diff_is_exact_into_a_pipe(project: Path) -> None:
    """A patch must apply: into a pipe the diff is byte for byte (on a terminal, escaped)."""
    code, out, _ = run(project, "--diff", "src")
    assert code == 1 and f"{HOSTILE}" in out


def test_a_terminal_gets_only_escapes_and_torchlint_own_colours() -> None:
    class Terminal:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    stream = SafeStream(terminal)  # type: ignore[arg-type]
    stream.write(f"\x1b[1mbold\x1b[0m {HOSTILE}\n")
    stream.write_exact(f"+ {HOSTILE}\n")  # a diff shown on a terminal
    assert terminal.text.startswith("\x1b[1mbold\x1b[0m \\x1b]52;c;")
    assert_safe(terminal.text, colour=True)
    assert terminal.text.count("\n") == 2


def test_machine_escapes_keep_the_value() -> None:
    value = {"m": HOSTILE + "\u2028"}
    assert json.loads(json_safe(json.dumps(value, ensure_ascii=False))) == value
    element = ET.Element("e", a=HOSTILE.replace("\x1b", "").replace("\x07", ""))
    element.text = CSI_8BIT + RLO + "\r"
    parsed = ET.fromstring(xml_safe(ET.tostring(element, encoding="unicode")))
    assert parsed.text == CSI_8BIT + RLO + "\r"
    assert parsed.get("a") == element.get("a").replace("\r", "\r")
    assert_safe(xml_safe(ET.tostring(element, encoding="unicode")))


@ahead()
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """`profile` of a script whose name, arguments and source hold escape sequences (it prints
    nothing itself): (the run, the script, the run directory)."""
    pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp("hostile")
    script = tmp_path / f"p{TITLE}{RLO}.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(20):\n"
        "    loss = model(torch.randn(8, 4)).sum()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        f"    v = loss.item(); s = {HOSTILE!r}  # {HOSTILE} {MARKUP}\n",
        encoding="utf-8",
    )
    env = {**child_env(), "OMP_NUM_THREADS": "1"}  # the imports made ahead unprofiled, as the suite's other runs
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--out", str(run_dir), str(script), f"arg{CLEAR}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    return done, script, run_dir


@pytest.mark.slow
def test_profile_text_report_and_console(hostile_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    """`profile`: its console output (stdout and stderr), report.txt and report.html."""
    done, script, run_dir = hostile_run
    assert done.returncode == 0, done.stderr
    assert "\\x1b]0;title\\x07" in done.stdout  # the script's name, visible
    assert_safe(done.stdout)
    assert_safe(done.stderr)
    assert_safe((run_dir / "report.txt").read_text(encoding="utf-8"))
    assert_safe((run_dir / "report.html").read_text(encoding="utf-8"))  # a browser acts on bidi overrides
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    assert report["run"]["script"].endswith(script.name)  # JSON keeps the exact name


def test_watch(project: Path) -> None:
    """`check --watch`: each run's report and its own messages, as the other runs'."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "check", "--watch", "--no-cache", "--output-format", "concise", "src"],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline, seen = time.monotonic() + 60, bytearray()
        while time.monotonic() < deadline and process.poll() is None and not _watching(process, seen):
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    text_out, text_err = out.decode("utf-8"), (bytes(seen) + err).decode("utf-8")
    assert "TL101" in text_out and "watching for changes" in text_err, (text_out, text_err)
    assert_safe(text_out)
    assert_safe(text_err)


def _watching(process: subprocess.Popen[bytes], seen: bytearray) -> bool:
    """Whether the first run is over: its line on stderr, "watching for changes", is there
    (not just any stderr: the run warns of a malformed `# noqa` before its report is out,
    and a Ctrl-C then would stop the run itself). What is read is kept in ``seen``."""
    import select

    assert process.stderr is not None
    while select.select([process.stderr], [], [], 0)[0]:
        chunk = os.read(process.stderr.fileno(), 65536)
        if not chunk:
            break
        seen.extend(chunk)
    return b"watching for changes" in seen


def test_carets_stay_under_the_flagged_code_after_escapes(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(f'import torch\nfor i in range(3):\n    s = "{CLEAR}{RLO}"; z = torch.zeros(3).cuda()\n', encoding="utf-8")
    _, out, _ = run(tmp_path, "a.py")
    lines = out.splitlines()
    shown = next(line for line in lines if line.startswith("3 |"))
    carets = lines[lines.index(shown) + 1]
    assert "\\x1b[2J\\u202e" in shown
    assert carets.index("^") == shown.index("torch.zeros(3)") and carets.count("^") == len("torch.zeros(3)")
