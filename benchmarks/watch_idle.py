"""What an idle `torchlint check --watch` costs: the CPU it uses while nothing changes.

Generates projects of N small files (100 per folder), starts `check --watch -q` on each,
waits for its first run to end ("watching for changes"), then reads the process's
utime + stime from /proc/<pid>/stat over ``--seconds`` and prints the share of one core.

    python benchmarks/watch_idle.py                      # this checkout: file events
    TORCHLINT_WATCH_POLL=1 python benchmarks/watch_idle.py   # this checkout: the polling fallback
    python benchmarks/watch_idle.py --root /path/to/other/checkout   # e.g. the one before

Linux only (/proc). Each figure is one process's own CPU; the machine's load does not
enter it, but a loaded machine makes the first run (not measured) slow.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "import torch\n\n\ndef f{i}(x):\n    return torch.relu(x) + {i}\n"


def make_project(directory: Path, files: int) -> None:
    (directory / "pyproject.toml").write_text("[project]\nname = 'idle'\n")
    for i in range(files):
        folder = directory / "src" / f"pkg{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i % 100:02d}.py").write_text(SOURCE.format(i=i))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def idle_share(project: Path, root: Path, seconds: float) -> float:
    log = project.parent / "watch.log"
    env = dict(os.environ, PYTHONPATH=str(root), TORCHLINT_CACHE_DIR=str(project.parent / "cache"))
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "torchlint", "check", "--watch", "-q", "--output-format", "concise", "."],
                                cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 900
        while "watching for changes" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the watch never became idle: {log.read_text()[-500:]}")
            time.sleep(0.2)
        time.sleep(1.0)  # the first run's pool is gone
        start_cpu, start = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        return (cpu_seconds(proc.pid) - start_cpu) / (time.monotonic() - start)
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the torchlint checkout to measure (default: this one)")
    parser.add_argument("--files", type=int, nargs="+", default=[2_500, 10_000])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    mode = "polling" if os.environ.get("TORCHLINT_WATCH_POLL") else "default"
    for files in args.files:
        with tempfile.TemporaryDirectory(prefix="torchlint-watch-") as tmp:
            project = Path(tmp) / "project"
            project.mkdir()
            make_project(project, files)
            share = idle_share(project, args.root, args.seconds)
            print(f"{files:>6} files  {args.root}  {mode:<8}  idle CPU {share * 100:6.2f} % of a core over {args.seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
