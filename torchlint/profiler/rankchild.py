"""Child side of a profiled torchrun rank (``torchlint profile --nproc-per-node N``).

torchrun starts ``python -c <bootstrap> OPTIONS SCRIPT ARGS`` once per rank (its
``--no-python`` mode) with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` set. Here
each rank takes its own ``rank<K>/`` directory, tees its output into it, and adds
the measurements that only mean something with several ranks: time in the
``torch.distributed`` collectives the script calls, and which samples each
DataLoader gave this rank first (a digest), so the parent can tell ranks that
see the same data (TL602 at run time). A rank left out by ``--ranks`` runs the
script plainly, as torchrun alone would.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

PID_FILE = ".torchlint-rank"  # the rank's pid, so the parent can stop it on a timeout
RANK_OUTPUT_LOG = "script-output.log"
#: The collectives probed (whole run, main thread): the ones a script calls itself.
#: DDP's own gradient all-reduce runs in C++ and is seen in the torch.profiler window.
COLLECTIVES = (
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "gather", "scatter", "barrier", "all_to_all",
    "all_to_all_single", "all_gather_object", "broadcast_object_list", "send", "recv",
)
DIGEST_BATCHES = 4  # batches of each loader's first iteration that are digested


def rank_dir_name(rank: int) -> str:
    return f"rank{rank}"


class RankChild:
    """One rank's identity, its directory and its multi-rank measurements."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.node_rank = int(os.environ.get("GROUP_RANK", "0"))
        self.run_dir = Path(options["run_dir"]) / rank_dir_name(self.rank)
        self.collectives: dict[str, list[float]] = {}  # name -> [calls, seconds]
        self.collective_sites: dict[tuple[str, int], list[float]] = {}  # (path, line) -> [calls, seconds]
        self.loaders: dict[str, dict[str, Any]] = {}  # iteration site -> what it gave us
        self._tee: _Tee | None = None

    def profiled(self, options: dict[str, Any]) -> bool:
        """Whether ``--ranks`` (None: all of them) names this rank."""
        ranks = options.get("ranks")
        return ranks is None or self.rank in ranks

    def run_plain(self, script: str, args: list[str]) -> None:
        """Replace this process with ``python SCRIPT ARGS``, as torchrun alone would run it."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, script, *args])

    def start(self) -> None:
        """Make ``rank<K>/``, note our pid there and tee stdout/stderr into its log."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / PID_FILE).write_text(str(os.getpid()), encoding="utf-8")
        self._tee = _Tee(self.run_dir / RANK_OUTPUT_LOG)

    def install(self) -> None:
        """Probe the collectives and the DataLoader's index stream (torch is imported)."""
        try:
            self._probe_collectives()
            self._probe_loader_indices()
        except Exception as exc:  # a torch without these names: the rank is still profiled
            print(f"torchlint: rank {self.rank}: multi-rank probes unavailable: {exc}", file=sys.stderr)

    def summary(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "node_rank": self.node_rank,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ended_at": time.time(),  # wall clock: which rank failed first
            "collectives": {k: {"calls": int(v[0]), "seconds": v[1]} for k, v in self.collectives.items()},
            "collective_sites": [
                {"path": path, "line": line, "calls": int(v[0]), "seconds": v[1]}
                for (path, line), v in sorted(self.collective_sites.items(), key=lambda kv: -kv[1][1])
            ],
            "loaders": list(self.loaders.values()),
        }

    def finish(self) -> None:
        """Drop the pid file and stop the tee (everything printed so far is in the log)."""
        (self.run_dir / PID_FILE).unlink(missing_ok=True)
        if self._tee is not None:
            self._tee.stop()

    # -- probes ---------------------------------------------------------------

    def _probe_collectives(self) -> None:
        import torch.distributed as dist

        main = threading.main_thread().ident
        for name in COLLECTIVES:
            orig = getattr(dist, name, None)
            if orig is None or getattr(orig, "__torchlint_probe__", False):
                continue
            setattr(dist, name, self._timed(orig, name, main))

    def _timed(self, orig: Any, name: str, main: int | None) -> Any:
        from torchlint.profiler.probes import user_site

        import torch

        totals, sites = self.collectives, self.collective_sites
        compiling = torch.compiler.is_compiling

        @functools.wraps(orig)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if compiling() or threading.get_ident() != main:  # compiling first: dynamo traces through
                return orig(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                site = user_site(sys._getframe(1))
                for row in (totals.setdefault(name, [0, 0.0]), sites.setdefault((site[0], site[1]) if site else ("", 0), [0, 0.0])):
                    row[0] += 1
                    row[1] += dt

        return _as_probe(collective, f"dist.{name}")

    def _probe_loader_indices(self) -> None:
        """Digest the indices of each loader's first batches (its first iteration only)."""
        from torch.utils.data import dataloader as dl

        from torchlint.profiler.probes import user_site

        base = dl._BaseDataLoaderIter  # the same private class the fetch probe wraps
        init, next_index = base.__init__, base._next_index
        loaders = self.loaders

        @functools.wraps(init)
        def __init__(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            init(it, loader, *args, **kwargs)
            site = user_site(sys._getframe(1))
            key = f"{site[0]}:{site[1]}" if site else f"loader {len(loaders) + 1}"
            if key not in loaders:
                loaders[key] = _loader_facts(loader, site)
                it._torchlint_digest = (loaders[key], hashlib.sha1())

        @functools.wraps(next_index)
        def _next_index(it: Any) -> Any:
            index = next_index(it)
            state = getattr(it, "_torchlint_digest", None)
            if state is not None:
                facts, digest = state
                digest.update(repr(index).encode())
                facts["digested_batches"] += 1
                facts["first_batches_digest"] = digest.hexdigest()[:16]
                if facts["digested_batches"] >= DIGEST_BATCHES:
                    it._torchlint_digest = None
            return index

        base.__init__ = _as_probe(__init__, "_BaseDataLoaderIter.__init__")
        base._next_index = _as_probe(_next_index, "_BaseDataLoaderIter._next_index")


def _as_probe(wrapper: Any, op: str) -> Any:
    """Name the wrapper's code as the call probes are named, so that profile.prof shows
    the wrapped function in its place (cprof.user_view), not torchlint's frame."""
    from torchlint.profiler.tooltime import as_probe

    return as_probe(wrapper, op)


def _loader_facts(loader: Any, site: tuple[Any, ...] | None) -> dict[str, Any]:
    """What one rank's loader iterates: its sampler, how many samples per epoch, of how many."""
    sampler = getattr(loader, "sampler", None)
    facts: dict[str, Any] = {
        "path": site[0] if site else None,
        "line": site[1] if site else None,
        "sampler": type(sampler).__name__ if sampler is not None else None,
        "samples_per_epoch": _length(sampler),
        "dataset_len": _length(getattr(loader, "dataset", None)),
        "digested_batches": 0,
        "first_batches_digest": None,
    }
    return facts


def _length(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except Exception:  # an iterable dataset or sampler has no length
        return None


class _Tee:
    """stdout and stderr (the file descriptors) go to where they went and to a log file."""

    def __init__(self, log_path: Path) -> None:
        self.log = open(log_path, "ab", buffering=0)
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.threads: list[threading.Thread] = []
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(target=self._pump, args=(read_end, self.saved[fd]), daemon=True, name="torchlint-tee")
            thread.start()
            self.threads.append(thread)

    def _pump(self, read_end: int, out: int) -> None:
        lock = _LOG_LOCK
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            try:
                os.write(out, chunk)
            except OSError:
                pass
            with lock:
                self.log.write(chunk)
        os.close(read_end)

    def stop(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)  # closes the pipe's last write end: the pump sees EOF
        for thread in self.threads:
            thread.join(timeout=5)
        self.log.close()


_LOG_LOCK = threading.Lock()
