"""Parent side of a profiled run: check the script, make the run directory,
start the child interpreter, pass its output through, and return its status.

The child is the same interpreter (``sys.executable``) running
:mod:`torchlint.profiler.bootstrap`; it isolates the user's ``sys.exit``,
crashes and CUDA context from torchlint, and the parent only reads the files
it leaves in the run directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torchlint.stopping import RAISED, Stopped, name_of

OUTPUT_LOG = "script-output.log"
# The torchlint checkout (or site-packages) directory, so the child can import us
# even when torchlint runs from a source tree that is not installed.
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import sys; sys.path.append({root!r}); "
    "from torchlint.profiler.bootstrap import main; main()"
)


class ScriptError(Exception):
    """The script cannot be profiled (missing, not a file, not Python)."""


@dataclass
class RunOptions:
    wait: int = 1
    warmup: int = 1
    active: int = 5
    repeat: int = 1
    max_steps: int | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    torch_profiler: bool = True
    sample_interval: float = 0.005
    extra: dict[str, Any] = field(default_factory=dict)

    def child_options(self, run_dir: Path) -> dict[str, Any]:
        return {
            "run_dir": str(run_dir),
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat},
            "max_steps": self.max_steps,
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "torch_profiler": self.torch_profiler,
            "sample_interval": self.sample_interval,
            "parent_pid": os.getpid(),  # the child stops itself if this process dies
            **self.extra,
        }


def check_script(script: str) -> Path:
    """The script as a path, or :class:`ScriptError` saying why it cannot run."""
    path = Path(script)
    if not path.exists():
        raise ScriptError(f"{script}: no such file")
    if not path.is_file():
        raise ScriptError(f"{script}: not a file")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{script}: cannot read it: {exc.strerror}") from exc
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            detail = f"line {exc.lineno}: {exc.msg}"
        else:
            detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise ScriptError(f"{script}: not a Python script ({detail})") from exc
    return path


class RunDirError(Exception):
    """``--out`` names a directory this run must not write into."""


CLAIM = ".torchlint-run"  # holds the pid of the run writing into the directory
# Written once, when torchlint makes or claims a run directory, and never removed: only a
# directory holding it may be emptied by --overwrite. A file named like an artifact
# (session.json, profile.prof) proves nothing: a project directory may hold one.
RUN_MARKER = ".torchlint-run-dir"
_MARKER_TEXT = "This directory holds a torchlint profile run. --overwrite empties it of run files only.\n"
# The marker's record of what the last run made, one exact name a line: --overwrite
# deletes those, so `rank0-before-fix/` or an `experiment/` of the user's stays.
_WROTE = "wrote: "
# Every top-level name a run writes (the child, the experiment, the ranks, the reports),
# exactly: a name that merely starts like one (`rank0-before-fix/`) is the user's.
RUN_ARTIFACTS = (
    "session.json", "profile.prof", "report.json", "report.txt", "report.html",
    "experiment.json", "launch.json", "script-output.log", "snakeviz.log",
    "samples.speedscope.json", "samples.collapsed.txt",
    "traces/", "experiment/", "rank<K>/",
)
_RANK_DIR = re.compile(r"rank([0-9]+)")  # rank<K>/, K the rank's number (rankchild.rank_dir_name)
_found_at_claim: dict[Path, set[str]] = {}  # the names a run directory held when this process claimed it


def make_run_dir(script: Path, out: Path | None = None, root: Path | None = None, *, overwrite: bool = False) -> Path:
    """``out`` if given, else ``torchlint-profile/<script>-<time>/`` (unique), claimed for
    this run. A non-empty ``out`` is refused (an earlier run must never be reported as this
    one) unless ``overwrite``, which empties it, if no other run is writing into it."""
    if out is not None:
        out = out.resolve()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create {out}: {exc.strerror or exc}") from exc
        _claim(out, overwrite)
        return out
    base = (root or Path.cwd()) / "torchlint-profile"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{script.stem}-{stamp}"
    candidate = base / name
    n = 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            _claim(candidate, overwrite=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base / f"{name}-{n}"


def rank_dirs(run_dir: Path) -> dict[int, Path]:
    """The ``rank<K>/`` directories of a run directory, by rank: exactly that name, so a
    user's ``rank0-before-fix/`` is never read, signalled from or cleaned as a rank's."""
    found = {}
    for entry in run_dir.glob("rank*"):
        match = _RANK_DIR.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            found[int(match.group(1))] = entry
    return dict(sorted(found.items()))


def is_run_artifact(entry: Path) -> bool:
    """Whether ``entry`` (a top-level entry of a run directory) has the exact name, and
    kind, of one a run writes."""
    is_dir = entry.is_dir() and not entry.is_symlink()
    if is_dir and _RANK_DIR.fullmatch(entry.name):
        return True
    return (entry.name + "/" if is_dir else entry.name) in RUN_ARTIFACTS


def _claim(directory: Path, overwrite: bool) -> None:
    """Create the claim file; RunDirError if another run holds it or (without
    ``overwrite``) if the directory holds anything at all. ``overwrite`` empties only a
    directory torchlint made (its marker), and only of what a run writes."""
    claim = directory / CLAIM
    if claim.exists():
        holder = _claim_holder(claim)
        if holder is not None:
            raise RunDirError(f"{directory} is being written by another torchlint run (pid {holder}); use another --out")
    if any(p.name not in (CLAIM, RUN_MARKER) for p in directory.iterdir()):
        if not overwrite:
            raise RunDirError(f"{directory} is not empty (an earlier run?); pass --overwrite to replace it, or choose another --out")
        if not (directory / RUN_MARKER).is_file():
            raise RunDirError(
                f"{directory} was not made by torchlint (no {RUN_MARKER} in it); "
                "--overwrite empties only run directories: choose another --out"
            )
        _empty(directory)
    _found_at_claim[directory] = {p.name for p in directory.iterdir()}
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if _claim_holder(claim) is not None:
            raise RunDirError(f"{directory} is being written by another torchlint run; use another --out") from None
        os.unlink(claim)  # left by a run that was killed
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as stream:
        stream.write(str(os.getpid()))
    try:
        (directory / RUN_MARKER).write_text(_MARKER_TEXT)
    except OSError as exc:
        raise RunDirError(f"cannot write into {directory}: {exc.strerror or exc}") from exc


def _claim_holder(claim: Path) -> int | None:
    """The pid of the live run holding ``claim``, or None (no claim, or a dead run's)."""
    try:
        pid = int(claim.read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _recorded(directory: Path) -> set[str] | None:
    """The names the marker records as written by the last run; None when it records
    none (a run that was killed before it ended)."""
    try:
        lines = (directory / RUN_MARKER).read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        return None
    names = {line[len(_WROTE):] for line in lines if line.startswith(_WROTE)}
    return names or None


def _empty(directory: Path) -> None:
    """Remove what an earlier run wrote and recorded (every run artifact by its exact name,
    when a killed run recorded nothing); everything else in ``directory`` stays."""
    import shutil

    recorded = _recorded(directory)
    for entry in directory.iterdir():
        if not is_run_artifact(entry) or (recorded is not None and entry.name not in recorded):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def release_run_dir(run_dir: Path) -> None:
    """The run is over: record in the marker what it wrote, and drop its claim (the
    artifacts stay)."""
    claim = run_dir / CLAIM
    if _claim_holder(claim) != os.getpid():
        return
    before = _found_at_claim.pop(run_dir, set())
    try:
        made = sorted(p.name for p in run_dir.iterdir() if p.name not in before and is_run_artifact(p))
        with open(run_dir / RUN_MARKER, "a", encoding="utf-8") as marker:
            marker.writelines(f"{_WROTE}{name}\n" for name in made)
    except OSError:  # unrecorded: the next --overwrite goes by the exact names
        pass
    claim.unlink(missing_ok=True)


def child_command(script: str, args: list[str], options: dict[str, Any]) -> list[str]:
    return [sys.executable, "-c", _BOOT.format(root=_ROOT), json.dumps(options), script, *args]


def _pump(src: IO[bytes], sinks: list[IO[bytes]]) -> None:
    while True:
        chunk = src.read1(65536) if hasattr(src, "read1") else src.read(65536)
        if not chunk:
            break
        for sink in sinks:
            try:
                sink.write(chunk)
                sink.flush()
            except Exception:
                pass


def _forward_stop_signals(proc: subprocess.Popen[bytes]) -> dict[int, Any]:
    """Install the parent's SIGINT and SIGTERM handlers while the child runs; returns the
    handlers they replace.

    The first Ctrl-C from a terminal reaches the child too (same process group): let it
    unwind and write its profile. A second one is forwarded (for a SIGINT sent to us
    alone); a third kills it. SIGTERM may come to us alone (``kill``, a CI runner) or to
    the whole group (``timeout``, ``docker stop``): it is forwarded at once, which the
    child ignores when it already has one; a third one kills it. SIGHUP (the terminal
    closed) is handled as SIGTERM.
    """
    counts = {signal.SIGINT: 0, signal.SIGTERM: 0}
    if hasattr(signal, "SIGHUP"):  # a closed terminal: as SIGTERM, so the profile is written
        counts[signal.SIGHUP] = 0

    def on_signal(signum: int, frame: Any) -> None:
        counts[signum] += 1
        if proc.poll() is not None:
            return
        try:
            if counts[signum] >= 3:
                proc.kill()
            elif signum != signal.SIGINT or counts[signum] >= 2:
                proc.send_signal(signum)
        except ProcessLookupError:
            pass

    return {signum: signal.signal(signum, on_signal) for signum in counts}


class StopRequested(Stopped):
    """Ctrl-C, SIGTERM or SIGHUP reached torchlint after the profiled run (during the
    experiment): it stops what torchlint is doing, and the report is still written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.reason = "interrupted (Ctrl-C)" if signum == signal.SIGINT else f"stopped by {name_of(signum)}"


class StopSignals:
    """Ctrl-C, SIGTERM and SIGHUP while torchlint works on a finished run: the first one
    raises :class:`StopRequested` while ``raising`` (the experiment, whose windows are then
    ended), and is only remembered after :meth:`defer` (the report being written), unless
    it is the third: then the report is given up. ``signum`` is the first one that came;
    the command exits with its status (torchlint/stopping.py)."""

    GIVE_UP = 3

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raising = True
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in (signal.SIGINT, *RAISED):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # `nohup`, a `&` job: still ignored
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.count += 1
        first = self.signum is None
        if first:
            self.signum = signum
        if (first and self.raising) or self.count >= self.GIVE_UP:
            raise StopRequested(self.signum)

    def defer(self) -> None:
        self.raising = False

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def run_child(
    script: str,
    args: list[str],
    run_dir: Path,
    options: RunOptions,
    *,
    stdout_to_stderr: bool = False,
) -> int:
    """Run the script in a child interpreter; returns its exit status.

    With ``stdout_to_stderr`` the script's stdout and stderr both go to our
    stderr and to ``OUTPUT_LOG`` in the run directory, so that our stdout can
    carry nothing but the JSON report. Otherwise the child shares our
    terminal. Ctrl-C reaches the child (same process group); the parent keeps
    waiting so that the child can write its profile (see _forward_stop_signals).
    """
    cmd = child_command(script, args, options.child_options(run_dir))
    env = dict(os.environ)
    if stdout_to_stderr:  # keep the script's prints in order with its warnings
        env.setdefault("PYTHONUNBUFFERED", "1")
    log: IO[bytes] | None = None
    threads: list[threading.Thread] = []
    if stdout_to_stderr:
        log = open(run_dir / OUTPUT_LOG, "wb")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = _bytes_under(sys.stderr)
        sinks = [s for s in (err, log) if s is not None]
        for src in (proc.stdout, proc.stderr):
            t = threading.Thread(target=_pump, args=(src, sinks), daemon=True)
            t.start()
            threads.append(t)
    else:
        proc = subprocess.Popen(cmd, env=env)

    previous = _forward_stop_signals(proc) if threading.current_thread() is threading.main_thread() else {}
    try:
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - handler installed above
                continue
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for t in threads:
            t.join(timeout=5)
        if log is not None:
            log.close()
    if status < 0:  # killed by a signal: report it the way a shell would
        status = 128 - status
    return status


def _bytes_under(stream: Any) -> IO[bytes] | None:
    """The byte stream under ``stream``, also under the CLI's escaping wrapper (its ``raw``):
    the script's own output passes as the script wrote it, as when it runs alone."""
    for candidate in (stream, getattr(stream, "raw", None)):
        buffer = getattr(candidate, "buffer", None)
        if buffer is not None:
            return buffer
    return None
