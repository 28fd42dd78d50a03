"""`check` on the inputs real trees hold: every bad input becomes a value, never a traceback.

One test per class of input: odd files (symlinks, FIFOs, sockets, unreadable
directories, huge files, undecodable names), missing paths, configuration values
that pathspec or ``re`` reject, and internal errors. (TL000 parity with the running
CPython, notebooks and Python's own line breaking: test_hardening_sources.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.cli import main
from torchlint.engine.discover import discover
from torchlint.config import Config, load_config

ROOT = Path(__file__).resolve().parent.parent
FINDING = "import torch\nx = torch.zeros(3).cuda()\n"  # TL110 on line 2


def run(cwd: Path, *args: str) -> tuple[int, list[dict], str]:
    """``torchlint check --output-format json ARGS`` in ``cwd``: exit code, findings, stderr."""
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, ["check", "--min-impact", "low", "--output-format", "json", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert "Traceback" not in result.stderr, result.stderr
    findings = json.loads(result.stdout) if result.stdout.strip() else []
    return result.exit_code, findings, result.stderr


def by_path(findings: list[dict]) -> dict[str, list[tuple[str, int, int]]]:
    out: dict[str, list[tuple[str, int, int]]] = {}
    for f in findings:
        out.setdefault(f["path"], []).append((f["code"], f["line"], f["column"]))
    return out


# -- files that are not plain readable files ---------------------------------------


def test_symlink_loops_and_dangling_links_are_reported_under_their_own_names(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(FINDING)
    (tmp_path / "self.py").symlink_to("self.py")
    (tmp_path / "dangling.py").symlink_to("nowhere/target.py")
    for args in (("good.py", "self.py", "dangling.py"), (".",)):  # named, and found by walking
        code, findings, _ = run(tmp_path, *args)
        found = by_path(findings)
        assert code == 1
        assert found["good.py"] == [("TL110", 2, 5)]
        assert [c for c, _, _ in found["self.py"]] == ["TL000"]
        assert [c for c, _, _ in found["dangling.py"]] == ["TL000"]
        messages = {f["path"]: f["message"] for f in findings}
        assert "symbolic links" in messages["self.py"]
        assert "No such file" in messages["dangling.py"]


def test_fifo_and_socket_named_py_never_hang(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(FINDING)
    os.mkfifo(tmp_path / "fifo.py")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.py"))
    try:
        # in a subprocess with a timeout: today's bug is a hang, not an exception
        named = subprocess.run(
            [sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "--output-format", "json", "good.py", "fifo.py", "sock.py"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_env(),
        )
        walked = subprocess.run(
            [sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "--output-format", "json", "."],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_env(),
        )
    finally:
        server.close()
    found = by_path(json.loads(named.stdout))
    assert named.returncode == 1, named.stderr
    assert [c for c, _, _ in found["fifo.py"]] == ["TL000"] and [c for c, _, _ in found["sock.py"]] == ["TL000"]
    messages = {f["path"]: f["message"] for f in json.loads(named.stdout)}
    assert "not a regular file (a FIFO)" in messages["fifo.py"] and "(a socket)" in messages["sock.py"]
    # found by walking, a FIFO or socket is not a source file: skipped
    assert walked.returncode == 1 and set(by_path(json.loads(walked.stdout))) == {"good.py"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_directory_without_search_permission_is_reported_and_the_rest_checked(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "good.py").write_text(FINDING)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "hidden.py").write_text(FINDING)
    os.chmod(tmp_path / "locked", 0o000)
    if os.geteuid() == 0:  # root reads anything: make the listing fail as it does for a user
        real_scandir = os.scandir

        def scandir(path=".") -> object:  # type: ignore[no-untyped-def]
            if Path(path).name == "locked":
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        for args in ((".",), ("locked", "good.py")):
            code, findings, _ = run(tmp_path, *args)
            assert code == 1
            assert by_path(findings) == {"good.py": [("TL110", 2, 5)], "locked": [("TL000", 1, 1)]}
            assert "cannot read the directory: Permission denied" in findings[1]["message"]
    finally:
        os.chmod(tmp_path / "locked", 0o755)


def test_missing_paths_are_reported_and_the_rest_checked_exit_2(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(FINDING)
    code, findings, err = run(tmp_path, "missing.py", "good.py", "gone/")
    assert code == 2
    assert "no such file or directory: missing.py" in err and "no such file or directory: gone" in err
    assert by_path(findings) == {"good.py": [("TL110", 2, 5)]}
    code, findings, err = run(tmp_path, "missing.py")
    assert code == 2 and findings == [] and "missing.py" in err


def test_files_above_the_size_limit_are_reported_not_parsed(tmp_path: Path) -> None:
    big = "import torch\n" + "x = 1\n" * 200_000 + "y = torch.zeros(3).cuda()\n"  # ~1.2 MB
    (tmp_path / "big.py").write_text(big)
    code, findings, _ = run(tmp_path, "big.py")
    assert code == 1 and [f["code"] for f in findings] == ["TL000"]
    assert "above the 1 MB limit" in findings[0]["message"] and "max-file-size" in findings[0]["message"]
    # the limit is configurable (small sizes here: parsing 1 MB takes libcst many seconds)
    (tmp_path / "small.py").write_text("import torch\n" + "x = 1\n" * 300 + "y = torch.zeros(3).cuda()\n")
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nmax-file-size = "1kB"\n')
    code, findings, _ = run(tmp_path, "small.py")
    assert [f["code"] for f in findings] == ["TL000"] and "above the 1 kB limit" in findings[0]["message"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nmax-file-size = "4kB"\n')
    code, findings, _ = run(tmp_path, "small.py")
    assert code == 1 and [f["code"] for f in findings] == ["TL110"]


def test_a_notebook_is_held_to_the_limit_by_its_code_not_its_outputs(tmp_path: Path) -> None:
    import json

    def notebook(code: str, output_bytes: int) -> str:
        cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": code.splitlines(True),
                "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * output_bytes}}]}
        return json.dumps({"cells": [cell], "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                           "nbformat": 4, "nbformat_minor": 5})

    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nmax-file-size = "4kB"\n')
    (tmp_path / "plots.ipynb").write_text(notebook("import torch\ny = torch.zeros(3).cuda()\n", 20_000))
    code, findings, _ = run(tmp_path, "plots.ipynb")
    assert code == 1 and [f["code"] for f in findings] == ["TL110"]  # 20 kB of image output, 2 lines of code
    (tmp_path / "long.ipynb").write_text(notebook("import torch\n" + "x = 1\n" * 1000, 0))
    code, findings, _ = run(tmp_path, "long.ipynb")
    assert [f["code"] for f in findings] == ["TL000"] and "notebook's code" in findings[0]["message"]


def test_undecodable_file_names_never_reach_the_output_as_surrogates(tmp_path: Path) -> None:
    name = os.fsdecode(b"b\xffad.py")
    (tmp_path / name).write_text(FINDING)
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "."], cwd=tmp_path, capture_output=True, env=_env(), timeout=60,
    )
    out = proc.stdout.decode("utf-8")  # strict: a lone surrogate would have failed to encode
    assert proc.returncode == 1 and "b\ufffdad.py:2:5: TL110" in out, proc.stderr
    code, findings, _ = run(tmp_path, ".")
    assert code == 1 and [f["path"] for f in findings] == ["b\ufffdad.py"]


def test_a_tree_ignored_by_an_enclosing_gitignore_is_checked_when_named(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\n*_pb2.py\n")
    (tmp_path / "generated" / "sub").mkdir(parents=True)
    for name in ("generated/a.py", "generated/sub/b.py", "generated/x_pb2.py"):
        (tmp_path / name).write_text(FINDING)
    code, findings, _ = run(tmp_path, "generated")
    assert code == 1 and set(by_path(findings)) == {"generated/a.py", "generated/sub/b.py"}
    assert run(tmp_path, ".")[1] == []  # walking from above, the tree stays ignored
    assert run(tmp_path, "--force-exclude", "generated")[1] == []
    config = load_config(tmp_path)
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert [f.display for f in discover([Path("generated")], config)] == ["generated/a.py", "generated/sub/b.py"]
    finally:
        os.chdir(old)


# -- configuration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pyproject", "args", "message"),
    [
        ('[tool.torchlint]\nexclude = ["!"]\n', (), "invalid glob '!' in `exclude`"),
        ("", ("--exclude", "[z-a]"), "invalid glob '[z-a]' in `exclude`"),
        ('[tool.torchlint]\nextend-exclude = ["a\\\\"]\n', (), "in `extend-exclude`"),
        ('[tool.torchlint.per-file-ignores]\n"[z-a]" = ["TL110"]\n', (), "in `per-file-ignores`"),
        ('tool = "torchlint"\n', (), "`tool` in"),
        ("[tool]\ntorchlint = 3\n", (), "`tool.torchlint` in"),
        ("[tool.torchlint\nselect = 1\n", (), "cannot read"),
        ('[tool.torchlint]\nmax-file-size = "lots"\n', (), "`max-file-size` must be"),
    ],
)
def test_bad_configuration_is_a_clear_error_exit_2(tmp_path: Path, pyproject: str, args: tuple[str, ...], message: str) -> None:
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "good.py").write_text(FINDING)
    code, findings, err = run(tmp_path, *args, "good.py")
    assert code == 2 and findings == []
    assert err.startswith("torchlint: error: ") and message in err, err


def test_an_invalid_pyproject_above_is_an_error_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\nselect = [\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "good.py").write_text(FINDING)
    code, _, err = run(tmp_path / "pkg", "good.py")
    assert code == 2 and "pyproject.toml" in err


def test_config_accepts_sizes_with_units() -> None:
    from torchlint.config import from_table

    assert from_table({"max-file-size": "2MB"}, Path(".")).max_file_size == 2_000_000
    assert from_table({"max-file-size": "1.5 KiB"}, Path(".")).max_file_size == 1536
    assert from_table({"max-file-size": 4096}, Path(".")).max_file_size == 4096
    assert Config().max_file_size == 1_000_000


def test_a_name_rebound_by_the_comprehension_over_it_is_no_internal_error(tmp_path: Path) -> None:
    # torch/_inductor/codegen/simd.py: `[node for node in node.get_nodes()]` made the
    # object analysis chase `node` through its own binding until RecursionError
    (tmp_path / "f.py").write_text(
        "import torch\n\n\ndef f(node):\n    nodes = [node for node in node.get_nodes() if node.ok()]\n"
        "    if nodes:\n        node = Fused(nodes)\n    return node.analysis(nodes)\n"
    )
    code, findings, err = run(tmp_path, "f.py")
    assert (code, findings) == (0, []), err


def _without_root_powers() -> list[str]:
    """A command prefix that runs as this user without the power to read what its
    permissions forbid (root's DAC override), or [] when that is already so."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--"]


def test_a_directory_listed_but_not_entered_is_tl000_not_a_traceback(tmp_path: Path) -> None:
    """Read permission without search (0o644): its names list, nothing in it opens."""
    (tmp_path / "good.py").write_text(FINDING)
    (tmp_path / "listed" / "deeper").mkdir(parents=True)
    (tmp_path / "listed" / "deeper" / "hidden.py").write_text(FINDING)
    (tmp_path / "listed" / "top.py").write_text(FINDING)
    os.chmod(tmp_path / "listed", 0o644)
    try:
        for args in ([".", "--no-cache"], ["listed/top.py", "good.py", "--no-cache"]):
            proc = subprocess.run(
                [*_without_root_powers(), sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "--output-format", "json", *args],
                cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
            )
            assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
            found = by_path(json.loads(proc.stdout))
            assert found["good.py"] == [("TL110", 2, 5)]
            assert [code for code, _, _ in found.get("listed", found.get("listed/top.py", []))] == ["TL000"]
    finally:
        os.chmod(tmp_path / "listed", 0o755)


def test_an_unexpected_error_is_one_line_and_exit_2(tmp_path: Path, monkeypatch) -> None:
    """Whatever escapes a command (here: a broken report) never prints a traceback. In this
    process: the one-line message is main's own handler (cli._LazyGroup.invoke), which a
    child would reach the same way, after the interpreter's start-up and torchlint's imports."""
    import torchlint.cli.check_output as c

    (tmp_path / "good.py").write_text(FINDING)

    def broken(*args, **kwargs):
        raise RuntimeError("the report broke")

    monkeypatch.setattr(c, "report", broken)
    monkeypatch.delenv("TORCHLINT_DEBUG", raising=False)  # it would re-raise for the traceback
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "good.py"], catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "internal error: RuntimeError: the report broke" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("target", ["/dev/zero", "fifo.toml", "huge.toml"], ids=["dev-zero", "fifo", "huge"])
def test_extend_never_blocks_or_reads_without_end(tmp_path: Path, target: str) -> None:
    """`extend = "/dev/zero"` read until the OOM killer; a FIFO blocked forever."""
    (tmp_path / "good.py").write_text(FINDING)
    if target == "fifo.toml":
        os.mkfifo(tmp_path / target)
    elif target == "huge.toml":
        (tmp_path / target).write_text("# padding\n" * 200_000)
    (tmp_path / "torchlint.toml").write_text(f'extend = "{target}"\n')
    proc = subprocess.run([sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "good.py"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "torchlint: error: cannot read" in proc.stderr and proc.stdout == ""


def test_a_size_below_one_byte_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(FINDING)
    (tmp_path / "torchlint.toml").write_text('max-file-size = "0.5B"\n')
    code, _, err = run(tmp_path, "good.py")
    assert code == 2 and "max-file-size" in err and "at least 1 byte" in err


def test_an_internal_error_is_never_reported_as_no_problems(tmp_path: Path, monkeypatch) -> None:
    from torchlint.engine.linter import Linter

    (tmp_path / "a.py").write_text(FINDING)

    def broken(self, *args, **kwargs):  # the engine failing on the file, as a bug would
        raise RuntimeError("the walk broke")

    monkeypatch.setattr(Linter, "lint", broken)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--jobs", "1", "a.py"], catch_exceptions=False)
    assert result.exit_code == 2
    assert "No problems found" not in result.stdout
    assert "1 file could not be checked in full (internal error, on stderr)." in result.stdout


def test_a_named_unreadable_file_is_tl000_and_the_others_are_checked(tmp_path: Path) -> None:
    """As configuration.md says (click refused the whole run: 'Path is not readable')."""
    (tmp_path / "good.py").write_text(FINDING)
    (tmp_path / "locked.py").write_text(FINDING)
    os.chmod(tmp_path / "locked.py", 0o000)
    try:
        proc = subprocess.run(
            [*_without_root_powers(), sys.executable, "-m", "torchlint", "check", "--min-impact", "low", "--no-cache", "--output-format", "json", "locked.py", "good.py"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
        )
    finally:
        os.chmod(tmp_path / "locked.py", 0o644)
    assert proc.returncode == 1, proc.stderr
    found = by_path(json.loads(proc.stdout))
    assert found == {"good.py": [("TL110", 2, 5)], "locked.py": [("TL000", 1, 1)]}
