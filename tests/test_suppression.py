"""Each suppression form: line `# noqa`, file-level `# torchlint: noqa`, a malformed
directive (suppresses nothing, warns once), rule names in selections, --add-noqa
(idempotent, merging, keeping comments), --statistics and --show-fixes."""

from __future__ import annotations

import json
from pathlib import Path


from conftest import run_check
from torchlint.config import Config
from torchlint.engine import lint_source

LOOP = """import torch
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    opt.zero_grad(set_to_none=False){zero}
    print(loss.item()){item}
"""


def source(zero: str = "", item: str = "", head: str = "") -> str:
    return head + LOOP.format(zero=zero, item=item)


def codes(text: str, config: Config | None = None) -> list[str]:
    return [f.code for f in lint_source(text, "train.py", config)]


def run(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`check ARGS` showing every finding: TL303 (a memset per step) is low impact."""
    return run_check(cwd, "--min-impact", "low", *args)


def test_line_noqa_forms() -> None:
    assert codes(source()) == ["TL303", "TL101"]
    assert codes(source(item="  # noqa")) == ["TL303"]
    assert codes(source(item="  # noqa: TL101")) == ["TL303"]
    assert codes(source(item="  # noqa:TL102,TL101 reason")) == ["TL303"]
    assert codes(source(item="  # noqa: TL303")) == ["TL303", "TL101"]


def test_file_level_noqa_anywhere_on_its_own_line() -> None:
    assert codes(source(head="# torchlint: noqa\n")) == []
    assert codes(source() + "\n# torchlint: noqa: TL101\n") == ["TL303"]
    assert codes(source() + "    # torchlint: noqa: TL101, TL303\n") == []
    # At the end of a line of code it is not file-level (nor a line noqa).
    assert codes(source(item="  # torchlint: noqa")) == ["TL303", "TL101"]


def test_malformed_noqa_suppresses_nothing_and_warns_once(capsys) -> None:  # type: ignore[no-untyped-def]
    text = source(item="  # noqa: scalar-sync-in-loop")
    assert codes(text) == ["TL303", "TL101"]
    codes(text)
    err = capsys.readouterr().err
    assert err.count("malformed") == 1
    assert "train.py:6: malformed `# noqa: scalar-sync-in-loop` suppresses nothing; use `# noqa: TL101`" in err
    assert codes(source(head="# torchlint: noqa: everything\n")) == ["TL303", "TL101"]
    assert "malformed `# torchlint: noqa: everything`" in capsys.readouterr().err


def test_rule_names_work_where_codes_do(tmp_path: Path) -> None:
    assert codes(source(), Config(select=("SCALAR-SYNC-IN-LOOP",))) == ["TL101"]
    assert codes(source(), Config(ignore=("ZERO-GRAD-MEMSET",))) == ["TL101"]
    (tmp_path / "train.py").write_text(source())
    code, out, _ = run(tmp_path, "train.py", "--select", "scalar-sync-in-loop", "--output-format", "json")
    assert code == 1 and [f["code"] for f in json.loads(out)] == ["TL101"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["scalar-sync-in-loop"]\n')
    assert [f["code"] for f in json.loads(run(tmp_path, "train.py", "--output-format", "json")[1])] == ["TL303"]
    code, _, err = run(tmp_path, "train.py", "--select", "no-such-rule")
    assert code == 2 and "unknown rule code" in err


def test_add_noqa_keeps_comments_merges_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(source(zero="  # reset", item="  # noqa: TL999 kept"))
    code, _, err = run(tmp_path, "--add-noqa", "train.py")
    assert code == 0 and "Added 2 noqa directives." in err
    after = path.read_text()
    assert "    opt.zero_grad(set_to_none=False)  # reset  # noqa: TL303\n" in after
    assert "    print(loss.item())  # noqa: TL101, TL999 kept\n" in after
    assert run(tmp_path, "train.py")[0] == 0
    code, _, err = run(tmp_path, "--add-noqa", "train.py")
    assert "Added 0 noqa directives." in err and path.read_text() == after


def _noqa_round_trip(tmp_path: Path, data: bytes) -> bytes:
    """--add-noqa on ``data``: the result compiles and a second check finds nothing."""
    path = tmp_path / "train.py"
    path.write_bytes(data)
    assert run(tmp_path, "train.py")[0] == 1
    code, _, err = run(tmp_path, "--add-noqa", "train.py")
    after = path.read_bytes()
    compile(after, "train.py", "exec")
    assert code == 0 and "Added" in err and run(tmp_path, "train.py")[0] == 0, err
    return after


def test_add_noqa_goes_after_the_last_token_of_a_continued_line(tmp_path: Path) -> None:
    text = "import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    v = loss.item() + \\\n        1\n"
    after = _noqa_round_trip(tmp_path, text.encode())
    assert after.decode().endswith("    v = loss.item() + \\\n        1  # noqa: TL101\n")


def test_add_noqa_counts_lines_as_python_does(tmp_path: Path) -> None:
    """A form feed and U+2028 are inside a line for Python (str.splitlines breaks at
    both): the comment went a line early, or into the string."""
    head = b"import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n"
    after = _noqa_round_trip(tmp_path, head + "\x0c    s = 'a\u2028b' + str(loss.item())\n".encode())
    assert after.endswith("\x0c    s = 'a\u2028b' + str(loss.item())  # noqa: TL101\n".encode())
    after = _noqa_round_trip(tmp_path, head.replace(b"\n", b"\r") + b"    v = loss.item()\r")
    assert after.endswith(b"    v = loss.item()  # noqa: TL101\r") and after.count(b"\r") == 5
    after = _noqa_round_trip(tmp_path, head + b'    v = str(loss.item()) + """\n# a line\n"""\n')
    assert after.endswith(b'    v = str(loss.item()) + """\n# a line\n"""  # noqa: TL101\n')


def test_add_noqa_never_edits_a_string(tmp_path: Path) -> None:
    head = "import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n"
    after = _noqa_round_trip(tmp_path, (head + '    print(loss.item(), "# noqa: TL999")\n').encode())
    assert after.decode().endswith('    print(loss.item(), "# noqa: TL999")  # noqa: TL101\n')


def test_noqa_in_a_string_suppresses_nothing() -> None:
    text = source().replace("print(loss.item())", 'print(loss.item(), "# noqa")')
    assert codes(text) == ["TL303", "TL101"]
    assert codes(source(item="  # noqa")) == ["TL303"]


def test_a_file_directive_in_a_docstring_silences_nothing() -> None:
    doc = '"""Usage notes.\n\n# torchlint: noqa\n"""\n'
    assert codes(source(head=doc)) == ["TL303", "TL101"]
    assert codes(source(head="# torchlint: noqa\n")) == []
    assert codes(source(head="x = 1  # torchlint: noqa\n")) == ["TL303", "TL101"]  # not a line of its own


def test_statistics_counts_per_rule(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(source())
    (tmp_path / "b.py").write_text(source(zero="  # noqa"))
    code, out, _ = run(tmp_path, ".", "--statistics")
    assert code == 1
    # the reads are the step's last device work: one sync per step at its end, medium
    assert out.splitlines() == ["2\tTL101\t    scalar-sync-in-loop\t2 medium", "1\tTL303\t[*] zero-grad-memset\t1 low"]
    rows = json.loads(run(tmp_path, ".", "--statistics", "--output-format", "json")[1])
    assert rows == [
        {"code": "TL101", "name": "scalar-sync-in-loop", "count": 2, "fixable": False, "unsafe_fixable": False, "impact": {"medium": 2}},
        {"code": "TL303", "name": "zero-grad-memset", "count": 1, "fixable": True, "unsafe_fixable": False, "impact": {"low": 1}},
    ]
    # By default (medium and up) the low one is not counted, and the last line says so.
    code, out, _ = run_check(tmp_path, ".", "--statistics")
    assert out.splitlines() == ["2\tTL101\t    scalar-sync-in-loop\t2 medium",
                                "(1 lower-impact finding not counted: `--min-impact low` counts them)"]


def test_show_fixes_before_and_after_fixing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(source())
    _, _, err = run(tmp_path, "a.py", "--show-fixes")
    assert "Would fix 1 problem:\n- a.py:\n    1 × TL303 (zero-grad-memset)" in err
    code, _, err = run(tmp_path, "a.py", "--show-fixes", "--fix")
    assert "Fixed 1 problem:\n- a.py:\n    1 × TL303 (zero-grad-memset)" in err
    assert "set_to_none=True" in (tmp_path / "a.py").read_text()
    assert "No fixes applied." in run(tmp_path, "a.py", "--show-fixes", "--fix")[2]


def test_add_noqa_writes_only_what_fix_would_write(tmp_path: Path) -> None:
    """A symlink out of the checked tree and a read-only file are refused, said, exit 2."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "shared.py").write_text(source())
    (tree / "link.py").symlink_to(outside / "shared.py")
    code, _, err = run(tree, "--add-noqa", "link.py")
    assert code == 2 and "outside the checked tree" in err and "could not be written" in err
    assert (outside / "shared.py").read_text() == source()
    locked = tree / "locked.py"
    locked.write_text(source())
    locked.chmod(0o444)
    code, _, err = run(tree, "--add-noqa", "locked.py")
    assert code == 2 and "locked.py is read-only" in err and "Added 0 noqa directives." in err
    assert locked.read_text() == source()
