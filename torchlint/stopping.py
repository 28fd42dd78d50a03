"""How every long-running command ends on a signal: one policy for `check`, `--watch`,
the pool, `profile` and the server.

Ctrl-C (SIGINT), SIGTERM and SIGHUP unwind the main thread as a ``KeyboardInterrupt``
(SIGTERM and SIGHUP as :class:`Stopped`, its subclass), so every cleanup written for
Ctrl-C (kill the workers, end the windows, keep what was written) runs for all three.
Whoever started child processes ends them on the way out; the command then exits with
the shell's convention, 128 + the signal's number (130, 143, 129), without a traceback.
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# SIGHUP (the terminal or ssh session closed) does not exist on Windows.
RAISED = (signal.SIGTERM,) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


class Stopped(KeyboardInterrupt):
    """A stop signal reached torchlint: it unwinds as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signum_of(stop: BaseException) -> int:
    """The signal that raised ``stop`` (a plain ``KeyboardInterrupt`` is Ctrl-C)."""
    return int(getattr(stop, "signum", signal.SIGINT))


def status_of(stop: BaseException) -> int:
    """The exit status a shell gives a process ended by ``stop``'s signal."""
    return 128 + signum_of(stop)


def name_of(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _raise(signum: int, frame: Any) -> None:
    raise Stopped(signum)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (Ctrl-C
    keeps Python's ``KeyboardInterrupt``). A signal that was ignored when torchlint started
    (``nohup`` ignores SIGHUP) stays ignored. Nothing changes outside the main thread,
    where no handler can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    for signum in RAISED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# A pipe or descriptor the stop already closed: what interpreter shutdown may still write to.
_CLOSED = frozenset({errno.EBADF, errno.EPIPE})


def quiet_shutdown() -> None:
    """After a stop, the interpreter's shutdown still runs ``concurrent.futures``' exit hook, which wakes each
    pool's manager thread through a pipe the stop may have closed already (a race CPython 3.11 loses now and
    then: "Exception ignored in: <module 'threading'>", a traceback ending in ``OSError: [Errno 9] Bad file
    descriptor``). Such an error is dropped; any other unraisable error is shown as Python shows it."""
    shown = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if isinstance(error, OSError) and error.errno in _CLOSED:
            return
        shown(unraisable)

    sys.unraisablehook = hook
