"""The places analysis answers "is there device work before / after this?" once per block,
so a long training loop costs time linear in its length, not quadratic (a 1200-line loop
took 25x its parse, against 5x now)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.analysis.tree import Tree
from torchlint.config import from_table
from torchlint.engine import lint_source


def _long_loop(statements: int) -> str:
    lines = ["import torch", "", "def log(v):", "    print(v)", "", "def train(model, loader, opt):",
             "    for batch in loader:", "        out = model(batch)"]
    for i in range(statements):
        lines.append((f"        v{i} = torch.relu(out) * {i}", f"        log(v{i - 1})",
                      f"        s{i} = float(v{i - 2}.sum())", f"        print(s{i - 1})")[i % 4])
    lines += ["        loss = out.mean()", "        loss.backward()", "        opt.step()", ""]
    return "\n".join(lines)


def _nodes_visited(monkeypatch: pytest.MonkeyPatch, statements: int) -> tuple[int, list[str]]:
    """How many times the analyses asked for a node's children while checking the loop."""
    asked = 0
    children = Tree.children

    def counted(self: Tree, node):  # type: ignore[no-untyped-def]
        nonlocal asked
        asked += 1
        return children(self, node)

    monkeypatch.setattr(Tree, "children", counted)
    findings = lint_source(_long_loop(statements), "train.py", from_table({"select": ["ALL"], "min-impact": "low"}, Path(".")))
    monkeypatch.undo()
    return asked, [f"{f.code}:{f.location.line}" for f in findings]


def test_a_long_loop_is_walked_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    small, small_findings = _nodes_visited(monkeypatch, 40)
    large, large_findings = _nodes_visited(monkeypatch, 160)
    # the checks still find the reads of the long loop, one per `float(...)`
    assert sum(f.startswith("TL1") for f in large_findings) >= 40
    assert len(large_findings) > len(small_findings)
    # four times the statements: about four times the visits (a scan of the statements before each call: sixteen)
    assert large <= 6 * small, (small, large)
