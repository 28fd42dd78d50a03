"""Checking many files: in this process or in a pool of worker processes.

Each file is read, checked and reduced to plain data (``results.plain``) wherever it runs,
so a worker sends back findings and a step summary, never a tree, and holds one tree at a
time. Every failure while checking one file becomes an ``InternalError`` naming that file;
the other files are still checked.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from torchlint.config import Config
from torchlint.engine.discover import SourceFile
from torchlint.engine.results import FileResult, InternalError, plain
from torchlint.stopping import stop_signals_raise

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from torchlint.engine.linter import Linter

# Fewer files than this are checked in this process: a pool costs more to start
# (about 0.3 s of imports of libcst and the checks, made once before the workers fork,
# then the workers) than it saves.
MIN_POOL_FILES = 8
# libcst's code generation recurses once or twice per nested node, and a long `a + b + ...`
# chain nests deeply: 500 terms pass Python's default limit of 1,000. This bound keeps
# the C stack (8 MiB) safe while covering chains of about 2,000 terms.
RECURSION_LIMIT = 4_000
_TRACEBACK_FRAMES = 25  # a RecursionError's traceback would be thousands of lines

Progress = Callable[[int], None]


def default_jobs() -> int:
    """The cores this process may run on."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@contextmanager
def deeper_recursion(limit: int = RECURSION_LIMIT) -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


T = TypeVar("T")


def guarded(file: SourceFile, debug: bool, work: Callable[[], T]) -> T | FileResult:
    """``work()``, or a result holding an ``InternalError`` that names ``file`` when
    anything in it raises (parse, analysis, positions, summary: not only a check)."""
    try:
        with deeper_recursion():
            return work()
    except Exception as error:
        if debug:
            raise
        import traceback  # only on this error path: a clean run never loads it

        trace = traceback.format_exc(limit=-_TRACEBACK_FRAMES)
        message = f"{type(error).__name__}: {error}"
        return FileResult(None, errors=[InternalError(file.display, "engine", message, trace)], path=file.path)


def check_file(linter: Linter, file: SourceFile) -> FileResult:
    """Check ``file``; its plain result, whatever happens."""
    with collector_paused():
        return plain(guarded(file, linter.debug, lambda: linter.lint_file(file)))


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while one file is checked, one pass over what it left.

    A file's tree is up to millions of objects that live until the file is done, and
    Python's collector, triggered by allocations, walks them again and again as they
    age through its generations: a fifth of the CPU of a run over torch's sources.
    Reference counting frees almost everything; the one pass afterwards (over the
    objects made since the last one) frees the cycles the analyses make (``FileContext``
    and the analyses it caches point at each other), so memory stays one tree's."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


class Configs:
    """The distinct configurations of a run, and which one each file has (its slot)."""

    def __init__(self, files: list[SourceFile], config_of: Config | Sequence[Config]) -> None:
        per_file = [config_of] * len(files) if isinstance(config_of, Config) else list(config_of)
        self.distinct: list[Config] = []
        index: dict[int, int] = {}  # Configs hold dicts (unhashable): one object per config file
        self.slots: dict[int, int] = {}
        for file, config in zip(files, per_file):
            if id(config) not in index:
                index[id(config)] = len(self.distinct)
                self.distinct.append(config)
            self.slots[id(file)] = index[id(config)]

    def slot(self, file: SourceFile) -> int:
        return self.slots[id(file)]


def check_files(files: list[SourceFile], config: Config | Sequence[Config], *, jobs: int, debug: bool = False, progress: Progress | None = None,
                tails: frozenset[str] | None = None) -> list[FileResult]:
    """Check ``files`` (in their order) with up to ``jobs`` processes; ``config`` is
    theirs, or one per file. ``tails``: the module tails of the project they join in (``Linter``)."""
    if not files:
        return []  # all cached: libcst and the checks are never imported
    configs = Configs(files, config)
    if jobs > 1 and len(files) >= MIN_POOL_FILES and not debug:
        checked = _in_pool(files, configs, jobs, progress, tails)
        if checked is not None:
            return checked
    return _in_process(files, configs, debug, progress, tails)


