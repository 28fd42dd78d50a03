"""Imports torchlint makes ahead of the script, grafted into profile.prof where the script
would have made them (torchlint/profiler/ahead.py, issue 36). No torch: a module written
here stands in for it. The real run is compared with plain cProfile in test_call_tree.py."""

from __future__ import annotations

import sys

import pytest

from torchlint.profiler import ahead
from torchlint.profiler.ahead import graft, profile_import
from torchlint.profiler.tooltime import EXEC_KEY

SCRIPT = "/work/train.py"
MODULE, MAIN = (SCRIPT, 1, "<module>"), (SCRIPT, 5, "main")
FIND_AND_LOAD = "_find_and_load"


@pytest.fixture()
def imported(tmp_path, monkeypatch):
    """``import aheadpkg`` profiled on its own: a package whose import loads a submodule
    and runs a function only import runs."""
    pkg = tmp_path / "aheadpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from aheadpkg import sub\nTABLE = sub.build_table()\n")
    (pkg / "sub.py").write_text("def build_table():\n    return {i: i * i for i in range(1000)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ahead, "AHEAD", {})
    yield profile_import("aheadpkg")
    for name in ("aheadpkg", "aheadpkg.sub"):
        sys.modules.pop(name, None)


def _script_table() -> dict:
    """A script's table as cProfile wrote it: exec -> <module> -> main (1 s), torch cached."""
    return {
        EXEC_KEY: (1, 1, 0.0, 1.0, {}),
        MODULE: (1, 1, 0.0, 1.0, {EXEC_KEY: (1, 1, 0.0, 1.0)}),
        MAIN: (1, 1, 1.0, 1.0, {MODULE: (1, 1, 1.0, 1.0)}),
    }


def _keys(stats: dict, name: str) -> list:
    return [k for k in stats if k[2] == name]


@pytest.fixture(autouse=True)
def _default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The imports made ahead are profiled unless the user opts out (ahead.PROFILE_IMPORTS_ENV)."""
    monkeypatch.delenv(ahead.PROFILE_IMPORTS_ENV, raising=False)


def test_the_user_can_leave_the_imports_out(tmp_path, monkeypatch):
    """``TORCHLINT_PROFILE_IMPORTS=0``: the import is made and timed, not profiled, and
    profile.prof is the script's table alone."""
    (tmp_path / "optoutpkg.py").write_text("TABLE = {i: i * i for i in range(1000)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ahead, "AHEAD", {})
    monkeypatch.setenv(ahead.PROFILE_IMPORTS_ENV, "0")
    try:
        made = profile_import("optoutpkg")
    finally:
        sys.modules.pop("optoutpkg", None)
    assert made.stats == {} and made.seconds > 0 and ahead.AHEAD == {"optoutpkg": made}
    made.path = [MODULE, EXEC_KEY]
    assert graft(_script_table(), made) == _script_table()


def test_an_import_goes_under_the_function_that_would_have_made_it(imported):
    imported.path = [MODULE, EXEC_KEY]
    out = graft(_script_table(), imported)
    assert not [k for k in out if k[0] == ahead.STAND_IN_FILE]
    (find_and_load,) = [k for k in _keys(out, FIND_AND_LOAD) if MODULE in out[k][4]]
    assert out[find_and_load][4][MODULE][1] == 1  # `import aheadpkg` in the script's <module>
    (build,) = _keys(out, "build_table")  # code that only import runs is in the profile
    assert out[build][1] == 1 and str(build[0]).endswith("sub.py")
    # its time in <module> and above it, once; main() is untouched
    seconds = imported.seconds
    assert seconds > 0
    assert out[MODULE][3] == pytest.approx(1.0 + seconds) and out[EXEC_KEY][3] == pytest.approx(1.0 + seconds)
    assert out[MODULE][4][EXEC_KEY][3] == pytest.approx(1.0 + seconds)
    assert out[MAIN][:4] == (1, 1, 1.0, 1.0)
    # the call that ran the stand-in is no call of the program; the modules' execs are
    assert out[EXEC_KEY][0] == 1 and out[EXEC_KEY][1] == imported.stats[("~", 0, "<built-in method builtins.exec>")][1]
    # the tree adds up at the graft: own time plus the calls it made
    made = sum(e[3] for k, v in out.items() for c, e in v[4].items() if c == MODULE)
    assert out[MODULE][2] + made == pytest.approx(out[MODULE][3], rel=1e-6)
    assert not [k for k in out if "disable" in k[2]]  # the import's own profiler is not in it


def test_a_function_on_the_path_that_the_import_also_calls_is_counted_once():
    """``exec`` runs the script and, inside the import, each module: the import's execs
    are nested calls (recursive, as in plain cProfile), their time counted once."""
    stand_in, mod = (ahead.STAND_IN_FILE, 1, "<module>"), ("pkg.py", 1, "<module>")
    exec_ = ("~", 0, "<built-in method builtins.exec>")
    imported = ahead.AheadImport("pkg", {
        exec_: (2, 3, 0.1, 2.0, {("imp", 1, "load"): (1, 2, 0.05, 1.5)}),
        stand_in: (1, 1, 0.01, 1.9, {exec_: (1, 1, 0.01, 1.9)}),
        ("imp", 1, "load"): (1, 1, 0.39, 1.89, {stand_in: (1, 1, 0.39, 1.89)}),
        mod: (2, 2, 1.5, 1.5, {exec_: (2, 2, 1.5, 1.5)}),
    }, seconds=1.9, path=[MODULE, EXEC_KEY])
    out = graft(_script_table(), imported)
    assert out[EXEC_KEY][:2] == (1, 3)  # the script's exec and two modules' execs
    assert out[EXEC_KEY][3] == pytest.approx(2.9)  # not 2.9 + the nested 2.0
    assert out[("imp", 1, "load")][4] == {MODULE: (1, 1, 0.39, 1.89)}
    assert out[MODULE][2] == pytest.approx(0.01) and out[MODULE][3] == pytest.approx(2.9)


def test_an_import_the_script_never_reached_is_left_out(imported):
    """No optimizer was built: torch._dynamo's import, which the first one would have made,
    is not in the profile (plain cProfile would not have it either)."""
    imported.path = [("optimizer.py", 377, "__init__"), MAIN, MODULE, EXEC_KEY]
    assert graft(_script_table(), imported) == _script_table()
    imported.path = []
    assert graft(_script_table(), imported) == _script_table()
    imported.path = [MAIN, EXEC_KEY]  # main() is not called by exec: no such chain of calls
    assert graft(_script_table(), imported) == _script_table()


@pytest.mark.parametrize("source, wanted", [
    ("import aheadpkg\n", True),
    ("def main():\n    from aheadpkg.sub import build_table\n", True),  # in a function, a submodule
    ("import os, aheadpkg.sub as s\n", True),
    ("# aheadpkg is not needed\nprint('aheadpkg')\n", False),  # named, not imported
    ("import aheadpkgx\nfrom .aheadpkg import x\n", False),  # another module; a relative import
])
def test_the_import_is_grafted_only_where_a_module_the_script_ran_imports_it(imported, tmp_path, source, wanted):
    """torchlint imports torch whenever it is installed; a script that never imports it
    (a plain Python script) must not get its import in profile.prof."""
    script = tmp_path / "train.py"
    script.write_text(source)
    module = (str(script), 1, "<module>")
    table = {EXEC_KEY: (1, 1, 0.0, 1.0, {}), module: (1, 1, 1.0, 1.0, {EXEC_KEY: (1, 1, 1.0, 1.0)})}
    imported.path = [module, EXEC_KEY]
    imported.wanted = lambda stats: ahead.run_imports(stats, "aheadpkg")
    out = graft({k: (*v[:4], dict(v[4])) for k, v in table.items()}, imported)
    assert (out[module][3] > 1.0) is wanted
    assert bool(_keys(out, "build_table")) is wanted
