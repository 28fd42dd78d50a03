"""Which source files are the user's own code.

A frame belongs to user code unless its file is part of Python itself, an
installed package (site-packages, dist-packages), torch, or torchlint. The
same test decides the *innermost user frame* of a measured call (the place a
cost is charged to) and which modules are linted for correlation.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from functools import lru_cache

_TORCHLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_roots() -> tuple[str, ...]:
    roots: set[str] = {_TORCHLINT_DIR + os.sep}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            p = sysconfig.get_paths().get(name)
        except Exception:  # pragma: no cover - broken sysconfig
            p = None
        if p:
            roots.add(os.path.realpath(p) + os.sep)
            roots.add(os.path.abspath(p) + os.sep)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        lib = os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}")
        roots.add(os.path.abspath(lib) + os.sep)
        roots.add(os.path.realpath(lib) + os.sep)
    return tuple(sorted(roots))


_ROOTS = _library_roots()
_PACKAGE_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True for a real file that is neither Python, an installed package, torch nor torchlint."""
    if not filename or filename.startswith("<"):
        return False
    if any(d in filename for d in _PACKAGE_DIRS):
        return False
    absolute = os.path.abspath(filename)
    if absolute.startswith(_ROOTS):
        return False
    return not os.path.realpath(absolute).startswith(_ROOTS)