def _in_process(files: list[SourceFile], config: Config | Configs, debug: bool, progress: Progress | None,
                tails: frozenset[str] | None = None) -> list[FileResult]:
    from torchlint.engine.linter import Linter

    configs = config if isinstance(config, Configs) else Configs(files, config)
    linters = [Linter(c, debug, tails) for c in configs.distinct]
    checked = []
    for file in files:
        checked.append(check_file(linters[configs.slot(file)], file))
        if progress is not None:
            progress(1)
    return checked


# The worker's linters (one per distinct config, made on first use) and their configs,
# given once per process by the pool's initializer.
_worker_configs: tuple[Config, ...] = ()
_worker_tails: frozenset[str] | None = None
_worker_linters: dict[int, Linter] = {}


def _start_worker(configs: tuple[Config, ...], tails: frozenset[str] | None = None) -> None:
    global _worker_configs, _worker_tails
    # Ctrl-C is the parent's to handle: it stops the pool, and no worker prints a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_configs = configs
    _worker_tails = tails
    _worker_linters.clear()
    _end_with_parent(os.getppid())


def _end_with_parent(parent: int) -> None:
    """A worker whose parent is gone (killed: SIGKILL leaves it no time to stop the pool)
    ends too. Each worker holds the task queue's write end, so it would wait on the queue
    forever; a daemon thread notices the new parent within a second."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="torchlint-parent-watch", daemon=True).start()


def _kill_workers(executor: ProcessPoolExecutor) -> None:
    """Stop every worker now (a stopped run has no use for what they are checking), and
    reap them, so none outlives the command."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.kill()
        except (OSError, AttributeError):
            pass
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.join(timeout=1.0)
        except (OSError, AttributeError, AssertionError):
            pass


def _worker_linter(slot: int) -> Linter:
    if slot not in _worker_linters:
        from torchlint.engine.linter import Linter

        _worker_linters[slot] = Linter(_worker_configs[slot], tails=_worker_tails)
    return _worker_linters[slot]


def _check_chunk(files: list[SourceFile], slots: Sequence[int]) -> list[FileResult]:
    return [check_file(_worker_linter(slot), file) for file, slot in zip(files, slots)]


