"""`torchlint check -`: findings under --stdin-filename, per-file ignores and excludes
by that name, and --fix printing the fixed source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from conftest import LOOP_WITH_FINDINGS

from torchlint.cli import main

SOURCE = LOOP_WITH_FINDINGS


def run(cwd: Path, text: str | bytes, *args: str) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", "--min-impact", "low", *args], input=text, catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def test_findings_are_reported_under_the_stdin_filename(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, SOURCE, "-", "--stdin-filename", "src/train.py", "--output-format", "json")
    assert code == 1
    assert [(f["path"], f["line"], f["code"]) for f in json.loads(out)] == [("src/train.py", 6, "TL303"), ("src/train.py", 7, "TL101")]
    code, out, _ = run(tmp_path, SOURCE, "-")
    assert "-:7:11: TL101" in out and "7 |     print(loss.item())" in out


def test_per_file_ignores_and_excludes_apply_to_the_name(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchlint]\nper-file-ignores = { "scripts/*" = ["TL101"] }\nexclude = ["vendor/"]\n'
    )
    out = run(tmp_path, SOURCE, "-", "--stdin-filename", "scripts/train.py", "--output-format", "json")[1]
    assert [f["code"] for f in json.loads(out)] == ["TL303"]
    code, out, _ = run(tmp_path, SOURCE, "-", "--stdin-filename", "vendor/lib.py", "--force-exclude", "--output-format", "json")
    assert code == 0 and json.loads(out) == []
    # Named without --force-exclude, an excluded file is checked, as on the command line.
    assert run(tmp_path, SOURCE, "-", "--stdin-filename", "vendor/lib.py")[0] == 1


def test_fix_prints_the_fixed_source_and_reports_on_stderr(tmp_path: Path) -> None:
    code, out, err = run(tmp_path, SOURCE, "-", "--fix", "--stdin-filename", "train.py")
    assert out == SOURCE.replace("set_to_none=False", "set_to_none=True")
    assert "train.py:7:11: TL101" in err and "Fixed 1 problem." in err
    assert code == 1  # TL101 remains
    assert not list(tmp_path.iterdir())  # nothing written


def test_fix_passes_an_excluded_file_through(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nexclude = ["vendor/"]\n')
    code, out, _ = run(tmp_path, SOURCE, "-", "--fix", "--force-exclude", "--stdin-filename", "vendor/x.py")
    assert code == 0 and out == SOURCE


def test_diff_on_stdin(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, SOURCE, "-", "--diff", "--stdin-filename", "train.py")
    assert code == 1
    assert "+    opt.zero_grad(set_to_none=True)" in out


def test_unparsable_and_undecodable_stdin_is_tl000(tmp_path: Path) -> None:
    out = run(tmp_path, "import torch\ndef (:\n", "-", "--output-format", "json")[1]
    assert [f["code"] for f in json.loads(out)] == ["TL000"]
    out = run(tmp_path, b"import torch\nname = 'caf\xe9'\n", "-", "--output-format", "json")[1]
    assert [(f["code"], f["line"]) for f in json.loads(out)] == [("TL000", 2)]


def test_real_pipe(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "-", "--stdin-filename", "t.py", "--output-format", "concise"],
        input=SOURCE, capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("t.py:7:11: TL101")  # the highest impact first
    assert "\nt.py:6:5: TL303 [*]" in proc.stdout


def _long_chain(terms: int) -> str:
    """A file whose one expression is nested ``terms`` deep (libcst recurses per term)."""
    return "import torch\nx = torch.zeros(3).cuda()\ny = " + " + ".join(["a"] * terms) + "\n"


def test_fix_on_a_deeply_nested_file_echoes_it_and_keeps_its_findings(tmp_path: Path) -> None:
    """An editor takes stdout as the new buffer: a file --fix cannot rewrite comes back
    unchanged (it came back empty, a RecursionError on stderr)."""
    text = _long_chain(1500)
    code, out, err = run(tmp_path, text, "-", "--fix", "--stdin-filename", "d.py")  # (a traceback would raise here)
    assert out == text
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert "d.py:2:5: TL110" in err and "nested too deeply" in err


def test_fix_echoes_the_input_whatever_fails(tmp_path: Path, monkeypatch) -> None:
    from torchlint.engine.linter import Linter

    def broken(self, *args, **kwargs):  # a check that raises, as a bug would
        raise RuntimeError("a check broke")

    monkeypatch.setattr(Linter, "lint", broken)
    code, out, err = run(tmp_path, SOURCE, "-", "--fix", "--stdin-filename", "train.py")
    assert out == SOURCE and code == 2
    assert "internal error" in err and "a check broke" in err


def test_max_file_size_applies_to_stdin(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nmax-file-size = "1KB"\n')
    text = SOURCE + "# padding\n" * 200
    code, out, _ = run(tmp_path, text, "-", "--stdin-filename", "train.py", "--output-format", "json")
    found = json.loads(out)
    assert code == 1 and [f["code"] for f in found] == ["TL000"] and "limit" in found[0]["message"]
    code, out, _ = run(tmp_path, text, "-", "--fix", "--stdin-filename", "train.py")
    assert out == text
