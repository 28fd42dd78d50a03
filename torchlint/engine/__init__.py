"""The static pipeline: files → parse → checks → findings → suppressions and config (→ fixes).

Importing this package stays cheap (no libcst, no checks), so a run whose results all come
from the cache never loads them: ``Linter`` and ``lint_source`` are imported on first use.
"""

from __future__ import annotations

from typing import Any

from torchlint.engine.discover import MissingPathError
from torchlint.engine.lint import LintResult, lint_paths
from torchlint.engine.settle import settle_steps

_HEAVY = {"Linter": "torchlint.engine.linter", "lint_source": "torchlint.engine.linter", "options_of": "torchlint.engine.linter"}


def __getattr__(name: str) -> Any:
    if name in _HEAVY:
        import importlib

        return getattr(importlib.import_module(_HEAVY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LintResult", "Linter", "MissingPathError", "lint_paths", "lint_source", "settle_steps"]
