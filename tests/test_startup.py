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
from torchlint.engine import settle

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


def test_a_check_of_a_few_files_starts_no_pool_machinery(tmp_path: Path) -> None:
    # A pre-commit run of a few files never starts a pool: concurrent.futures (with
    # multiprocessing, logging, sockets) and a fix's random names are not imported for it.
    (tmp_path / "train.py").write_text("import torch\nfor x in loader:\n    print(model(x).item())\n")
    probe = _PROBE.replace('m == "libcst"', 'm in ("libcst", "concurrent.futures", "multiprocessing", "secrets")')
    done = subprocess.run([sys.executable, "-c", probe, "check", "--no-cache", "--output-format", "json", "train.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    out, _, heavy = done.stdout.rpartition("\nHEAVY=")
    imported = json.loads(heavy)
    assert "libcst" in imported and '"TL101"' in out  # it did check the file
    assert not {"concurrent.futures", "multiprocessing", "secrets"} & set(imported)


def test_the_rule_table_matches_the_checks() -> None:
    live = catalogue.from_checks()
    assert catalogue.rules() == live, "catalogue._TABLE is stale; its rows are now:\n" + catalogue.table_rows(live)
    assert set(FAMILIES.values()) <= set(catalogue.FAMILY_TITLES)


def test_the_engine_places_the_step_where_the_checks_put_it() -> None:
    assert settle.STEP_PLACEHOLDER == STEP_PLACEHOLDER


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
