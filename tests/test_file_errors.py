"""Every failure while checking one file is a value: that file is named (exit 2), and
every other file is still checked and reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.analysis.steps import StepSummarizer
from torchlint.cli import main
from torchlint.engine.pool import RECURSION_LIMIT

LOOP = "import torch\nfor x in loader:\n    loss = model(x)\n{extra}    print(loss.item())\n"


def chain(terms: int) -> str:
    """The loop, its flagged statement a chain of ``terms`` additions (positions are generated
    per statement: a chain in a statement apart leaves the file's findings placed)."""
    return "import torch\nfor x in loader:\n    loss = model(x)\n    print(loss.item() + " + " + ".join(f"a{i}" for i in range(terms)) + ")\n"


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", "--no-cache", *args, "."])
    finally:
        os.chdir(old)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_500_term_chain_is_checked_like_any_file(tmp_path: Path) -> None:
    # libcst's code generation recursed past Python's default limit here, and the
    # RecursionError ended the whole run with a traceback.
    (tmp_path / "long.py").write_text(chain(500))
    (tmp_path / "other.py").write_text(LOOP.format(extra=""))
    code, out, err = run(tmp_path)
    assert code == 1 and err == ""
    assert "long.py:4:11: TL101" in out and "other.py:4:11: TL101" in out  # placed inside the chain


def test_a_chain_past_libcsts_depth_is_one_tl000_for_that_file_only(tmp_path: Path) -> None:
    # libcst's code generation recurses once per term: past the engine's recursion bound
    # the file cannot be placed, which is said as TL000 (it was an internal error).
    # The bound covers about RECURSION_LIMIT / 2 terms (1,950 were still checked, 2,000 were
    # not); 20 % past that, not further: libcst's parse grows faster than the square of the
    # depth (libcst.parse_module alone, under load: 3,000 terms 14 s of CPU, 2,400 terms 9 s).
    (tmp_path / "deep.py").write_text(chain(RECURSION_LIMIT * 3 // 5))
    (tmp_path / "other.py").write_text(LOOP.format(extra=""))
    code, out, err = run(tmp_path)
    assert code == 1 and err == ""
    assert "other.py:4:11: TL101" in out
    assert "deep.py:1:1: TL000 not checked: an expression is nested too deeply" in out


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_exception_in_the_summary_step_names_the_file_and_the_rest_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str) -> None:
    for i in range(9):  # enough files for a pool with --jobs 2 (workers are forked: they see the patch)
        (tmp_path / f"ok{i}.py").write_text(LOOP.format(extra=""))
    (tmp_path / "boom.py").write_text(LOOP.format(extra="    boom = 1\n"))
    real = StepSummarizer.summary

    def summary(self: StepSummarizer, path: str, locate: object) -> object:
        if path.endswith("boom.py"):
            raise ValueError("injected")
        return real(self, path, locate)  # type: ignore[arg-type]

    monkeypatch.setattr(StepSummarizer, "summary", summary)
    code, out, err = run(tmp_path, "--jobs", jobs)
    assert code == 2
    assert all(f"ok{i}.py:4:11: TL101" in out for i in range(9))
    assert "internal error in engine on boom.py: ValueError: injected" in err
    # For the bug report, the innermost frame of torchlint's own code; the traceback only with --debug.
    assert "Traceback" not in err and "(at torchlint/" in err and "`--debug` shows the traceback" in err


def test_raised_at_names_the_innermost_frame_of_torchlint_not_of_libraries() -> None:
    from torchlint.cli.check_output import raised_at

    trace = (
        'Traceback (most recent call last):\n'
        '  File "/home/u/venv/lib/python3.11/site-packages/torchlint/engine/runner.py", line 95, in run_checks\n'
        '    visit(node)\n'
        '  File "C:\\venv\\Lib\\site-packages\\torchlint\\checks\\arch\\x.py", line 416, in _weights\n'
        '    found = _weights(ctx, moved, at)\n'
        '  File "/home/u/venv/lib/python3.11/site-packages/libcst/_nodes/base.py", line 7, in visit\n'
        '    raise RecursionError\n'
        'RecursionError: maximum recursion depth exceeded\n'
    )
    assert raised_at(trace) == "torchlint/checks/arch/x.py:416 in _weights"
    assert raised_at("") is None
