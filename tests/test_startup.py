"""Start-up: `--version`, `--help`, `rules` and `rule` import neither libcst nor the checks,
and neither does a run whose results all come from the cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchlint import catalogue
from torchlint.checks import FAMILIES
from torchlint.checks.base import STEP_PLACEHOLDER
from torchlint.engine import settle_places

# Runs the CLI in a fresh interpreter and prints which heavy modules it imported.
_PROBE = """
import json, sys
from torchlint.cli import main
try:
    main(sys.argv[1:], prog_name="torchlint")
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m == "libcst" or m.startswith(("torchlint.checks", "torchlint.analysis.context")))
print("\\nHEAVY=" + json.dumps(heavy))
"""


def heavy_modules(*args: str, cwd: Path | None = None) -> tuple[list[str], str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    out, _, heavy = done.stdout.rpartition("\nHEAVY=")
    return json.loads(heavy), out


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["rules"], ["rules", "--output-format", "json"], ["rule", "TL101"], ["check", "--help"]])
def test_informational_commands_import_no_libcst_and_no_checks(args: list[str]) -> None:
    heavy, out = heavy_modules(*args)
    assert heavy == []
    assert out.strip()  # and they still answer


def test_help_still_lists_the_lazy_profile_command() -> None:
    _, out = heavy_modules("--help")
    assert "profile" in out and "check" in out and "rules" in out


def test_a_warm_run_over_unchanged_files_imports_no_libcst(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nfor x in loader:\n    print(model(x).item())\n")
    (tmp_path / "util.py").write_text("def f(x):\n    return x.item()\n")
    args = ["check", "--cache-dir", str(tmp_path / "cache"), "--output-format", "json", "."]
    cold, cold_out = heavy_modules(*args, cwd=tmp_path)
    warm, warm_out = heavy_modules(*args, cwd=tmp_path)
    assert "libcst" in cold  # the cold run parsed the files
    assert warm == []
    assert warm_out == cold_out and '"TL101"' in warm_out
    (tmp_path / "util.py").write_text("def f(x):\n    return x.item()  # changed\n")
    changed, _ = heavy_modules(*args, cwd=tmp_path)
    assert "libcst" in changed  # one changed file is parsed again


# What a check of a few files must not import when nothing calls for it: the pool machinery
# (concurrent.futures, with multiprocessing, logging, sockets), a fix's random names and the
# fix machinery, a traceback's formatter, pathspec (no pattern, no .gitignore), tomllib (no
# config file), and importlib.resources (a rule page).
_UNNEEDED = ("concurrent.futures", "multiprocessing", "secrets", "torchlint.engine.fixes", "torchlint.engine.notebook",
             "difflib", "traceback", "pathspec", "tomllib", "importlib.resources")


def _imported(names: tuple[str, ...], *args: str, cwd: Path) -> tuple[list[str], str]:
    probe = _PROBE.replace('m == "libcst"', f"m in {names!r}")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    out, _, loaded = done.stdout.rpartition("\nHEAVY=")
    return json.loads(loaded), out


def test_a_check_of_a_few_files_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    # A pre-commit run of a few files never starts a pool, fixes nothing and reads no config.
    (tmp_path / "train.py").write_text("import torch\nfor x in loader:\n    print(model(x).item())\n")
    imported, out = _imported(("libcst", *_UNNEEDED), "check", "--no-cache", "--output-format", "json", "train.py", cwd=tmp_path)
    assert "libcst" in imported and '"TL101"' in out  # it did check the file
    assert not set(_UNNEEDED) & set(imported)
    # Each of them is still imported where it is needed: a pattern, a config file, a fix.
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nexclude = ["build"]\n')
    (tmp_path / "fixable.py").write_text("import torch\nfor x in loader:\n    y = torch.zeros(3).cuda()\n    model(x + y)\n")
    imported, _ = _imported(_UNNEEDED, "check", "--no-cache", "--fix", "--diff", "fixable.py", cwd=tmp_path)
    assert {"pathspec", "tomllib", "torchlint.engine.fixes", "difflib"} <= set(imported)


def test_a_check_of_files_that_never_mention_torch_imports_no_libcst(tmp_path: Path) -> None:
    # A file no check can fire in is checked by CPython's parser alone (engine/prefilter.py):
    # its syntax errors are still TL000, and its light summary still joins the project.
    (tmp_path / "util.py").write_text("import os\n\ndef join(a):\n    return os.path.join(a, 'b')\n")
    (tmp_path / "broken.py").write_text("def f(:\n    return 1\nreturn 2\n")
    (tmp_path / "late.py").write_text("x = 1\nfrom __future__ import annotations\n")  # a compile-time error
    heavy, out = heavy_modules("check", "--no-cache", "--output-format", "json", ".", cwd=tmp_path)
    assert heavy == []
    found = {(f["path"], f["code"], f["message"]) for f in json.loads(out)}
    assert found == {("broken.py", "TL000", "cannot parse: invalid syntax"),
                     ("late.py", "TL000", "cannot parse: from __future__ imports must occur at the beginning of the file")}
    (tmp_path / "metric.py").write_text("def acc(x):\n    return x.item()\n")  # a step call: checked in full
    heavy, _ = heavy_modules("check", "--no-cache", "--output-format", "json", ".", cwd=tmp_path)
    assert "libcst" in heavy


def test_the_rule_table_matches_the_checks() -> None:
    live = catalogue.from_checks()
    assert catalogue.rules() == live, "catalogue._TABLE is stale; its rows are now:\n" + catalogue.table_rows(live)
    assert set(FAMILIES.values()) <= set(catalogue.FAMILY_TITLES)


def test_the_engine_places_the_step_where_the_checks_put_it() -> None:
    assert settle_places.STEP_PLACEHOLDER == STEP_PLACEHOLDER


_APP_PROBE = """
import sys
from torchlint.cli import main
try:
    main(sys.argv[1:], prog_name="torchlint")
except SystemExit:
    pass
print("\\nAPP=" + ",".join(sorted(m for m in sys.modules if m.startswith(("torchlint.server", "torchlint.profiler",
      "torchlint.cli.profile", "torchlint.experiment", "pygls", "torch.")) or m == "torch")))
"""


def test_check_imports_neither_the_profile_nor_the_server_side(tmp_path: Path) -> None:
    """`check` never pays for torch, pygls, the profiler or the server (issue 36: the packages split)."""
    (tmp_path / "train.py").write_text("import torch\nfor x in loader:\n    print(model(x).item())\n")
    done = subprocess.run([sys.executable, "-c", _APP_PROBE, "check", "--no-cache", "."], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    out, _, loaded = done.stdout.rpartition("\nAPP=")
    assert "TL101" in out
    assert loaded.strip() == ""
