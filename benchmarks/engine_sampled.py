"""Where a cold `torchlint check` spends its CPU, by stage, from samples rather than timers.

    python benchmarks/engine_sampled.py [PATH ...] [--repeat 3] [--interval-ms 1] [--top 25]

`engine_stages.py` wraps every method of the analyses with a timer; on a corpus of research
code that is some 600k timed calls, each costing ~3 us, so its analysis rows are mostly the
timers' own cost (bindings' 1.35 s row on rd20 was some 0.07 s of its own work). This script
changes nothing in the engine: a CPU-time interval timer (SIGPROF) interrupts the check every
``--interval-ms`` and each sample is given to the innermost torchlint frame on the stack, so a
libcst call (its Python visitors, the native parser) counts for the stage that made it. The
check runs cold, one core, in one process (no cache, every default rule, the project join),
alternated with a bare ``libcst.parse_module`` of the same files (the parse floor), as
engine_stages.py does; each stage's seconds are its share of the samples times the check's own
CPU time (measured without the sampler beside it), and "x parse" that over the floor.

Stages: read (engine/source.py), parse (engine/parse.py and the libcst work it calls), walk and
the tree's helpers (analysis/tree.py), one row per other analysis module, checks (checks/), summary
(analysis/light.py, steps.py, summary*.py), join (analysis/join*.py), settle, report (report/,
cli/), engine (the rest of engine/).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_stages as es  # noqa: E402  (the floor, the check and its report, shared)

from torchlint.config import Resolver  # noqa: E402
from torchlint.engine.discover import discover  # noqa: E402

_SUMMARY = ("light.py", "steps.py")


def stage_of(path: str) -> str | None:
    """The stage a torchlint source file's frames count for; None outside torchlint."""
    if "/torchlint/" not in path:
        return None
    module = path.rsplit("/torchlint/", 1)[1]
    folder, _, name = module.rpartition("/")
    if folder == "analysis":
        if name == "tree.py":
            return "walk"
        if name in _SUMMARY or name.startswith("summary"):
            return "summary"
        if name.startswith("join"):
            return "join"
        return "analysis:" + name[:-3]
    if folder == "engine":
        return {"source.py": "read", "parse.py": "parse", "settle.py": "settle", "prefilter.py": "prefilter"}.get(name, "engine")
    if folder.startswith("checks"):
        return "checks"
    if folder.startswith(("report", "cli")):
        return "report"
    return "engine"


class Sampler:
    """CPU seconds per stage and per function, each sample's given to its innermost torchlint frame.

    A sample is weighed by the CPU time since the one before, not counted once: Python runs a
    signal's handler only between bytecodes, so the ticks that expire inside one long native
    call (libcst's parser) arrive as one signal after it returns, into the frame that made it."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.stages: Counter[str] = Counter()
        self.functions: Counter[tuple[str, str]] = Counter()
        self.samples = 0
        self._last = 0.0

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        now = time.process_time()
        weight, self._last = now - self._last, now
        self.samples += 1
        while frame is not None:
            stage = stage_of(frame.f_code.co_filename)
            if stage is not None:
                self.stages[stage] += weight
                self.functions[(frame.f_code.co_filename.rsplit("/torchlint/", 1)[1], frame.f_code.co_name)] += weight
                return
            frame = frame.f_back
        self.stages["outside"] += weight  # (the sampler's own start and stop)

    def __enter__(self) -> Sampler:
        self._last = time.process_time()
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("torchlint")])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=25, help="functions to list by their own samples")
    args = parser.parse_args()
    files = [f.path for f in discover(args.paths, Resolver())]
    es.check([files[0]])  # imports and first-use caches out of the way
    floors, checks = [], []
    sampler = Sampler(args.interval_ms / 1000)
    for _ in range(args.repeat):
        floors.append(es.parse_floor(files))
        checks.append(es.check(args.paths))
        with sampler:
            es.check(args.paths)
    floor, check = min(floors), min(checks)
    total = sum(sampler.stages.values()) or 1
    lines = sum(len(p.read_bytes().splitlines()) for p in files)
    print(f"{len(files)} files, {lines} lines, one core, CPU seconds, {sampler.samples} samples over {args.repeat} sampled checks")
    print(f"parse floor {floor:.3f} s; check {check:.3f} s = {check / floor:.2f}x the parse (fastest of {args.repeat}, unsampled)")
    print(f"target      at most 1.30x the parse (issue 34): the stages past the parse have {0.3 * floor:.3f} s\n")
    print(f"{'stage':28} {'share':>6} {'CPU s':>7} {'x parse':>8}")
    for stage, samples in sampler.stages.most_common():
        share = samples / total
        print(f"{stage:28} {share:6.1%} {share * check:7.3f} {share * check / floor:8.2f}")
    print(f"\nfunctions by their own samples (the innermost torchlint frame), top {args.top}")
    for (module, name), samples in sampler.functions.most_common(args.top):
        print(f"{samples / total:6.1%}  {module}:{name}")


if __name__ == "__main__":
    main()
