"""Every class of hostile or careless input, through `torchlint check` as a user runs it.

    python benchmarks/robustness.py --classes        (or: python benchmarks/input_classes.py)

Each class is a directory of generated cases, checked by one `torchlint check` process
(and, where the class is about how a path or stdin is given, a few more): the run must end
within its time limit, with exit status 0, 1 or 2, no traceback and no internal error on
stderr, and every good file beside the bad ones still reported. Hardening round 3 found
one failure per class; these are the classes, not only those instances.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

GOOD = "import torch\nx = torch.zeros(3).cuda()\n"  # one TL110: proof the run went on
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Case:
    """One invocation: ``args`` of `torchlint check` in the class's directory."""

    args: list[str]
    stdin: bytes | None = None
    expect_good: bool = True  # good.py's TL110 must be in the report
    timeout: float = 60.0


@dataclass
class InputClass:
    name: str
    build: Callable[[Path], list[Case]]
    notes: list[str] = field(default_factory=list)


def _encodings(d: Path) -> list[Case]:
    (d / "bom.py").write_bytes(b"\xef\xbb\xbfimport torch\n")
    (d / "latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\n")
    (d / "bad_utf8.py").write_bytes(b"import torch\nname = '\xff\xfe'\n")
    (d / "nul.py").write_bytes(b"import torch\nx = 1\x00\n")
    (d / "unknown_cookie.py").write_bytes(b"# coding: klingon\nimport torch\n")
    (d / "utf16.py").write_bytes("import torch\n".encode("utf-16"))
    (d / "lone_cr.py").write_bytes(b"import torch\rx = torch.zeros(3).cuda()\r")
    (d / "formfeed.py").write_bytes(b"import torch\n\x0cx = torch.zeros(3).cuda()  # \xe2\x80\xa8\n")
    return [Case(["."]), Case(["--fix", "."])]


def _expressions(d: Path) -> list[Case]:
    (d / "chain.py").write_text("import torch\ny = " + " + ".join(["a"] * 3000) + "\n")
    (d / "chain_fix.py").write_text("import torch\nz = torch.zeros(3).cuda()\ny = " + " + ".join(["a"] * 1500) + "\n")
    (d / "nested.py").write_text("import torch\ny = " + "(" * 200 + "1" + ")" * 200 + "\n")
    (d / "deep_lists.py").write_text("import torch\ny = " + "[" * 90 + "]" * 90 + "\n")
    (d / "many_items.py").write_text("import torch\nfor x in loader:\n    l = m(x)\n    l.backward()\n    o.step()\n"
                                      + "".join(f"    v{i} = l.item()\n" for i in range(3000)))
    (d / "py312.py").write_text('import torch\nclass A[T]:\n    pass\ntype P = int\ns = f"{"q"}"\n')
    return [Case(["."]), Case(["--fix", "."]), Case(["-", "--fix", "--stdin-filename", "chain_fix.py"],
                                                       stdin=(d / "chain_fix.py").read_bytes(), expect_good=False)]


def _notebooks(d: Path) -> list[Case]:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    def nb(sources: list[str], kernel: str = "python3") -> str:
        return json.dumps({"cells": [{**cell, "source": s} for s in sources], "metadata": {"kernelspec": {"name": kernel}},
                           "nbformat": 4, "nbformat_minor": 5})
    (d / "ok.ipynb").write_text(nb(["import torch\n", "files = !ls\nt = %timeit -o 1\n%matplotlib inline\n", "x = torch.zeros(3).cuda()"]))
    (d / "broken_cell.ipynb").write_text(nb(["import torch\n", "def (:\n", "y = torch.ones(2).cuda()"]))
    (d / "not_json.ipynb").write_text("{ not json")
    (d / "deep.ipynb").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (d / "no_cells.ipynb").write_text('{"metadata": {}}')
    (d / "julia.ipynb").write_text(nb(["using Flux"], kernel="julia-1.9"))
    (d / "source_not_text.ipynb").write_text(json.dumps({"cells": [{**cell, "source": 3}], "metadata": {}}))
    return [Case(["."]), Case(["--fix", "."]), Case(["--add-noqa", "."])]


