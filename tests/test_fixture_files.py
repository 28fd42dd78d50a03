"""Every fixture is a file Python itself can compile from its bytes: a comment that reads as an
encoding declaration (``# Contrastive decoding: each token ...`` matches PEP 263's ``coding: each``)
makes the file unreadable to Python, and ``torchlint check`` on the folder reports TL000 for it,
while the rule tests, reading it as text, would not notice."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FILES = sorted(p for p in FIXTURES.rglob("*.py") if "TL000" not in p.parts)


def test_there_are_fixtures() -> None:
    assert len(FILES) > 100


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_python_compiles_the_fixture_from_its_bytes(path: Path) -> None:
    compile(path.read_bytes(), str(path), "exec")
