"""Parent side of a multi-process run: torch's own launcher, one profiled child per rank.

``torchlint profile --nproc-per-node N SCRIPT ARGS`` runs
``python -m torch.distributed.run <torchrun options> --no-python python -c <bootstrap>
OPTIONS SCRIPT ARGS``: torchrun starts, rendezvouses and watches the ranks as it always
does, and each rank is the same bootstrap as a single-process profile, which writes
``rank<K>/`` (:mod:`torchlint.profiler.rankchild`). The launcher runs in its own session
so that a timeout, Ctrl-C or SIGTERM is ours to turn into "stop every rank, then report".
No torch here: this is the parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchlint.profiler.rankchild import PID_FILE
from torchlint.profiler.run import _BOOT, _ROOT, RunOptions, rank_dirs

#: torch's launcher (``torch.distributed.run.main``), with its own failure report kept
#: to one line: a rank's traceback is in that rank's profile, not torchrun's.
_LAUNCHER = """\
import sys, signal
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: no orphan launcher
except Exception:
    pass
try:
    from torch.distributed.run import main
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
except ImportError as exc:
    print(f"torchlint: error: --nproc-per-node needs torch.distributed: {exc}", file=sys.stderr)
    sys.exit(2)
try:
    main(sys.argv[1:])
except ChildFailedError as exc:
    rank, failure = exc.get_first_failure()
    print(f"torchlint: torchrun: rank {rank} exited with status {failure.exitcode}", file=sys.stderr)
    sys.exit(1)
except SignalException as exc:
    sys.exit(128 + int(exc.sigval))
except Exception as exc:
    print(f"torchlint: torchrun failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(2)
"""
#: After a stop (timeout, Ctrl-C, SIGTERM): how long the ranks have to write their
#: profiles before their process groups are killed.
STOP_GRACE_S = 20.0
TIMEOUT_STATUS = 124  # as timeout(1)


@dataclass(frozen=True)
class Launch:
    """The torchrun options ``torchlint profile`` passes on, and which ranks are profiled."""

    nproc_per_node: int
    nnodes: str = "1"
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    ranks: tuple[int, ...] | None = None  # None: every rank
    timeout: float | None = None

    def torchrun_args(self) -> list[str]:
        args = ["--nproc-per-node", str(self.nproc_per_node), "--nnodes", self.nnodes]
        named = {
            "--node-rank": self.node_rank,
            "--rdzv-backend": self.rdzv_backend,
            "--rdzv-endpoint": self.rdzv_endpoint,
            "--rdzv-id": self.rdzv_id,
            "--master-addr": self.master_addr,
            "--master-port": self.master_port,
        }
        for flag, value in named.items():
            if value is not None:
                args += [flag, str(value)]
        if self.single_node_default():
            args.append("--standalone")  # a free port: two runs on one machine never collide
        return args

    def single_node_default(self) -> bool:
        """One node and no rendezvous given: torchrun's ``--standalone``."""
        chosen = (self.rdzv_backend, self.rdzv_endpoint, self.master_addr, self.master_port, self.node_rank)
        return self.nnodes in ("1", "1:1") and all(v is None for v in chosen)


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    """``"0,3"`` -> (0, 3); ValueError on anything else."""
    if text is None:
        return None
    try:
        ranks = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        ranks = ()
    if not ranks or min(ranks) < 0:
        raise ValueError(f"--ranks {text!r}: give rank numbers, e.g. 0,3")
    return ranks


def launcher_command(launch: Launch, script: str, args: list[str], options: RunOptions, run_dir: Path) -> list[str]:
    child = options.child_options(run_dir)
    child["distributed"] = True
    child["ranks"] = list(launch.ranks) if launch.ranks is not None else None
    child["parent_pid"] = None  # a rank's parent is torchrun's agent, not us
    boot = [sys.executable, "-c", _BOOT.format(root=_ROOT), json.dumps(child), script, *args]
    return [sys.executable, "-c", _LAUNCHER, *launch.torchrun_args(), "--no-python", *boot]


@dataclass
class LaunchResult:
    status: int  # the launcher's own exit status
    stopped: str | None = None  # "timeout" | "interrupted" | "terminated" | "hangup"
    killed: bool = False  # a rank or the launcher outlived the grace period


class _Stopper:
    """Stops the launcher and every rank: SIGTERM first (each rank writes its profile),
    SIGKILL to the process groups after the grace period or on a third signal."""

    def __init__(self, proc: subprocess.Popen[bytes], run_dir: Path) -> None:
        self.proc, self.run_dir = proc, run_dir
        self.reason: str | None = None
        self.deadline: float | None = None
        self.signals = 0
        self.killed = False

    def stop(self, reason: str) -> None:
        self.signals += 1
        if self.reason is None:
            self.reason = reason
            self.deadline = time.monotonic() + STOP_GRACE_S
        if self.signals >= 3:
            self.kill()
            return
        self._send(signal.SIGTERM)

    def kill(self) -> None:
        self.killed = True
        self._send(signal.SIGKILL)

    def _send(self, sig: int) -> None:
        for pid in [*rank_pids(self.run_dir), self.proc.pid]:
            _signal_group(pid, sig)


def rank_pids(run_dir: Path) -> list[int]:
    """The pids the running ranks left in ``rank*/`` (each rank leads its process group)."""
    pids = []
    for marker in (rank / PID_FILE for rank in rank_dirs(run_dir).values()):
        try:
            pids.append(int(marker.read_text(encoding="utf-8").strip()))
        except (OSError, ValueError):
            continue
    return pids


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group ``pid`` leads (DataLoader workers included), else to ``pid``."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for_ranks(run_dir: Path, stopper: _Stopper) -> None:
    """Until every rank still running has written its profile (it removes its pid file
    then); after a stop, at most until the grace period ends, then they are killed."""
    deadline = stopper.deadline or (time.monotonic() + STOP_GRACE_S)
    while any(_alive(pid) for pid in rank_pids(run_dir)):
        if time.monotonic() >= deadline:
            stopper.kill()
            break
        time.sleep(0.1)


def run_ranks(cmd: list[str], run_dir: Path, timeout: float | None, *, stdout_to_stderr: bool = False) -> LaunchResult:
    """Run the launcher until every rank has ended; a timeout, SIGINT or SIGTERM stops
    them all (they still write their profiles). Returns how it ended."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # each rank's lines reach its log as printed
    out = sys.stderr.fileno() if stdout_to_stderr else None
    proc = subprocess.Popen(cmd, env=env, stdout=out, start_new_session=True)
    stopper = _Stopper(proc, run_dir)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        names = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
        if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # `nohup`: still ignored
            names[signal.SIGHUP] = "hangup"  # a closed terminal stops the ranks as SIGTERM does (status 129)
        previous = {s: signal.signal(s, lambda signum, frame: stopper.stop(names[signum])) for s in names}
    started = time.monotonic()
    try:
        while True:
            try:
                status = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if timeout is not None and stopper.reason is None and now - started >= timeout:
                    stopper.stop("timeout")
                if stopper.deadline is not None and now >= stopper.deadline and not stopper.killed:
                    stopper.kill()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _wait_for_ranks(run_dir, stopper)  # a rank may outlive a launcher that died first
    if stopper.reason is not None:
        _signal_group(proc.pid, signal.SIGKILL)  # nothing of the launcher's outlives the stop
    for marker in (rank / PID_FILE for rank in rank_dirs(run_dir).values()):  # left by a rank that was killed
        marker.unlink(missing_ok=True)
    return LaunchResult(status=128 - status if status < 0 else status, stopped=stopper.reason, killed=stopper.killed)
