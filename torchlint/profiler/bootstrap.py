"""Code run inside the profiled child process.

Started by :mod:`torchlint.profiler.run` as::

    python -c "<import this module and call main()>" OPTIONS_JSON SCRIPT [ARGS...]

It imports torch (when installed) and installs the torch instruments *before*
the script starts, so that torchlint's own set-up is not inside cProfile (the imports
of torch and torch._dynamo are profiled on their own and put in ``profile.prof`` where
the script would have made them: ahead.py); then it runs SCRIPT as ``__main__`` (compiled and executed as ``python SCRIPT`` would) with ``sys.argv`` set to
``[SCRIPT, *ARGS]`` under cProfile and the line sampler, and, however the
script ends (normally, ``sys.exit``, an exception, Ctrl-C, ``--max-steps``),
writes ``profile.prof`` and ``session.json`` into the run directory and exits
with the script's own status.
"""

from __future__ import annotations

import builtins
import cProfile
import datetime as _dt
import importlib.machinery
import importlib.util
import json
import os
import platform
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

from torchlint.profiler.sampler import LineSampler
from torchlint.profiler.session import PROFILE_FILE, SESSION_FILE, ProfileSession
from torchlint.profiler.stopsignals import STOP_SIGNALS, Terminated, after_writing, defer_stop_signals, end_forked_copy, install_stop_signals

_HERE = os.path.dirname(os.path.abspath(__file__))


