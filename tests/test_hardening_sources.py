"""`check` on the source texts real trees hold: TL000 exactly where the running CPython rejects the
code (newer syntax too), notebooks whose cells are not text or whose kernel is not Python, and
Python's own line breaking for positions and ``# noqa``. (Odd files, paths and configurations:
test_hardening_check.py, whose ``run`` and ``by_path`` these use.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_hardening_check import by_path, run


# -- TL000 parity with the running CPython ------------------------------------------


VALID = [
    "import torch\n(x): int = 1\n",  # libcst cannot parse it; CPython can
    "x = [i for i in range(3)]\n",
    "import torch\n\x0c\nx = 1\n",  # a form feed on its own line is whitespace
    "import torch\ns = 'a\u2028b'\n",  # U+2028 inside a string is not a line break
]
INVALID = [  # (source, CPython's message)
    ("import torch\nfrom __future__ import annotations\n", "from __future__ imports must occur"),
    ("import os\nfrom __future__ import annotations\n", "from __future__ imports must occur"),
    ("import torch\nx = " + "(" * 300 + "1" + ")" * 300 + "\n", "too many nested parentheses"),
    ("import torch\ndef f():\n    nonlocal x\n", "nonlocal"),
    ("return 1\n", "'return' outside function"),
    ("from __future__ import braces\n", "not a chance"),
]
# PEP 695 is 3.12+, but a file that uses it is valid for the Python it targets: libcst
# parses it on 3.11 too, so it is no TL000 there either.
VALID.append("import torch\ntype X = int\n")


@pytest.mark.parametrize("source", VALID)
def test_code_cpython_compiles_never_gets_tl000(tmp_path: Path, source: str) -> None:
    (tmp_path / "ok.py").write_text(source)
    code, findings, _ = run(tmp_path, "ok.py")
    assert [f for f in findings if f["code"] == "TL000"] == []


@pytest.mark.parametrize(("source", "message"), INVALID)
def test_code_cpython_rejects_gets_tl000_at_its_position(tmp_path: Path, source: str, message: str) -> None:
    (tmp_path / "bad.py").write_text(source)
    try:
        compile(source, "bad.py", "exec", dont_inherit=True)
    except SyntaxError as error:
        expected = (error.lineno, error.offset)
    code, findings, _ = run(tmp_path, "bad.py")
    assert code == 1 and [f["code"] for f in findings] == ["TL000"]
    assert message in findings[0]["message"]
    assert (findings[0]["line"], findings[0]["column"]) == expected


# -- notebooks ----------------------------------------------------------------------


def _notebook(cells: list, language: str | None = "python") -> str:
    metadata = {"kernelspec": {"language": language, "name": "k"}} if language else {}
    return json.dumps({"cells": [{"cell_type": "code", "source": s, "metadata": {}} for s in cells], "metadata": metadata, "nbformat": 4})


@pytest.mark.parametrize("source", [["x = 1\n", 3], [None], {"a": 1}, ["ok\n", ["nested"]]])
def test_notebook_source_that_is_not_text_is_tl000(tmp_path: Path, source: object) -> None:
    (tmp_path / "nb.ipynb").write_text(_notebook(["import torch\n", source]))
    code, findings, _ = run(tmp_path, "nb.ipynb")
    assert code == 1 and [f["code"] for f in findings] == ["TL000"]
    assert "cell 2" in findings[0]["message"]


def test_notebooks_whose_kernel_is_not_python_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "r.ipynb").write_text(_notebook(["library(torch)\nx <- torch_zeros(3)$cuda()\n"], "R"))
    (tmp_path / "py.ipynb").write_text(_notebook(["import torch\n", "x = torch.zeros(3).cuda()\n"]))
    code, findings, _ = run(tmp_path, ".")
    assert code == 1 and {f["path"] for f in findings} == {"py.ipynb"}


# -- Python's own line breaking ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("import torch\r\rx = torch.zeros(3).cuda()\r", 3),  # CR-only (classic Mac)
        ("import torch\r\n\r\nx = torch.zeros(3).cuda()\r\n", 3),
        ("import torch\n\x0c\nx = torch.zeros(3).cuda()\n", 3),  # a form feed line
        ("import torch\ns = 'a\u2028b\x1cc\x85d'\nx = torch.zeros(3).cuda()\n", 3),  # breaks str.splitlines() only
    ],
)
def test_positions_and_noqa_use_pythons_line_breaks(tmp_path: Path, text: str, line: int) -> None:
    (tmp_path / "f.py").write_bytes(text.encode("utf-8"))
    code, findings, _ = run(tmp_path, "f.py")
    assert [(f["code"], f["line"]) for f in findings] == [("TL110", line)]
    newline = "\r" if "\r" in text and "\r\n" not in text else ("\r\n" if "\r\n" in text else "\n")
    suppressed = text.replace("cuda()", "cuda()  # noqa: TL110", 1)
    (tmp_path / "f.py").write_bytes(suppressed.encode("utf-8"))
    assert run(tmp_path, "f.py")[:2] == (0, [])
    # a noqa on the line before (as str.splitlines() would misplace it) does not count
    lines = text.split(newline)
    lines[line - 2] += "  # noqa: TL110"
    (tmp_path / "f.py").write_bytes(newline.join(lines).encode("utf-8"))
    assert [(f["code"], f["line"]) for f in run(tmp_path, "f.py")[1]] == [("TL110", line)]


def test_python_312_syntax_is_checked_on_any_python(tmp_path: Path) -> None:
    """PEP 695 type parameters and aliases and PEP 701 f-strings were TL000 on 3.11,
    whose compiler rejects them although libcst parses them."""
    (tmp_path / "new.py").write_text(
        'import torch\nclass Box[T]:\n    pass\ntype Pair = tuple[int, int]\nname = f"{"nested"}"\n'
        "def first[T](xs: list[T]) -> T:\n    return xs[0]\ny = torch.zeros(3).cuda()\n"
    )
    (tmp_path / "plain.py").write_text("class Box[T]:\n    pass\n")  # no torch: the light path
    (tmp_path / "bad.py").write_text("import torch\nreturn 1\n")  # rejected by every Python
    code, findings, _ = run(tmp_path, "new.py", "plain.py", "bad.py")
    assert code == 1
    assert by_path(findings) == {"new.py": [("TL110", 8, 5)], "bad.py": [("TL000", 2, 1)]}
