"""A test suite's file, by its path alone (no libcst: the join and the settling step ask it too)."""

from __future__ import annotations


def test_suite_path(path: str) -> bool:
    """``tests/…``, ``test_x.py``, ``x_test.py``, ``conftest.py``: a test suite's file."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (any(part in ("tests", "test") for part in parts[:-1])
            or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py")