class _NoTorchMaxSteps(BaseException):
    """Placeholder so ``except`` clauses work when torch is not installed."""


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _script_traceback(exc: BaseException) -> str:
    """The traceback as Python would print it, without torchlint's frames."""
    tb = exc.__traceback__
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not (filename.startswith(_HERE) or filename.startswith("<frozen")):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _prepare_main(abs_script: str, source_path: str | None = None) -> tuple[types.CodeType, types.ModuleType]:
    """The script compiled and a fresh ``__main__`` module, as ``python SCRIPT`` makes them.

    ``runpy.run_path`` is not used because it rewrites ``sys.argv[0]`` to the
    path it was given; ``python SCRIPT`` keeps the path as typed. ``source_path``:
    compile that file instead (an experiment's private copy of the script).
    """
    source_path = source_path or abs_script
    with open(source_path, "rb") as f:
        source = f.read()
    code = compile(source, source_path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__file__ = abs_script
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", abs_script)
    module.__spec__ = None
    module.__package__ = None
    module.__cached__ = None  # type: ignore[attr-defined]
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    return code, module


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    owner = os.getpid()  # only this process writes the run files; a fork of it never does
    options: dict[str, Any] = json.loads(argv[0])
    script, script_args = argv[1], argv[2:]
    run_dir = Path(options["run_dir"])
    rank_child = _rank_child(options, script, script_args)  # None outside torchrun
    if rank_child is not None:
        run_dir = rank_child.run_dir
    abs_script = os.path.abspath(script)
    started_at = _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")
    cwd = os.getcwd()  # the script may chdir; paths are resolved against where it started
    t_process = time.perf_counter()

    t0_ref = [time.perf_counter()]
    torch_run: Any = None
    torch_version = None
    max_steps_exc: type[BaseException] = _NoTorchMaxSteps
    warnings_list: list[str] = []
    if options.get("torch", True) and importlib.util.find_spec("torch") is not None:
        try:
            from torchlint.profiler.ahead import import_torch

            import_torch()  # profiled on its own, for profile.prof (ahead.py)
            from torchlint.profiler import torchprof

            torch_run = torchprof.TorchRun(options, run_dir, t0_ref)
            max_steps_exc = torchprof.MaxStepsReached
            torch_version = torchprof.torch.__version__
            if rank_child is not None:
                rank_child.install()
        except Exception as exc:  # torch broken: still profile with cProfile
            warnings_list.append(f"torch instruments unavailable: {type(exc).__name__}: {exc}")
            torch_run = None
    setup_s = time.perf_counter() - t_process

    recorder = torch_run.rec if torch_run is not None else None

    def in_forked_child() -> None:
        # DataLoader workers and other forks are not profiled: their cost shows up
        # as wait time in this process. Stop cProfile and the probes there.
        sys.setprofile(None)
        if recorder is not None:
            recorder.busy = True
        try:  # a DataLoader worker ends as the script's own would, not by unwinding ours
            for each in STOP_SIGNALS:
                signal.signal(each, signal.SIG_DFL)
        except ValueError:  # forked from a thread other than the main one
            pass

    os.register_at_fork(after_in_child=in_forked_child)
    sampler = LineSampler(recorder, interval=float(options.get("sample_interval", 0.005)))

    sys.argv = [script, *script_args]
    sys.path[0] = os.path.dirname(abs_script)

    profiler = cProfile.Profile()
    status, reason, tb_text, stopped_at = 0, "completed", None, None
    install_stop_signals(options.get("parent_pid"))
    sampler.start()
    t0_ref[0] = t0 = time.perf_counter()
    code, main_module = _prepare_main(abs_script)
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = main_module
    profiler.enable()
    try:
        try:
            exec(code, main_module.__dict__)
        finally:
            profiler.disable()
            # The run is over: a second Ctrl-C must not lose the profile.
            defer_stop_signals()
    except SystemExit as exc:
        status = _exit_code(exc)
        reason = "sys.exit"
    except KeyboardInterrupt as exc:
        status, reason = 130, "interrupted"
        tb_text = _script_traceback(exc)
    except Terminated as exc:
        status, reason = 128 + exc.signum, "terminated" if exc.signum == signal.SIGTERM else "hangup"
        stopped_at = _script_traceback(exc)  # where a hung rank was, not printed
        print(f"torchlint: the script was stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
    except max_steps_exc as exc:
        status, reason = 0, "max-steps"
        print(f"torchlint: stopped after {exc} optimizer steps (--max-steps)", file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - the script's own failure, reported below
        status, reason = 1, "exception"
        tb_text = _script_traceback(exc)
    finally:
        if os.getpid() != owner:  # a process the script forked, at the script's end
            end_forked_copy(status, tb_text)
        script_wall = time.perf_counter() - t0
        if torch_run is not None:  # what torchlint does next (profile.prof, ...) is not the script's
            torch_run.script_ended()
        sampler.stop()
        if saved_main is not None:
            sys.modules["__main__"] = saved_main

    if tb_text:
        sys.stderr.write(tb_text)
        sys.stderr.flush()
    try:
        sys.stdout.flush()
    except Exception:
        pass

    _write(
        run_dir=run_dir,
        profiler=profiler,
        sampler=sampler,
        torch_run=torch_run,
        meta={
            "argv": [script, *script_args],
            "script": abs_script,
            "cwd": cwd,
            "python": platform.python_version(),
            "executable": sys.executable,
            "torch": torch_version,
            "started_at": started_at,
            "script_wall_s": script_wall,
            "setup_s": setup_s,
            "exit_status": status,
            "stop_reason": reason,
            "traceback": tb_text,
            "max_steps": options.get("max_steps"),
            "warnings": warnings_list,
            "stopped_at": stopped_at,
            "distributed": rank_child.summary() if rank_child is not None else None,
        },
    )
    if rank_child is not None:
        rank_child.finish()
    after_writing(status)
    sys.exit(status)


def _rank_child(options: dict[str, Any], script: str, script_args: list[str]) -> Any:
    """Under ``torchlint profile --nproc-per-node``: this rank's directory and probes
    (a rank left out by ``--ranks`` becomes ``python SCRIPT ARGS`` here)."""
    if not options.get("distributed"):
        return None
    from torchlint.profiler.rankchild import RankChild

    child = RankChild(options)
    if not child.profiled(options):
        child.run_plain(script, script_args)
    child.start()
    return child


def _write(
    *,
    run_dir: Path,
    profiler: cProfile.Profile,
    sampler: LineSampler,
    torch_run: Any,
    meta: dict[str, Any],
) -> None:
    artifacts: dict[str, Any] = {}
    try:
        from torchlint.profiler.ahead import imports_of
        from torchlint.profiler.cprof import write_user_profile

        from torchlint.profiler.tooltime import TOOL

        splice = torch_run.modules.splice() if torch_run is not None else ()
        # without torchlint's own frames, and its work taken out of the functions above it
        write_user_profile(profiler, run_dir / PROFILE_FILE, TOOL.keyed(), splice,
                           script=(str(meta["script"]), str(meta["argv"][0])), ahead=imports_of(str(meta["script"])))
        artifacts["profile"] = PROFILE_FILE
    except Exception as exc:
        meta["warnings"].append(f"could not write {PROFILE_FILE}: {exc}")

    hotspots = sampler.hotspots()
    try:  # the sampler's stacks for speedscope and flame graphs (stacks.py)
        from torchlint import __version__
        from torchlint.profiler import stacks

        name = os.path.basename(str(meta.get("script") or "script"))
        artifacts["samples"] = stacks.write(run_dir, sampler.stacks, cwd=str(meta.get("cwd") or os.getcwd()),
                                            name=name, exporter=f"torchlint@{__version__}")
    except Exception as exc:
        meta["warnings"].append(f"could not write the sampled stacks: {exc}")
    coverage: dict[str, Any] = {
        "cprofile": {
            "span": "script",
            "description": "the whole script, from its first line to its exit",
        },
        "sampler": {
            "span": "script",
            "interval_s": sampler.interval,
            "samples": sampler.samples,
            "sampled_s": sampler.sampled_s,
            "tool_s": sampler.tool_s,
            "moved": sampler.moved,  # late samples charged to the instruction that held the GIL
        },
    }
    steps: dict[str, Any] = {"count": 0}
    dataloader: dict[str, Any] = {}
    torch_window: dict[str, Any] = {}
    meta["device"] = "cpu"
    meta["tool_s"] = 0.0
    if torch_run is not None:
        try:
            t = torch_run.finish()
        except Exception as exc:
            meta["warnings"].append(f"torch instruments failed to finish: {type(exc).__name__}: {exc}")
            t = None
        if t is not None:
            hotspots.extend(t["hotspots"])
            meta["device"] = t["device"]
            meta["cuda"] = t["cuda"]
            meta["cpus"] = t.get("cpus")
            meta["one_time"] = t.get("one_time") or []
            meta["patterns"] = t.get("patterns") or {}
            meta["allocator"] = t.get("allocator") or {}
            meta["compile"] = t.get("compile") or {}
            meta["warnings"].extend(t["warnings"])
            steps = t["steps"]
            torch_window = t["torch_window"]
            coverage["probes"] = {"span": "script", "ops": t["probes"]["ops"], "thread": "main"}
            coverage["torch_profiler"] = t["torch_profiler"]
            coverage["sync_debug"] = t["sync_debug"]
            traces = [c["trace"] for c in t["torch_profiler"]["cycles"] if c.get("trace")]
            if traces:
                artifacts["traces"] = traces
        rec = torch_run.rec
        meta["tool_s"] = rec.tool_s
        script_wall = meta["script_wall_s"]
        last = steps.get("last_step_at_s")
        first = (rec.fetch_first - torch_run.t0_ref[0]) if rec.fetch_first is not None else None
        span = None
        if first is not None:
            end = last if (last is not None and last > first) else script_wall
            # torchlint's work inside the loop (trace export) is not the loop's time
            span = max(end - first - (rec.tool_s - rec.tool_at_first_fetch), 1e-9)
        dataloader = {
            "fetch_s": rec.fetch_s,
            "fetches": rec.fetches,
            "first_fetch_at_s": first,
            "loop_span_s": span,
            "wait_share": min(rec.fetch_s / span, 1.0) if span else None,
            "loaders": rec.loader_options(),
            "fetch_cpu_s": rec.fetch_cpu_s,
        }
    else:
        torch_installed = importlib.util.find_spec("torch") is not None
        reason = "torch instruments disabled" if torch_installed else "torch is not installed"
        coverage["torch_profiler"] = {"enabled": False, "ran": False, "not_run_reason": reason}
    artifacts["session"] = SESSION_FILE
    session = ProfileSession(
        meta=meta,
        coverage=coverage,
        hotspots=hotspots,
        steps=steps,
        dataloader=dataloader,
        torch_window=torch_window,
        artifacts=artifacts,
    )
    session.save(run_dir / SESSION_FILE)
