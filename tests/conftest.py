"""Shared test helpers: fixture discovery, the `# expect:` markers, and the child runs made ahead."""

from __future__ import annotations

import os
import pstats
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# One intra-op thread for the suite and every child it starts (a developer's own setting is
# kept). torch's default is a thread per core: on CI's two cores the test process and the runs
# made ahead beside it each spun that many OpenMP threads, and the spinning was a large share of
# the suite's CPU (benchmarks/gpu_micro.py --smoke, one of the in-process tests: 25.8 s of CPU
# with the default, 7.9 s with one thread, on a loaded two-core machine). No test asserts on
# timings, and the experiment's windows run the original and the variant with the same count.
# Set before anything imports torch: it reads the variable once, at start-up.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent


def _compile_torchlint() -> None:
    """Write the bytecode of this checkout's torchlint (its ``__pycache__``, ignored by git) once,
    before any test: every child the suite starts imports torchlint from here (``child_env``),
    and where ``PYTHONDONTWRITEBYTECODE`` is set (a container's default, this project's CI
    shell) none of them may write it, so each compiled the ~280 modules again: about 1.2 s of
    CPU in every `torchlint profile` parent (2.6 s against 1.4 s for a report of a tiny run)
    and a `check` child, over the suite's ~150 children. Importing still reads the files the
    variable forbids writing; compileall skips a module whose bytecode is up to date."""
    import compileall

    compileall.compile_dir(str(ROOT / "torchlint"), quiet=2)


_compile_torchlint()

from made_ahead import AHEAD_ENV, RunsAhead, ahead, ahead_keys  # noqa: E402
from torchlint.profiler.allocator import GLIBC_ENV  # noqa: E402
FIXTURES = ROOT / "fixtures"
# A small training loop with findings of several rules (TL101, TL303, ...), shared by
# the output, stdin and docs tests.
LOOP_WITH_FINDINGS = """import torch
opt = torch.optim.SGD(params, lr=0.1)
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    opt.zero_grad(set_to_none=False)
    print(loss.item())
    opt.step()
"""
RULES_DIR = ROOT / "rules"
# `# expect: TL101` or, with the finding's impact, `# expect: TL101 (high), TL102 (low)`
_MARKER = r"TL\d{3}(?:\s*\((?:high|medium|low)\))?"
_EXPECT = re.compile(rf"#\s*expect:\s*(?P<codes>{_MARKER}(?:\s*,\s*{_MARKER})*)")
_IMPACT_MARKER = re.compile(r"(?P<code>TL\d{3})(?:\s*\((?P<impact>high|medium|low)\))?")


