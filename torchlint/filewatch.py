"""Waiting, at little cost, until a set of files or directories may have changed.

On Linux the kernel says so (inotify, through ctypes: no dependency): a watch on each
directory wakes the waiter when an entry in it is written, created, removed or renamed, and
an idle wait costs nothing. Elsewhere, or when the kernel refuses (inotify's watch limit),
the waiter polls with a pause that doubles while nothing changes (0.5 s to 8 s): stats of
the known names only, never a walk of the tree. Either way a wake-up is only a hint; the
caller decides what changed by comparing stamps (``stamps``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator

Stamps = dict[str, tuple[int, int]]

FIRST_POLL_S = 0.5
LAST_POLL_S = 8.0
# With events, a poll still runs now and then: a change the kernel cannot see (a network
# file system) is noticed in the end.
EVENTS_POLL_S = 30.0
SETTLE_S = 0.05  # an editor's save is several writes: let them land before checking

# inotify(7): what changes a watched directory's entries or their contents.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_ONLYDIR = 0x400, 0x800, 0x01000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
         | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR)
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_IN_Q_OVERFLOW, _IN_ISDIR = 0x4000, 0x40000000
_IN_SELF = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_Q_OVERFLOW  # the folder itself, or events lost: look again
_HEADER = struct.Struct("iIII")


def stamps(names: Iterable[str]) -> Stamps:
    """(size, modification time) of each name; (-1, -1) for one that is not there."""
    found: Stamps = {}
    for name in names:
        try:
            info = os.stat(name)
        except (OSError, ValueError):
            found[name] = (-1, -1)
            continue
        found[name] = (info.st_size, info.st_mtime_ns)
    return found


class _Inotify:
    """An inotify instance watching directories; None from ``open`` where there is none."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self.libc, self.fd = libc, fd

    @classmethod
    def open(cls) -> _Inotify | None:
        if not sys.platform.startswith("linux") or os.environ.get("TORCHLINT_WATCH_POLL"):
            return None  # TORCHLINT_WATCH_POLL: the polling waiter, as on other systems
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return cls(libc, fd) if fd >= 0 else None

    def add(self, directory: str) -> bool:
        """Watch ``directory``; False when the kernel refuses (its watch limit)."""
        if self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _MASK) >= 0:
            return True
        # A directory removed meanwhile is the caller's stamps' business, not a failure.
        return ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR)

    def wait(self, timeout: float, wanted: Callable[[str], bool]) -> bool:
        """Whether an event about a ``wanted`` name (or a folder) came within ``timeout``
        seconds; the others (a log file a training run appends to) are read and dropped."""
        deadline = time.monotonic() + timeout
        while True:
            readable, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
            if not readable:
                return False
            time.sleep(SETTLE_S)
            if any(_IN_ISDIR & mask or _IN_SELF & mask or wanted(name) for mask, name in self._events()):
                return True

    def _events(self) -> Iterator[tuple[int, str]]:
        """(mask, name) of each queued event (struct inotify_event: wd, mask, cookie, len, name)."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            offset = 0
            while offset + _HEADER.size <= len(data):
                _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size:offset + _HEADER.size + length]
                offset += _HEADER.size + length
                yield mask, os.fsdecode(raw.rstrip(b"\0"))

    def close(self) -> None:
        os.close(self.fd)


def wait_for_change(directories: Callable[[], Iterable[str]], changed: Callable[[], bool], wanted: Callable[[str], bool]) -> None:
    """Return once ``changed()`` says so; it is asked after each event in ``directories()``
    about a ``wanted`` file name or a folder (or after each poll where there are no
    events), and once at the start, so a change made before the watch began is not missed.
    ``directories()`` is asked again after each ``changed()``: a new folder is watched."""
    events = _Inotify.open()
    watched: set[str] = set()
    try:
        pause = FIRST_POLL_S
        while not changed():
            if events is not None:
                new = [d for d in directories() if d not in watched]
                if new:
                    if not all(events.add(d) for d in new):
                        events.close()
                        events = None  # over the kernel's watch limit: poll instead
                    watched.update(new)
                    # Ask again before waiting: a file made in a new folder before the folder
                    # was watched, and a folder that asking finds is watched before the wait.
                    continue
                events.wait(EVENTS_POLL_S, wanted)
                continue
            time.sleep(pause)
            pause = min(pause * 2, LAST_POLL_S)
    finally:
        if events is not None:
            events.close()
