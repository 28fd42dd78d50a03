"""Overhead of `torchlint profile` against the plain run and the profilers it combines.

Not a test: prints wall times and ratios to the plain run, measured side by
side in one invocation (the modes are interleaved, repeat after repeat, and
the median of each is reported), for a fixture training script:

    python benchmarks/profile_overhead.py [--repeats 3] [--steps 40] [--sleep-ms 2]
    python benchmarks/profile_overhead.py --modes plain,child --baseline /path/to/another/checkout --repeats 5
    python benchmarks/profile_overhead.py --script fixtures/scripts/savings/gru_text.py --args "" \
        --baseline /path/to/another/checkout --modes plain,torchlint,baseline

Modes (whole-process wall time and CPU time (user + system, children included: rusage),
interpreter start-up and `import torch` included; ratios to the plain run for both):

    plain              python SCRIPT ARGS
    torchlint profile  python -m torchlint profile --no-browser --out DIR SCRIPT ARGS
                       (the whole command: run, static checks, correlation, reports)
    baseline           `torchlint profile` from another checkout (--baseline DIR): a change's
                       overhead side by side with the version before it
    nowatch            `torchlint profile` with TORCHLINT_COMPILE_WATCH=0: no torch.compile graph
                       breaks or compilations collected (a compiled script's collection cost)
    child              the profiled child alone (torchlint.profiler.bootstrap, as `profile` starts
                       it, imports ahead unprofiled as the test suite runs them): its start-up and
                       collection against the plain run, without the parent's lint and report
    cProfile           python -m cProfile -o FILE SCRIPT ARGS
    torch.profiler     SCRIPT under torch.profiler.profile(CPU, with_stack=True),
                       trace exported at the end

For `torchlint profile` the child's own split is printed too: torch import and
set-up, the script itself, and torchlint's work during the run (trace export).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "scripts" / "mlp_slow_loader.py"

TORCH_PROFILER_WRAPPER = """
import runpy, sys
import torch
from torch.profiler import ProfilerActivity, profile
script, out = sys.argv[1], sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
    runpy.run_path(script, run_name="__main__")
prof.export_chrome_trace(out)
"""


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``cmd`` and the processes it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


CHILD = "import sys; sys.path.insert(0, {root!r}); from torchlint.profiler.bootstrap import main; main()"


def _child(py: str, root: Path, work: Path, name: str, script: str, args: list[str]) -> list[str]:
    """The bootstrap's command line as ``profile`` starts it, into a fresh run directory."""
    run_dir = work / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    return [py, "-c", CHILD.format(root=str(root)), json.dumps({"run_dir": str(run_dir)}), script, *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sleep-ms", type=float, default=2.0)
    parser.add_argument("--script", type=Path, default=SCRIPT)
    parser.add_argument(
        "--threads", type=int, default=1,
        help="OMP_NUM_THREADS for every mode (default 1: spinning intra-op threads make small machines noisy)",
    )
    parser.add_argument("--args", help="the script's arguments, one string (default: --steps N --sleep-ms M)")
    parser.add_argument("--baseline", type=Path, metavar="DIR", help="another torchlint checkout to time beside this one")
    parser.add_argument("--modes", default="plain,torchlint,baseline,cProfile,torch.profiler",  # nowatch: on request
                        help="comma-separated modes to run (default: all)")
    opts = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="torchlint-bench-"))
    script = work / opts.script.name
    shutil.copy(opts.script, script)
    args = opts.args.split() if opts.args is not None else ["--steps", str(opts.steps), "--sleep-ms", str(opts.sleep_ms)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("DISPLAY", None)
    if opts.threads:
        env["OMP_NUM_THREADS"] = str(opts.threads)
    py = sys.executable
    base_env = dict(env)
    if opts.baseline is not None:
        base_env["PYTHONPATH"] = str(opts.baseline.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", "")
    all_modes = {
        "plain": lambda i: [py, script.name, *args],
        "torchlint profile": lambda i: [py, "-m", "torchlint", "profile", "--no-browser", "--out", f"tl-{i}", script.name, *args],
        "baseline": lambda i: [py, "-m", "torchlint", "profile", "--no-browser", "--out", f"base-{i}", script.name, *args],
        "nowatch": lambda i: [py, "-m", "torchlint", "profile", "--no-browser", "--out", f"nowatch-{i}", script.name, *args],
        "child": lambda i: _child(py, ROOT, work, f"child-{i}", script.name, args),
        "baseline child": lambda i: _child(py, opts.baseline.resolve(), work, f"base-child-{i}", script.name, args),
        "cProfile": lambda i: [py, "-m", "cProfile", "-o", f"cprof-{i}.prof", script.name, *args],
        "torch.profiler": lambda i: [py, "-c", TORCH_PROFILER_WRAPPER, script.name, f"trace-{i}.json", *args],
    }
    wanted = {m.strip() for m in opts.modes.split(",")} | {"plain"}
    modes = {m: cmd for m, cmd in all_modes.items() if m.split()[0] in wanted or m in wanted}
    if "child" in wanted and opts.baseline is not None:
        modes["baseline child"] = all_modes["baseline child"]
    else:
        modes.pop("baseline child", None)
    if opts.baseline is None:
        modes.pop("baseline", None)
    nowatch_env = {**env, "TORCHLINT_COMPILE_WATCH": "0"}
    child_env = {**env, "TORCHLINT_PROFILE_IMPORTS": "0"}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    splits: list[dict[str, float]] = []
    print(
        f"{opts.script.name} {' '.join(args)}; {opts.repeats} repeats, modes interleaved; "
        f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}; {os.cpu_count()} CPUs",
        flush=True,
    )
    _time(modes["plain"](-1), work, env)  # warm the file cache once, not counted
    for i in range(opts.repeats):
        for mode, cmd in modes.items():
            mode_env = {"baseline": base_env, "nowatch": nowatch_env, "child": child_env, "baseline child": child_env}.get(mode, env)
            times[mode].append(_time(cmd(i), work, mode_env))
        if "torchlint profile" in modes:
            session = json.loads((work / f"tl-{i}" / "session.json").read_text())
            meta = session["meta"]
            splits.append({"setup": meta["setup_s"], "script": meta["script_wall_s"], "tool": meta["tool_s"]})
        print(f"  repeat {i + 1}: " + ", ".join(f"{m} {times[m][-1][0]:.2f}s ({times[m][-1][1]:.2f}s CPU)" for m in modes), flush=True)

    plain = statistics.median(t[0] for t in times["plain"])
    plain_cpu = statistics.median(t[1] for t in times["plain"])
    print()
    print(f"{'mode':<20}{'median wall':>12}{'ratio':>8}{'median CPU':>12}{'ratio':>8}{'CPU spread':>18}")
    for mode in modes:
        med = statistics.median(t[0] for t in times[mode])
        cpu = statistics.median(t[1] for t in times[mode])
        spread = f"{min(t[1] for t in times[mode]):.2f}-{max(t[1] for t in times[mode]):.2f}s"
        print(f"{mode:<20}{med:>11.2f}s{med / plain:>8.2f}{cpu:>11.2f}s{cpu / plain_cpu:>8.2f}{spread:>18}")
    print()
    if not splits:
        shutil.rmtree(work, ignore_errors=True)
        return
    med = {k: statistics.median(s[k] for s in splits) for k in ("setup", "script", "tool")}
    print(
        "torchlint profile, inside the child: "
        f"torch import + set-up {med['setup']:.2f}s, script {med['script']:.2f}s "
        f"(of which torchlint's trace export {med['tool']:.2f}s)"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
