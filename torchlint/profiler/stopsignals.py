"""How the profiled child stops (a part of :mod:`.bootstrap`): SIGTERM and SIGHUP unwind the
script as Ctrl-C does, so that what was collected is written; a stop signal while the run files
are written waits until they are on disk; a process the script forked that ran on to the
script's end exits as under plain ``python``. Standard library only: the bootstrap installs
these before torch is imported."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any


class Terminated(BaseException):
    """SIGTERM or SIGHUP reached the script (CI cancel, ``timeout``, ``docker stop``, a
    closed terminal): it unwinds as for Ctrl-C, so that what was collected is written."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


# SIGHUP is SIGTERM's twin here: a closed terminal or ssh session must not lose the profile.
STOP_SIGNALS = (signal.SIGTERM,) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


def _on_stop_signal(signum: int, frame: Any) -> None:
    for each in STOP_SIGNALS:
        signal.signal(each, signal.SIG_IGN)  # the parent may forward the same signal
    raise Terminated(signum)


_deferred: list[int] = []  # stop signals that came while the profile was being written


def defer_stop_signals() -> None:
    """The run is over: a signal now must not lose the profile being written. It is
    remembered, and acted on once the profile is on disk (``after_writing``)."""
    def remember(signum: int, frame: Any) -> None:
        _deferred.append(signum)

    try:
        signal.signal(signal.SIGINT, remember)
        for each in STOP_SIGNALS:
            signal.signal(each, remember)
    except ValueError:  # not the main thread
        pass


def after_writing(status: int) -> None:
    """The profile is written: a stop signal that came meanwhile ends the process now;
    otherwise the signals act as in plain ``python`` while it waits for the script's
    non-daemon threads (one SIGTERM ends it, Ctrl-C raises KeyboardInterrupt)."""
    if _deferred:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(128 + _deferred[0])
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_DFL)
    except ValueError:  # not the main thread
        pass


def install_stop_signals(parent: int | None) -> None:
    """Ctrl-C raises KeyboardInterrupt in the script even when the parent was started with
    SIGINT ignored (a ``&`` job of a script inherits SIG_IGN); SIGTERM unwinds it too; and
    on Linux the child is sent SIGTERM if the parent dies, so no orphan keeps training."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for each in STOP_SIGNALS:
        signal.signal(each, _on_stop_signal)
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: the parent's own handlers still stop us
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def end_forked_copy(status: int, tb_text: str | None) -> None:
    """End a process the script forked (``os.fork()``) that ran on to the script's end:
    ``sys.exit``, its last line or an exception. It is a copy of the profiled process, so
    it returns into this bootstrap; it must end as under plain ``python``, with its own
    status, and never write the run files or finish torchlint's instruments (the
    profiled process does that; a lock a torchlint thread held at the fork would hang it).
    Its own non-daemon threads are waited for and its open files flushed, as Python's exit
    does; its atexit handlers do not run (as in a forked ``multiprocessing`` process)."""
    if tb_text:
        sys.stderr.write(tb_text)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    _flush_open_files()
    os._exit(status & 0xFF)


def _flush_open_files() -> None:
    """Flush the process's buffered files (the script's text files before their buffers)."""
    import gc
    import io

    opened = [f for f in gc.get_objects() if isinstance(f, (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom))]
    for stream in sorted(opened, key=lambda f: not isinstance(f, io.TextIOWrapper)):
        try:
            if not stream.closed:
                stream.flush()
        except Exception:  # a broken pipe, a full disk: as at Python's exit, nothing to do
            pass
