"""Report paths as CI services want them: relative to the project root, with ``/``."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import quote


def relative(path: str, root: Path) -> str:
    """``path`` (as findings name it: relative to the cwd, or absolute) relative to ``root``,
    or absolute when it lies outside."""
    absolute = Path(path) if Path(path).is_absolute() else Path.cwd() / path
    try:
        return absolute.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return absolute.resolve().as_posix()


def uri(path: str, root: Path) -> str:
    """A URI reference: relative (to the checkout root) when possible, else ``file://``."""
    rel = relative(path, root)
    if PurePosixPath(rel).is_absolute():
        return Path(rel).as_uri()
    return quote(rel)
