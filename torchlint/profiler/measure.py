"""The experiment's child: a warm interpreter that runs measurement windows.

Started by :mod:`torchlint.experiment.runner` as::

    python -c "<import this module and call serve()>"

It imports torch (and ``torch._dynamo``, which the first optimizer would import)
once, then reads one JSON request per line on stdin. Each request is one
*window*: the script run as ``__main__`` in a forked copy of this process, with
the request's runtime switches and source overrides applied, stopped after
``max_steps`` optimizer steps. The fork starts from the same warm state every
time, so windows differ only by what the request switched, not by start-up
(an ``import torch`` costs seconds here; a fork costs milliseconds).

A window times optimizer steps with the same hook the profiled run uses
(``register_optimizer_step_post_hook``; with two optimizers, the first one that
steps counts) and nothing else: no cProfile, no probes, no sampler, so the
instruments do not change what is compared. Its result is written as JSON to the
request's ``result`` file; the server answers ``TLX done <id>`` on stdout.

The script's own output goes to the request's ``log`` file. Nothing here touches
the user's files: source variants are private copies served by an import hook.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from torchlint.profiler.bootstrap import _exit_code, _prepare_main

PROTOCOL = "TLX"


class _StopWindow(BaseException):
    """Raised from the step hook after ``max_steps`` steps (a BaseException so that the
    script's ``except Exception`` lets it through)."""


def _install_overrides(overrides: dict[str, str]) -> None:
    """Serve private copies in place of user modules (original path -> copy path)."""
    import importlib.abc
    import importlib.machinery

    class CopyLoader(importlib.machinery.SourceFileLoader):
        def get_data(self, path: str) -> bytes:
            if os.path.abspath(path) in overrides:
                with open(overrides[os.path.abspath(path)], "rb") as f:
                    return f.read()
            return super().get_data(path)

        def path_stats(self, path: str) -> dict[str, Any]:
            raise OSError("no bytecode cache for a private copy")

    class CopyFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.origin is None or os.path.abspath(spec.origin) not in overrides:
                return None
            spec.loader = CopyLoader(name, spec.origin)
            return spec

    sys.meta_path.insert(0, CopyFinder())


def _shuffled_layout() -> list[Any]:
    """Random padding on the heap, kept alive for the window.

    Every window is a fork of one server, so without this each arm would run with
    the same memory layout every time: the original with one, a variant (which
    reads and compiles its copy first) with another. A layout alone moves a
    script's time by a few % here (an A/A experiment of identical copies called a
    +40 ms "saving" on a 0.77 s script), the same in every window of an arm, so no
    number of windows averages it out. Random padding makes the layout differ from
    window to window, as fresh processes do: the bias becomes noise, which the
    alternation and the interval account for."""
    import random

    rng = random.Random(os.urandom(8))
    small = [bytearray(rng.randrange(8, 512)) for _ in range(rng.randrange(16, 4096))]
    return [small, bytearray(rng.randrange(0, 1 << 22))]


def _at_depth(depth: int, run: Any) -> Any:
    """``run()`` below ``depth`` extra frames: a random stack position, like the padding."""
    return run() if depth <= 0 else _at_depth(depth - 1, run)


def _window(req: dict[str, Any]) -> dict[str, Any]:
    """Run one window in this (forked) process; returns what it measured."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from torchlint.profiler import deferred, switches

    sys.dont_write_bytecode = True
    os.chdir(req["cwd"])
    script = req["script"]
    abs_script = os.path.abspath(script)
    overrides = {os.path.abspath(k): v for k, v in (req.get("overrides") or {}).items()}
    applied = switches.apply(req.get("switches") or [])
    _install_overrides(overrides)  # also when empty: the original's imports pay the same finder
    deferred.install()  # the reads a deferred-sync variant calls; in every window, so both arms prepare alike
    threads = req.get("threads")
    if threads:
        torch.set_num_threads(int(threads))

    max_steps = req.get("max_steps")
    stamps: list[float] = []
    primary: list[Any] = []

    def on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not primary:
            primary.append(optimizer)
        elif primary[0] is not optimizer:
            return
        stamps.append(time.perf_counter())
        if max_steps and len(stamps) >= max_steps:
            raise _StopWindow()

    register_optimizer_step_post_hook(on_step)
    sys.argv = [script, *req.get("args", [])]
    sys.path[0] = os.path.dirname(abs_script)
    # the script itself may be a variant: then its private copy runs (compiled once either way)
    code, module = _prepare_main(abs_script, overrides.get(abs_script))
    sys.modules["__main__"] = module
    padding = _shuffled_layout()  # kept alive until the window ends
    depth = len(padding[0]) % 64
    status, reason, error = 0, "completed", None
    t0 = time.perf_counter()
    try:
        _at_depth(depth, lambda: exec(code, module.__dict__))
    except _StopWindow:
        reason = "max-steps"
    except SystemExit as exc:
        status, reason = _exit_code(exc), "sys.exit"
    except BaseException as exc:  # noqa: BLE001 - the script's failure, reported as data
        status, reason = 1, "exception"
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        traceback.print_exc()
    end = time.perf_counter()
    # Free the script's objects now, so that a DataLoader's workers are shut down
    # here rather than left prefetching into the next window's time.
    module.__dict__.clear()
    import gc

    gc.collect()
    return {
        "status": status,
        "reason": reason,
        "error": error,
        "applied": switches.counts(applied),
        "durations_s": [b - a for a, b in zip(stamps, stamps[1:])],
        "steps": len(stamps),
        "head_s": (stamps[0] - t0) if stamps else None,
        "tail_s": (end - stamps[-1]) if stamps else None,
        "wall_s": end - t0,
    }


def _run_forked(req: dict[str, Any]) -> str:
    """Fork, run the window in the child, wait with a deadline; returns the outcome."""
    pid = os.fork()
    if pid == 0:  # the window
        code = 0
        try:
            os.setpgid(0, 0)  # its DataLoader workers are killed with it on a timeout
            fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the server's stdin carries requests, not the script's input
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            result = _window(req)
            sys.stdout.flush()
            sys.stderr.flush()
            with open(req["result"], "w", encoding="utf-8") as f:
                json.dump(result, f)
        except BaseException:  # noqa: BLE001 - never return into the server's loop
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    print(f"{PROTOCOL} started {req['id']} {pid}", flush=True)  # the parent may have to kill it
    deadline = time.monotonic() + float(req.get("timeout_s", 600))
    while True:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "done"
        if time.monotonic() > deadline:
            for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    target()
                except OSError:
                    pass
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.005)


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    importlib.import_module("torch")

    try:
        importlib.import_module("torch._dynamo")  # (the first optimizer would import it in every window)
    except Exception:
        pass
    out = sys.stdout
    print(f"{PROTOCOL} ready", file=out, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if line == "quit":
            break
        req = json.loads(line)
        outcome = _run_forked(req)
        print(f"{PROTOCOL} {outcome} {req['id']}", file=out, flush=True)
