"""The temporary files ``--fix`` writes beside a file, and cleaning those a killed run left.

A temporary is named ``.NAME.<pid>.<random>.<tag>.torchlint``, where the tag is a hash of
the rest of the name: a file of the user's that merely looks like one (a name is all a
clean-up can see) never carries the right tag, so only files torchlint made are removed,
and only once the run that made them is gone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

TEMP_SUFFIX = ".torchlint"


def _tag(name: str, pid: str, token: str) -> str:
    return hashlib.sha256(f"torchlint-fix\0{name}\0{pid}\0{token}".encode("utf-8", "surrogateescape")).hexdigest()[:16]


def make_temporary(target: Path) -> tuple[int, str]:
    """A new temporary file beside ``target``, opened for writing: ``(fd, path)``."""
    import secrets  # only a fix writes files: every run imports this module (discover), few use this

    pid = str(os.getpid())
    while True:
        token = secrets.token_hex(4)
        path = target.parent / f".{target.name}.{pid}.{token}.{_tag(target.name, pid, token)}{TEMP_SUFFIX}"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), str(path)
        except FileExistsError:
            continue


def made_by_a_dead_run(name: str) -> bool:
    """Whether ``name`` is a temporary torchlint made, for a run that no longer runs."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return False
    parts = name[1: -len(TEMP_SUFFIX)].rsplit(".", 3)
    if len(parts) != 4:
        return False
    target, pid, token, tag = parts
    if not pid.isdigit() or tag != _tag(target, pid, token):
        return False
    return not _alive(int(pid))


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporary files that a killed run left in ``directory``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if made_by_a_dead_run(name):
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