def run_cli(cwd: Path, *args: str, env: dict[str, str | None] | None = None) -> tuple[int, str, str]:
    """`torchlint ARGS` in this process, with ``cwd`` as the working directory and ``env``
    set (None: unset) for the call: (exit code, stdout, stderr). For what needs no process
    of its own (a report rebuilt from a run directory, a usage error): a child costs the
    interpreter's start-up and torchlint's imports again."""
    from click.testing import CliRunner

    from torchlint.cli import main

    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def run_check(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`torchlint check ARGS` in this process, with ``cwd`` as the working directory:
    (exit code, stdout, stderr)."""
    return run_cli(cwd, "check", *args)


def session_env() -> dict[str, str]:
    """The environment a child starts from: this process's, or in a run made ahead (``ahead``)
    the session's, never a test's monkeypatched variables."""
    return dict(getattr(AHEAD_ENV, "base", None) or os.environ)


def child_env(profile_imports: bool = False) -> dict[str, str]:
    """The environment for a `torchlint profile` child: this checkout importable, no display.
    ``profile_imports``: the default of a user's run, the imports made ahead profiled and
    grafted into profile.prof (about 3 s of CPU a run); the tests of that graft and of what
    it could disturb (TLR09's page faults) ask for it, the others opt out to keep the suite short."""
    env = session_env()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    for name in (*GLIBC_ENV, "GLIBC_TUNABLES"):
        env.pop(name, None)  # a CI image's malloc settings would change what TLR09 reports
    if profile_imports:
        env.pop("TORCHLINT_PROFILE_IMPORTS", None)
    else:
        env["TORCHLINT_PROFILE_IMPORTS"] = "0"
    return env


def expected_markers(text: str) -> set[tuple[int, str]]:
    """``(line, code)`` for every ``# expect: TL101[, TL102]`` marker in ``text``."""
    found = set()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            for marker in _IMPACT_MARKER.finditer(match.group("codes")):
                found.add((number, marker.group("code")))
    return found


def expected_impacts(text: str) -> dict[tuple[int, str], str]:
    """``(line, code) -> impact`` for every marker that names one (`# expect: TL101 (high)`)."""
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            for marker in _IMPACT_MARKER.finditer(match.group("codes")):
                if marker.group("impact"):
                    found[(number, marker.group("code"))] = marker.group("impact")
    return found


def copied_project(name: str, into: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    """A copy of ``fixtures/projects/<name>`` in ``into``: a project linted where a test may write;
    ``edits``, a file's text replaced in it (``{"run.py": (old, new)}``, ``old`` there)."""
    root = into / name
    shutil.copytree(FIXTURES / "projects" / name, root)
    for file, (old, new) in (edits or {}).items():
        text = (root / file).read_text()
        assert old in text
        (root / file).write_text(text.replace(old, new))
    return root


def checked_here(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``copied_project(name)``, made the working directory (findings' paths relative to it)."""
    root = copied_project(name, tmp_path)
    monkeypatch.chdir(root)
    return root


def project_findings(root: Path, select: str | tuple[str, ...] = "ALL") -> Any:
    """Every finding of the project in the working directory ``root`` at any impact (no errors),
    of the rules ``select`` names."""
    from torchlint.config import from_table
    from torchlint.engine import lint_paths

    chosen = [select] if isinstance(select, str) else list(select)
    result = lint_paths([Path(".")], from_table({"select": chosen, "min-impact": "low"}, root))
    assert not result.errors
    return result.findings


def findings_by_line(root: Path, monkeypatch: pytest.MonkeyPatch, select: str | tuple[str, ...] = "ALL") -> dict[tuple[str, int], Any]:
    """``project_findings`` of ``root``, made the working directory, by (posix path, line)."""
    monkeypatch.chdir(root)
    return {(Path(f.path).as_posix(), f.line): f for f in project_findings(root, select)}


def assert_markers_hold(root: Path, findings: Any) -> None:
    """The findings (paths relative to ``root``) are exactly the project's ``# expect:`` markers,
    each at the impact its marker names."""
    files = sorted(root.rglob("*.py"))
    actual = {(Path(f.path).as_posix(), f.line, f.code) for f in findings}
    assert actual == {(p.relative_to(root).as_posix(), line, code) for p in files for line, code in expected_markers(p.read_text())}
    impacts = {(Path(f.path).as_posix(), f.line, f.code): f.impact for f in findings}
    wanted = {(p.relative_to(root).as_posix(), line, code): impact for p in files
              for (line, code), impact in expected_impacts(p.read_text()).items()}
    assert {key: impacts.get(key) for key in wanted} == wanted


@pytest.fixture
def root() -> Path:
    return ROOT


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-snapshots", action="store_true", help="rewrite fixtures/scripts/*.expected.txt")


@pytest.fixture
def update_snapshots(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-snapshots"))


@pytest.fixture(autouse=True)
def _private_result_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every torchlint it starts) caches results in its own temporary
    directory: never in the repository, never shared between tests."""
    monkeypatch.setenv("TORCHLINT_CACHE_DIR", str(tmp_path_factory.mktemp("torchlint-cache")))


@pytest.fixture(scope="session", autouse=True)
def runs_ahead(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunsAhead]:
    # The session's temporary root is made on first use: made here, before the background thread, or
    # the thread's first mktemp and this thread's could each make one (pytest-N and pytest-N+1), and
    # the thread's would fail ("anomaly is not a normalized and relative path", seen on CI).
    tmp_path_factory.getbasetemp()
    runs = RunsAhead(tmp_path_factory, dict(os.environ))
    runs.start(ahead_keys(request.session.items))
    yield runs
    runs.close()


MLP_STEPS = 8


@ahead(scope="session")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One real `torchlint profile` run of the slow-loader MLP, JSON report on stdout
    (torch start-up is paid once): shared by test_profile_run.py, the report.html and the
    interchange-file tests. A test_profile_run.Run."""
    pytest.importorskip("torch")
    from test_profile_run import profile

    cwd = tmp_path_factory.mktemp("mlp")
    shutil.copy(FIXTURES / "scripts" / "mlp_slow_loader.py", cwd)
    return profile(
        cwd, "--no-browser", "--output-format", "json", "--out", "run", "--wait", "0", "--warmup", "1",
        "--active", "3", "mlp_slow_loader.py", "--steps", str(MLP_STEPS), "--sleep-ms", "1",
    )


@pytest.fixture(scope="session")
def html_run(mlp_run: Any) -> Path:
    """The run directory of ``mlp_run``, for the report.html and interchange-file tests."""
    assert mlp_run.rc == 0, mlp_run.stderr
    return mlp_run.run_dir


# -- one `torchlint profile` run and one plain cProfile run of the same script, shared by
# tests/test_call_tree.py, test_line_costs.py and test_experiment_truth.py (torch start-up
# costs seconds: made once per session)

TREE_SCRIPT = "tiny_transformer.py"


@dataclass
class Both:
    plain: dict  # pstats' table of ``python -m cProfile -o plain.prof SCRIPT``
    ours: dict  # pstats' table of torchlint's profile.prof
    run: Any  # test_profile_run.Run
    plains: list[dict]  # two plain runs: a one-off stall of the machine hits one of them


@ahead(scope="session", alone=True)  # the call tree weighs times against plain cProfile's
def both(tmp_path_factory: pytest.TempPathFactory) -> Both:
    pytest.importorskip("torch")
    from test_profile_run import profile

    cwd = tmp_path_factory.mktemp("tree")
    shutil.copy(FIXTURES / "scripts" / TREE_SCRIPT, cwd / TREE_SCRIPT)
    plains = []
    for i in range(2):
        out = cwd / f"plain-{i}.prof"
        proc = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), TREE_SCRIPT], cwd=cwd,
                              env=dict(child_env(), OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        plains.append(pstats.Stats(str(out)).stats)  # type: ignore[attr-defined]
    # the default run (child_env): the imports made ahead are grafted into profile.prof unasked (ahead.py)
    # One intra-op thread, as the plain runs have: with two on a loaded two-core machine the
    # training part slows many times over, and its share of `<module>` with it (CI saw 0.39
    # against plain's 0.87 for the import machinery).
    run = profile(cwd, "--no-browser", "--output-format", "json", "--out", "run", TREE_SCRIPT, profile_imports=True,
                  env={"OMP_NUM_THREADS": "1"})
    assert run.rc == 0, run.stderr
    return Both(plains[0], pstats.Stats(str(run.run_dir / "profile.prof")).stats, run, plains)  # type: ignore[attr-defined]

