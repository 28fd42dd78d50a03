"""Shared test helpers: fixture discovery and the `# expect:` markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
RULES_DIR = ROOT / "rules"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>TL\d{3}(?:\s*,\s*TL\d{3})*)")


def expected_markers(text: str) -> set[tuple[int, str]]:
    """``(line, code)`` for every ``# expect: TL101[, TL102]`` marker in ``text``."""
    found = set()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            for code in re.split(r"\s*,\s*", match.group("codes")):
                found.add((number, code))
    return found


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
