"""ruff's habits on `torchlint check`: --watch, --exit-non-zero-on-fix, --per-file-ignores
on the command line, and --statistics telling safe fixes from unsafe ones."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from conftest import run_check
from torchlint.cli import main

CREATE_THEN_MOVE = "import torch\nx = torch.zeros(3).cuda()\n"
FIXED = 'import torch\nx = torch.zeros(3, device="cuda")\n'


def _lines(stream, into: queue.Queue[str]) -> None:  # type: ignore[no-untyped-def]
    for line in iter(stream.readline, ""):
        into.put(line)


def _wait_for(lines: queue.Queue[str], text: str, seen: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in seen):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{text!r} never came; saw: {seen}"
        try:
            seen.append(lines.get(timeout=remaining))
        except queue.Empty:
            pass


def test_watch_checks_again_when_a_file_changes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CREATE_THEN_MOVE)
    process = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "check", "--watch", "--min-impact", "low", "--output-format", "concise", "train.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, out), daemon=True).start()
    threading.Thread(target=_lines, args=(process.stderr, err), daemon=True).start()
    seen_out: list[str] = []
    seen_err: list[str] = []
    try:
        _wait_for(out, "train.py:2:5: TL110", seen_out)
        _wait_for(err, "watching for changes", seen_err)
        script.write_text(FIXED)  # edited while it runs
        _wait_for(out, "No problems found in 1 file.", seen_out)
        script.write_text(CREATE_THEN_MOVE + "y = torch.zeros(3).cuda()\n")
        _wait_for(out, "train.py:3:5: TL110", seen_out)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130  # Ctrl-C: the shell's status for it
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert not any("Traceback" in line for line in seen_err)


def test_exit_non_zero_on_fix(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(CREATE_THEN_MOVE)
    code, _, err = run_check(tmp_path, "--fix", "--min-impact", "low", "train.py")
    assert code == 0 and script.read_text() == FIXED and "Fixed 1" in err + _  # fixed, nothing left: 0, as before
    script.write_text(CREATE_THEN_MOVE)
    code, _, _ = run_check(tmp_path, "--fix", "--exit-non-zero-on-fix", "--min-impact", "low", "train.py")
    assert code == 1 and script.read_text() == FIXED
    code, _, _ = run_check(tmp_path, "--fix", "--exit-non-zero-on-fix", "--min-impact", "low", "train.py")
    assert code == 0  # nothing left to fix
    # stdin's text in this process (test_stdin.py's way): the exit status is the command's, not the process boundary's
    monkeypatch.chdir(tmp_path)  # t.py's project is tmp_path, not this repository
    stdin = CliRunner().invoke(main, ["check", "-", "--stdin-filename", "t.py", "--fix", "--exit-non-zero-on-fix", "--min-impact", "low"],
                               input=CREATE_THEN_MOVE, catch_exceptions=False)
    assert stdin.exit_code == 1 and stdin.stdout == FIXED


def test_per_file_ignores_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "bench.py").write_text(CREATE_THEN_MOVE)
    (tmp_path / "train.py").write_text(CREATE_THEN_MOVE)
    (tmp_path / "torchlint.toml").write_text('min-impact = "low"\n[per-file-ignores]\n"train.py" = ["TL110"]\n')
    code, out, _ = run_check(tmp_path, "--output-format", "concise", ".")
    assert code == 1 and "scripts/bench.py:2:5: TL110" in out and "train.py:2" not in out
    # Replaces the config's table...
    code, out, _ = run_check(tmp_path, "--output-format", "concise", "--per-file-ignores", "bench.py:TL110,TL101", ".")
    assert "train.py:2:5: TL110" in out and "bench.py" not in out
    # ...or adds to it.
    code, out, _ = run_check(tmp_path, "--output-format", "concise", "--extend-per-file-ignores", "scripts/*:create-then-move", ".")
    assert code == 0 and "No problems found" in out
    code, _, err = run_check(tmp_path, "--per-file-ignores", "nocodes", ".")
    assert code == 2 and "PATTERN:CODES" in err
    code, _, err = run_check(tmp_path, "--per-file-ignores", "x.py:TL999", ".")
    assert code == 2 and "TL999" in err


def test_statistics_mark_fixes_that_need_unsafe_fixes(tmp_path: Path) -> None:
    (tmp_path / "data.py").write_text("import numpy as np\nimport torch\na = np.zeros(3)\nt = torch.tensor(a)\n" + CREATE_THEN_MOVE.split("\n", 1)[1])
    _, out, _ = run_check(tmp_path, "--statistics", "--min-impact", "low", "data.py")
    assert out.splitlines() == [
        "1\tTL110\t[*] create-then-move\t1 low",
        "1\tTL203\t[-] tensor-copies-numpy\t1 low",
        "([-]: fixable with `--fix --unsafe-fixes`)",
    ]
    _, out, _ = run_check(tmp_path, "--statistics", "--min-impact", "low", "--unsafe-fixes", "data.py")
    assert "1\tTL203\t[*] tensor-copies-numpy\t1 low" in out.splitlines() and "[-]" not in out


def test_a_missing_path_prints_only_the_error(tmp_path: Path) -> None:
    code, out, err = run_check(tmp_path, "nowhere.py")
    assert code == 2 and out == "" and err == "torchlint: error: no such file or directory: nowhere.py\n"
    (tmp_path / "here.py").write_text(CREATE_THEN_MOVE)
    code, out, err = run_check(tmp_path, "nowhere.py", "here.py", "--min-impact", "low")
    assert code == 2 and "here.py:2:5: TL110" in out and "nowhere.py" in err  # the rest is still checked


ACCURACY_LOOP = """import torch
opt = torch.optim.SGD(params, lr=0.1)
for logits, labels in loader:
    loss = model(logits).sum()
    loss.backward()
    opt.step()
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
"""


def test_long_expressions_in_messages_are_cut_at_a_token_with_one_ellipsis(tmp_path: Path) -> None:
    import libcst as cst

    from torchlint.analysis.context import short_code

    (tmp_path / "train.py").write_text(ACCURACY_LOOP)
    _, out, _ = run_check(tmp_path, "--output-format", "concise", "train.py")
    assert "`(logits.argmax(dim=1)\u2026).float().mean().item()`" in out, out
    assert "...." not in out and "floa." not in out
    module = cst.parse_module("x = some_function(first_argument) + another_function(second_argument) + third\n")
    text = short_code(module, module.body[0].body[0].value)  # type: ignore[attr-defined]
    assert text == "some_function(first_argument) +\u2026" and len(text) <= 40


def test_a_file_that_cannot_be_parsed_is_not_ranked_among_the_performance_findings(tmp_path: Path) -> None:
    """Review 13: a Python 2 demo nothing imports read "high" above every real finding. TL000 has no
    tier: shown whatever --min-impact says, after the ranked ones, counted in the summary, exit 1."""
    (tmp_path / "a_old.py").write_text("import torch\n\n\ndef report(step):\n    print 'step', step\n")
    (tmp_path / "train.py").write_text(
        "import torch\n\n\ndef train(model, opt, loader):\n    model.cuda()\n    for x, y in loader:\n"
        "        loss = model(x.cuda(), y.cuda())\n        loss.backward()\n        opt.step()\n        print(loss.item())\n")
    code, out, _ = run_check(tmp_path, "--output-format", "concise", "--min-impact", "medium", ".")
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("train.py:10:") and " TL101 " in lines[0], out
    assert lines[1].startswith("a_old.py:5:5: TL000 cannot parse"), out
    assert "Found 2 problems (1 medium) in 2 files (2 checked; 1 file could not be parsed)." in out
    code, out, _ = run_check(tmp_path, "--output-format", "json", "a_old.py")
    assert code == 1 and '"impact": null' in out


def test_a_syntax_error_shows_its_source_and_help_as_every_finding_does(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("import torch\n\n\ndef report(step):\n    print 'step', step\n")
    _, out, _ = run_check(tmp_path, "old.py")
    assert out.splitlines()[:8] == [
        "old.py:5:5: TL000 cannot parse: Missing parentheses in call to 'print'. Did you mean print(...)?",
        "  |",
        "4 | def report(step):",
        "5 |     print 'step', step",
        "  |     ^^^^^^^^^^^^^^^^^^ TL000",
        "  |",
        "  = note: the file could not be checked: none of its problems can be found",
        "  = help: Fix the file so that Python can parse it",
    ]
    # no performance tier, but the summary says the file was not checked (as ruff's does)
    assert "Found 1 problem in 1 file (1 checked; 1 file could not be parsed)." in out
