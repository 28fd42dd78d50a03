"""Whether to colour the report: ``--color``, then ``NO_COLOR`` and ``FORCE_COLOR``, then the terminal."""

from __future__ import annotations

import os
from collections.abc import Mapping


def use_color(choice: str, isatty: bool, environ: Mapping[str, str] | None = None) -> bool:
    """``always``/``never`` decide; with ``auto`` a non-empty NO_COLOR turns colour off, a
    non-empty FORCE_COLOR turns it on, and otherwise only a terminal gets it (no-color.org)."""
    if choice != "auto":
        return choice == "always"
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return isatty