def _chunks(files: list[SourceFile], jobs: int) -> list[list[SourceFile]]:
    """Batches, largest files first (a large file started last would leave the other
    workers idle), small enough to balance the load: about 16 per worker, at most 8 files."""
    size = max(1, min(8, len(files) // (jobs * 16)))
    return [files[i:i + size] for i in range(0, len(files), size)]


def _size(file: SourceFile) -> int:
    try:
        return file.path.stat().st_size
    except OSError:
        return 0


def _in_pool(files: list[SourceFile], config: Config | Configs, jobs: int, progress: Progress | None,
             tails: frozenset[str] | None = None) -> list[FileResult] | None:
    """The files checked by a pool of ``jobs`` processes, in their order; None when no
    pool can start."""
    configs = config if isinstance(config, Configs) else Configs(files, config)
    order = sorted(range(len(files)), key=lambda i: -_size(files[i]))
    checked = _in_pool_ordered([files[i] for i in order], configs, jobs, progress, tails)
    if checked is None:
        return None
    results: dict[int, FileResult] = dict(zip(order, checked))
    return [results[index] for index in range(len(files))]


def _in_pool_ordered(files: list[SourceFile], configs: Configs, jobs: int, progress: Progress | None,
                     tails: frozenset[str] | None = None) -> list[FileResult] | None:
    chunks = _chunks(files, jobs)
    # The handlers come first: a signal between the workers' start and the wait for their
    # results must stop them too. Ctrl-C, SIGTERM and SIGHUP all raise KeyboardInterrupt
    # (torchlint/stopping.py): the workers are killed at once, not left to finish their
    # batches, and the command exits with the signal's status.
    with stop_signals_raise():
        executor = _new_pool(min(jobs, len(chunks)), configs, tails)
        if executor is None:
            return None
        with executor:
            try:
                try:
                    futures = {executor.submit(_check_chunk, chunk, _slots(chunk, configs)): index for index, chunk in enumerate(chunks)}
                except (OSError, RuntimeError):
                    return None
                done = _collect(futures, chunks, progress)
            except KeyboardInterrupt:
                _kill_workers(executor)
                raise
    lost = [file for index, chunk in enumerate(chunks) if index not in done for file in chunk]
    again = _one_by_one(lost, configs, progress, worked=bool(done)) if lost else []
    if again is None:
        return None  # no worker ever finished a file: the pool cannot run here
    retried = iter(again)
    return [result for index, chunk in enumerate(chunks) for result in (done.get(index) or [next(retried) for _ in chunk])]


def _slots(chunk: list[SourceFile], configs: Configs) -> tuple[int, ...]:
    return tuple(configs.slot(file) for file in chunk)


def _new_pool(workers: int, configs: Configs, tails: frozenset[str] | None = None) -> ProcessPoolExecutor | None:
    # Imported here: concurrent.futures brings multiprocessing, logging and sockets, a
    # cold start's tenth, and a run of a few files never starts a pool.
    from concurrent.futures import ProcessPoolExecutor

    _load_for_forked_workers()
    try:
        return ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=(tuple(configs.distinct), tails))
    except (OSError, ValueError, NotImplementedError, ImportError):
        return None  # no processes or semaphores here (a sandbox, a read-only /dev/shm)


def _load_for_forked_workers() -> None:
    """libcst, the analyses and the checks imported here, once, where workers are forked
    (Linux): each worker starts with them instead of importing them itself (about 0.4 s of
    CPU per worker, and memory the workers then share with this process)."""
    import importlib
    import multiprocessing

    if multiprocessing.get_start_method() != "fork":
        return  # a spawned worker imports afresh whatever this process holds
    try:
        from torchlint.checks import all_checks
        importlib.import_module("torchlint.engine.runner")  # (libcst and the analyses)

        all_checks()
    except Exception:  # an import that fails here fails in the worker too, where it names the file
        pass


def _collect(futures: dict[Future[list[FileResult]], int], chunks: list[list[SourceFile]], progress: Progress | None) -> dict[int, list[FileResult]]:
    from concurrent.futures import FIRST_COMPLETED, wait

    done: dict[int, list[FileResult]] = {}
    pending = set(futures)
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            index = futures[future]
            try:
                done[index] = future.result()
            except Exception:  # a worker died (killed, out of memory), which breaks the pool
                continue
            if progress is not None:
                progress(len(chunks[index]))
    return done


def _one_by_one(files: list[SourceFile], configs: Configs, progress: Progress | None, worked: bool) -> list[FileResult] | None:
    """After a worker died: the unfinished files one at a time in a one-worker pool, so a
    file that kills its worker again is known, reported, and a new worker goes on. None
    when the first two files fail and no worker has ever finished one (``worked``)."""
    results: list[FileResult] = []
    executor = None
    with stop_signals_raise():
        for file in files:
            if not worked and len(results) == 2:
                return None
            executor = executor or _new_pool(1, configs)
            try:
                if executor is None:
                    raise OSError("no worker process")
                results.extend(executor.submit(_check_chunk, [file], _slots([file], configs)).result())
                worked = True
            except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: as in the pool
                if executor is not None:
                    _kill_workers(executor)
                raise
            except Exception:
                if executor is not None:
                    executor.shutdown(wait=False, cancel_futures=True)
                executor = None
                results.append(_lost(file))
            if progress is not None:
                progress(1)
    if executor is not None:
        executor.shutdown()
    return results


def _lost(file: SourceFile) -> FileResult:
    message = "the worker process checking this file stopped before it finished (killed, or out of memory)"
    return FileResult(None, errors=[InternalError(file.display, "engine", message, "")], path=file.path)