def _file_system(d: Path) -> list[Case]:
    (d / "real.py").write_text(GOOD)
    (d / "broken_link.py").symlink_to(d / "nowhere.py")
    (d / "loop_a.py").symlink_to(d / "loop_b.py")
    (d / "loop_b.py").symlink_to(d / "loop_a.py")
    os.mkfifo(d / "pipe.py")
    (d / "empty.py").write_text("")
    (d / "dir.py").mkdir()
    (d / "odd name \udcff.py".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")).write_text(GOOD)
    return [Case(["."]), Case(["pipe.py", "broken_link.py", "loop_a.py", "dir.py", "good.py"]), Case(["--fix", "."]),
            Case(["missing.py", "good.py"])]


def _configs(d: Path) -> list[Case]:
    cases = []
    for name, text in {
        "dev_zero": 'extend = "/dev/zero"\n', "fifo": 'extend = "fifo.toml"\n', "cycle": 'extend = "torchlint.toml"\n',
        "tiny_size": 'max-file-size = "0.5B"\n', "bad_toml": "select = [\n", "unknown_key": "selct = []\n",
        "bad_code": 'select = ["TL999"]\n', "not_utf8": None,
    }.items():
        sub = d / name
        sub.mkdir()
        (sub / "good.py").write_text(GOOD)
        if name == "fifo":
            os.mkfifo(sub / "fifo.toml")
        if text is None:
            (sub / "torchlint.toml").write_bytes(b"select = ['\xff']\n")
        else:
            (sub / "torchlint.toml").write_text(text)
        cases.append(Case([f"{name}/good.py"], expect_good=False, timeout=30))
    return cases


def _stdin(d: Path) -> list[Case]:
    (d / "pyproject.toml").write_text('[tool.torchlint]\nmax-file-size = "2KB"\n')
    big = (GOOD + "# pad\n" * 2000).encode()
    return [Case(["-", "--stdin-filename", "s.py"], stdin=big, expect_good=False),
            Case(["-", "--fix", "--stdin-filename", "s.py"], stdin=big, expect_good=False),
            Case(["-", "--stdin-filename", "s.py"], stdin=b"\xff\xfe\x00garbage", expect_good=False),
            Case(["-", "--stdin-filename", "n.ipynb"], stdin=b'{"cells": ' + b"[" * 50_000, expect_good=False)]


CLASSES = [
    InputClass("odd bytes and encodings", _encodings),
    InputClass("pathological expressions", _expressions),
    InputClass("notebooks", _notebooks),
    InputClass("file-system oddities", _file_system),
    InputClass("configs", _configs),
    InputClass("stdin", _stdin),
]


def run_case(directory: Path, case: Case) -> tuple[bool, str, float]:
    """(passed, why, seconds) of one invocation."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "torchlint", "check", "--no-cache", "--output-format", "json", *case.args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=directory, env=env, input=case.stdin or b"", capture_output=True, timeout=case.timeout)
    except subprocess.TimeoutExpired:
        return False, f"no end within {case.timeout:.0f} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode not in (0, 1, 2):
        return False, f"exit status {proc.returncode}", seconds
    if "Traceback" in err or "internal error" in err:
        return False, err.strip().splitlines()[-1][:160], seconds
    if case.expect_good and "--fix" not in case.args and "--add-noqa" not in case.args:
        try:
            found = json.loads(proc.stdout or b"[]")
        except json.JSONDecodeError:
            return False, "stdout is not the JSON report", seconds
        if not any(f["path"].endswith("good.py") and f["code"] == "TL110" for f in found):
            return False, "good.py's finding is missing: a bad file stopped the others", seconds
    return True, f"exit {proc.returncode}", seconds


def sweep(say: Callable[[str], None] = print) -> int:
    """Run every class; how many invocations failed."""
    failed = 0
    for input_class in CLASSES:
        with tempfile.TemporaryDirectory(prefix="torchlint-classes-") as tmp:
            directory = Path(tmp)
            (directory / "good.py").write_text(GOOD)
            cases = input_class.build(directory)
            for case in cases:
                (directory / "good.py").write_text(GOOD)  # a --fix case before this one fixed it
                passed, why, seconds = run_case(directory, case)
                failed += not passed
                say(f"{'ok  ' if passed else 'FAIL'} {input_class.name:<26} {' '.join(case.args)[:60]:<60} {seconds:6.2f} s  {why}")
    return failed


if __name__ == "__main__":
    sys.exit(1 if sweep() else 0)
