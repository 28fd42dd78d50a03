"""The temporary files ``--fix`` writes beside a file, and cleaning those a killed run left."""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".torchlint"  # `.name.<pid>.<random>.torchlint`, beside the file being fixed


def remove_stale_temporaries(directory: Path) -> None:
    """Delete temporary files that a killed run left in ``directory`` (their process is gone)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
            continue
        parts = name[: -len(TEMP_SUFFIX)].rsplit(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or _alive(int(parts[1])):
            continue
        try:
            os.unlink(directory / name)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
