"""Where a cold `torchlint check` spends its CPU, by sampling the running stack.

    python benchmarks/engine_sample.py [PATH ...] [--interval 0.002] [--top 60]

One core, in one process: the same check as `engine_stages.py` (no cache, every default
rule, the project join), while a thread reads the main thread's stack every ``interval``
seconds. Each function's share of the samples is its share of the check's time, whatever
the number of calls it makes: cProfile charges its own cost to every call, and
`engine_stages.py`'s timers a few microseconds per call, so both overstate the analyses
made of many small calls (on /tmp/rv, the places analysis was 0.55x the parse in the stage
table and under cProfile; removing most of its repeated work saved about 1 % of the check
measured by `interleaved_ab.py`). Use this to choose what to speed up, `engine_stages.py`
for the budget per stage, `interleaved_ab.py` to measure a change.

Prints three tables: inclusive (the share of samples with the function on the stack),
by torchlint module (each sample charged to the innermost torchlint frame, so libcst's
parse and code generation count for the module that asked), and exclusive (the frame on
top).
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

from torchlint.config import Resolver
from torchlint.engine.lint import lint_paths


def sample(paths: list[Path], interval: float) -> tuple[int, collections.Counter, collections.Counter, collections.Counter]:  # type: ignore[type-arg]
    sys.setswitchinterval(min(interval / 2, 0.005))  # the sampler gets the interpreter that often
    main = threading.get_ident()
    inclusive: collections.Counter = collections.Counter()  # type: ignore[type-arg]
    exclusive: collections.Counter = collections.Counter()  # type: ignore[type-arg]
    modules: collections.Counter = collections.Counter()  # type: ignore[type-arg]
    taken = 0
    done = threading.Event()

    def sampler() -> None:
        nonlocal taken
        while not done.wait(interval):
            frame = sys._current_frames().get(main)
            if frame is None:
                continue
            taken += 1
            seen: set[str] = set()
            owner = None
            top = True
            while frame is not None:
                code = frame.f_code
                key = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
                if top:
                    exclusive[key] += 1
                    top = False
                if key not in seen:
                    inclusive[key] += 1
                    seen.add(key)
                if owner is None and "/torchlint/" in code.co_filename:
                    owner = code.co_filename.rsplit("/torchlint/", 1)[-1]
                    modules[owner] += 1
                frame = frame.f_back

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        lint_paths(paths, Resolver(), jobs=1, cache=None, project=True)
    finally:
        done.set()
        thread.join()
    return taken, inclusive, modules, exclusive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--interval", type=float, default=0.002)
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    paths = args.paths or [Path(__import__("importlib").util.find_spec("torch").origin).parent / "nn"]
    lint_paths(paths[:1], Resolver(), jobs=1, cache=None, project=True)  # imports and first-use caches out of the way
    start = time.process_time()
    taken, inclusive, modules, exclusive = sample(paths, args.interval)
    print(f"{taken} samples over {time.process_time() - start:.1f} s of CPU")
    for title, counts in (("inclusive", inclusive), ("by torchlint module", modules), ("exclusive", exclusive)):
        print(f"\n== {title}")
        for key, count in counts.most_common(args.top):
            print(f"{count / max(taken, 1):7.1%}  {key}")


if __name__ == "__main__":
    main()
