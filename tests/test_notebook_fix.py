"""`check --fix` and `--diff` on notebooks: the fixed code goes back into its cells, and
every other byte of the `.ipynb` stays as it was."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import run_check
from torchlint.engine.notebook import Unmappable, put_back
from torchlint.engine.source import Source, notebook_source
from torchlint.findings import Finding, Location

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==\n"
SETUP = ["%matplotlib inline\n", "import torch\n", "!pip install tqdm\n", "x = torch.zeros(3).cuda()  # größe"]
LOOP = [
    "opt = torch.optim.SGD(params, lr=0.1)\n",
    "for xb, yb in loader:\n",
    "    loss = model(xb).sum()\n",
    "    loss.backward()\n",
    "    opt.zero_grad(set_to_none=False)\n",
    "    opt.step()",
]


def notebook(setup: list[str] | str = SETUP, loop: list[str] | str = LOOP) -> dict:
    """A notebook as Jupyter writes it: markdown, outputs (an image, a stream), ids, metadata."""
    return {
        "cells": [
            {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Training — ünïcode\n", "Notes."]},
            {
                "cell_type": "code", "execution_count": 1, "id": "setup", "metadata": {"tags": ["setup"], "collapsed": False},
                "outputs": [{"data": {"image/png": PNG, "text/plain": ["<Figure size 640x480 with 1 Axes>"]}, "metadata": {"needs_background": "light"}, "output_type": "display_data"}],
                "source": setup,
            },
            {
                "cell_type": "code", "execution_count": 2, "id": "loop", "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["epoch 0: 1.25\n", "epoch 1: 0.75\n"]}],
                "source": loop,
            },
            {"cell_type": "code", "execution_count": None, "id": "empty", "metadata": {}, "outputs": [], "source": []},
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}, "language_info": {"name": "python", "version": "3.12.0"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def write(path: Path, data: dict, indent: int | None = 1, ensure_ascii: bool = False, newline: bool = True) -> str:
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + ("\n" if newline else "")
    path.write_bytes(text.encode("utf-8"))
    return text


def without_sources(data: dict) -> dict:
    masked = copy.deepcopy(data)
    for cell in masked["cells"]:
        cell["source"] = None
    return masked


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The raw lines of the file that differ (both files have as many lines)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new) if a != b]


@pytest.mark.parametrize("indent", [1, 2])
def test_fix_rewrites_only_the_fixed_lines(tmp_path: Path, indent: int) -> None:
    path = tmp_path / "train.ipynb"
    before = write(path, notebook(), indent)
    code, out, _ = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")
    assert code == 0, out
    assert "Fixed 2 problems." in out
    after = path.read_text(encoding="utf-8")
    fixed, original = json.loads(after), json.loads(before)
    assert without_sources(fixed) == without_sources(original)  # outputs, ids, metadata, order
    assert fixed["cells"][1]["source"] == SETUP[:3] + ['x = torch.zeros(3, device="cuda")  # größe']
    assert fixed["cells"][2]["source"] == LOOP[:4] + ["    opt.zero_grad(set_to_none=True)\n", LOOP[5]]
    # Byte for byte, only the two fixed lines of the file changed (same indentation).
    pad = " " * (indent * 4)
    assert changed_lines(before, after) == [
        (f'{pad}"x = torch.zeros(3).cuda()  # größe"\n', f'{pad}"x = torch.zeros(3, device=\\"cuda\\")  # größe"\n'),
        (f'{pad}"    opt.zero_grad(set_to_none=False)\\n",\n', f'{pad}"    opt.zero_grad(set_to_none=True)\\n",\n'),
    ]
    assert after.endswith("}\n") and "ünïcode" in after
    # A second --fix finds nothing to fix and writes nothing.
    assert run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")[0] == 0
    assert path.read_text(encoding="utf-8") == after


def test_diff_shows_each_changed_cell_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "train.ipynb"
    before = write(path, notebook())
    code, out, err = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--diff")
    assert code == 1
    assert out == (
        "--- a/train.ipynb:cell 2\n+++ b/train.ipynb:cell 2\n@@ -1,4 +1,4 @@\n"
        " %matplotlib inline\n import torch\n !pip install tqdm\n"
        "-x = torch.zeros(3).cuda()  # größe\n+x = torch.zeros(3, device=\"cuda\")  # größe\n"
        "--- a/train.ipynb:cell 3\n+++ b/train.ipynb:cell 3\n@@ -2,5 +2,5 @@\n"
        " for xb, yb in loader:\n     loss = model(xb).sum()\n     loss.backward()\n"
        "-    opt.zero_grad(set_to_none=False)\n+    opt.zero_grad(set_to_none=True)\n     opt.step()\n"
    )
    assert "Would fix 2 problems in 1 file." in err
    assert path.read_text(encoding="utf-8") == before


def test_string_sources_ascii_escapes_and_no_final_newline_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "train.ipynb"
    before = write(path, notebook("".join(SETUP), "".join(LOOP)), indent=2, ensure_ascii=True, newline=False)
    assert run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")[0] == 0
    after = path.read_text(encoding="utf-8")
    cells = json.loads(after)["cells"]
    assert cells[1]["source"] == "".join(SETUP[:3]) + 'x = torch.zeros(3, device="cuda")  # größe'
    assert isinstance(cells[2]["source"], str) and "set_to_none=True" in cells[2]["source"]
    assert after.isascii() and "\\u00fcn\\u00efcode" in after and "# gr\\u00f6\\u00dfe" in after and not after.endswith("\n")
    assert len(changed_lines(before, after)) == 2


def test_magics_and_crlf_lines_come_back_byte_identical(tmp_path: Path) -> None:
    setup = ["%%time\n", "import torch\r\n", "%load_ext autoreload  # keep\r\n", "x = torch.zeros(3).cuda()\r\n", "?torch.zeros\r\n"]
    path = tmp_path / "train.ipynb"
    write(path, notebook(setup))
    assert run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")[0] == 0
    source = json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"]
    assert source == setup[:3] + ['x = torch.zeros(3, device="cuda")\r\n', setup[4]]


def test_a_fix_across_cells_is_left_out_and_said(tmp_path: Path) -> None:
    data = notebook(["import torch\n", "y = (torch.zeros(3)\n"], [".cuda())\n", *LOOP])
    path = tmp_path / "train.ipynb"
    write(path, data)
    code, out, err = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix", "--output-format", "concise")
    assert code == 1
    assert "train.ipynb:cell 2:2:6: TL110 not fixed: it would change lines across cells 2 and 3" in err
    assert "train.ipynb:cell 2:2:6: TL110" in out and "TL303" not in out  # the other fix is applied
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["source"] == data["cells"][1]["source"]
    assert "    opt.zero_grad(set_to_none=True)\n" in cells[2]["source"]


def test_a_notebook_with_no_fix_that_fits_its_cells_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "train.ipynb"
    before = write(path, notebook(["import torch\n", "y = (torch.zeros(3)\n"], [".cuda())\n"]))
    code, out, err = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--diff")
    assert code == 0 and out == ""  # as ruff: --diff fails only on a diff, not on what no fix removes
    assert "TL110 not fixed" in err and "Would fix 0 problems in 0 files." in err
    assert path.read_text(encoding="utf-8") == before


def test_a_cell_that_does_not_parse_is_kept_and_still_reported(tmp_path: Path) -> None:
    data = notebook(loop=["def broken(:\n", "    pass"])
    data["cells"].append({"cell_type": "code", "execution_count": None, "id": "loop", "metadata": {}, "outputs": [], "source": LOOP})
    path = tmp_path / "train.ipynb"
    write(path, data)
    code, out, _ = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix", "--output-format", "concise")
    assert code == 1 and "train.ipynb:cell 3:1:3: TL000" in out and "Fixed 2 problems." in out
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[2]["source"] == data["cells"][2]["source"]
    assert 'x = torch.zeros(3, device="cuda")  # größe' in cells[1]["source"]
    assert "    opt.zero_grad(set_to_none=True)\n" in cells[4]["source"]


def _source(tmp_path: Path, data: dict) -> Source:
    source = notebook_source(str(tmp_path / "nb.ipynb"), json.dumps(data, indent=1))
    assert isinstance(source, Source)
    return source


def test_put_back_refuses_a_masked_line_and_lines_between_cells(tmp_path: Path) -> None:
    source = _source(tmp_path, notebook())
    lines = source.text.splitlines(keepends=True)
    assert lines[0] == "pass  # %matplotlib inline\n"
    with pytest.raises(Unmappable, match="IPython line of cell 2"):
        put_back(source, "pass\n" + "".join(lines[1:]))
    with pytest.raises(Unmappable, match="between cells 2 and 3"):
        put_back(source, "".join(lines[:4]) + "extra = 1\n" + "".join(lines[4:]))
    # A line added inside a cell stays in that cell.
    fixed = put_back(source, "".join(lines[:3]) + "extra = 1\n" + "".join(lines[3:]))
    assert json.loads(fixed.notebook or "")["cells"][1]["source"] == SETUP[:3] + ["extra = 1\n", SETUP[3]]


def test_lines_added_to_an_empty_list_source_are_laid_out_as_the_file_is(tmp_path: Path) -> None:
    source = _source(tmp_path, notebook())
    fixed = put_back(source, source.text + "extra = 1\n")
    text = fixed.notebook or ""
    assert json.loads(text)["cells"][3]["source"] == ["\n", "extra = 1"]
    assert '   "source": [\n    "\\n",\n    "extra = 1"\n   ]\n' in text


@pytest.mark.parametrize("seed", range(6))
def test_an_edited_line_changes_only_its_own_cell(tmp_path: Path, seed: int) -> None:
    """Random notebooks (list or string sources, CRLF, magics, empty cells): putting back
    the code unchanged gives the same bytes; editing one code line changes only that line."""
    import random

    rng = random.Random(seed)
    pool = ["x = 1", "%time y = 2", "!ls", "", "def f():", "    return 3", "# note", "z = torch.ones(2)"]
    data = notebook()
    for number in range(rng.randint(1, 5)):
        lines = [rng.choice(pool) + rng.choice(["\n", "\r\n"]) for _ in range(rng.randint(0, 4))]
        if lines and rng.random() < 0.5:
            lines[-1] = lines[-1].rstrip("\r\n")
        body: list[str] | str = lines if rng.random() < 0.5 else "".join(lines)
        data["cells"].insert(rng.randint(0, len(data["cells"])), {"cell_type": "code", "id": f"r{number}", "metadata": {}, "outputs": [], "source": body})
    source = _source(tmp_path, data)
    assert put_back(source, source.text).notebook == source.notebook
    lines = source.text.splitlines(keepends=True)
    editable = [i for i, line in enumerate(lines) if line.strip() and not line.startswith(("pass  #", "#"))]
    index = rng.choice(editable)
    lines[index] = lines[index].rstrip("\n") + "  # edited\n"
    after = json.loads(put_back(source, "".join(lines)).notebook or "")
    before = json.loads(source.notebook or "")
    changed = [i for i, (a, b) in enumerate(zip(before["cells"], after["cells"])) if a != b]
    assert len(changed) == 1 and without_sources(after) == without_sources(before)
    old, new = before["cells"][changed[0]]["source"], after["cells"][changed[0]]["source"]
    assert type(old) is type(new)
    assert "".join(new).replace("  # edited", "", 1) == "".join(old)


def test_stdin_fix_prints_the_fixed_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from torchlint.cli import main

    path = tmp_path / "train.ipynb"
    before = write(path, notebook())
    run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")
    # --stdin-filename is relative to the working directory: from the repository's, the
    # whole torchlint project (200 files) was summarised as the notebook's context
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "-", "--stdin-filename", "train.ipynb", "--min-impact", "low", "--fix"], input=before.encode("utf-8"))
    assert result.stdout == path.read_text(encoding="utf-8")


def test_findings_sort_by_cell_then_line_and_related_places_carry_their_cell() -> None:
    late = Finding("TL101", "n", "m", Location("nb.ipynb", 1, 1, cell=3), related=(Location("nb.ipynb", 2, 1, cell=4),))
    early = Finding("TL101", "n", "m", Location("nb.ipynb", 9, 1, cell=2))
    assert sorted([late, early], key=Finding.sort_key) == [early, late]
    assert late.to_dict()["related"] == [{"path": "nb.ipynb", "line": 2, "column": 1, "cell": 4}]


def test_related_places_in_a_notebook_name_their_cell_in_json_and_sarif(tmp_path: Path) -> None:
    cells = [
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=32)\n",
        "for xb, yb in loader:\n    loss = model(xb).sum()\n    loss.backward()\n    opt.step()\n",
    ]
    data = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": c} for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    write(tmp_path / "loader.ipynb", data)
    _, out, _ = run_check(tmp_path, "loader.ipynb", "--no-cache", "--min-impact", "low", "--select", "TL201", "--output-format", "json")
    (finding,) = json.loads(out)
    assert (finding["cell"], finding["line"]) == (1, 3)
    assert finding["related"] == [{"path": "loader.ipynb", "line": 1, "column": 1, "cell": 2}]
    _, out, _ = run_check(tmp_path, "loader.ipynb", "--no-cache", "--min-impact", "low", "--select", "TL201", "--output-format", "sarif")
    (related,) = json.loads(out)["runs"][0]["results"][0]["relatedLocations"]
    assert related["message"]["text"] == "cell 2, line 1, column 1: where this costs time"


def test_fixes_on_neighbouring_lines_of_two_cells_are_both_applied(tmp_path: Path) -> None:
    """The last line of one cell and the first of the next form one run of the line diff:
    both fixes were skipped, silently, while the summary said "2 fixable"."""
    data = notebook(["import torch\n", "a = torch.zeros(3).cuda()"], ["b = torch.ones(3).cuda()\n", *LOOP])
    path = tmp_path / "train.ipynb"
    write(path, data)
    code, out, err = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix", "--output-format", "concise")
    assert "Fixed 3 problems." in out and "TL110" not in out, out + err
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["source"] == ["import torch\n", 'a = torch.zeros(3, device="cuda")']
    assert cells[2]["source"][0] == 'b = torch.ones(3, device="cuda")\n'


def test_ipython_assignments_are_not_syntax_errors(tmp_path: Path) -> None:
    """`files = !ls` and `t = %timeit -o f()` are IPython, as `!ls` is: they were TL000,
    and the name they bind stays bound for the code after them."""
    setup = ["import torch\n", "files = !ls *.pt\n", "t = %timeit -o torch.zeros(3)\n", "first, rest = !head -2 log\n",
             "x = torch.zeros(3).cuda()\n", "print(files, t, first, rest, x)"]
    path = tmp_path / "train.ipynb"
    before = write(path, notebook(setup))
    code, out, _ = run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--output-format", "concise")
    assert "TL000" not in out and "train.ipynb:cell 2:5:5: TL110" in out, out
    run_check(tmp_path, "train.ipynb", "--no-cache", "--min-impact", "low", "--fix")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["source"][:4] == setup[:4]  # the masked lines come back as they were
    assert cells[1]["source"][4] == 'x = torch.zeros(3, device="cuda")\n' and before != path.read_text(encoding="utf-8")
