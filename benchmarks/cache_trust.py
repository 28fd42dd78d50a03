"""What signing the result cache's entries costs a warm run: two checkouts of the engine
(the signed one here, an unsigned one given with --baseline) each check a copy of the same
corpus cold, then warm ``--repeat`` times, in its own process; the warm runs' median wall
time, and the signature's own share (HMAC-SHA256 over every entry's bytes).

    python benchmarks/cache_trust.py --baseline /work/main [PATH ...] [--sample 300] [--repeat 5]

The corpus is the installed torch package's sources by default, every k-th file with
--sample. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_RUN = """
import json, statistics, sys, time
from pathlib import Path
from torchlint.config import Config
from torchlint.engine import lint_paths
root, cache, repeat = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
lint_paths([root], Config(root=root), cache=cache, jobs=1)
times = []
for _ in range(repeat):
    start = time.perf_counter()
    result = lint_paths([root], Config(root=root), cache=cache, jobs=1)
    times.append(time.perf_counter() - start)
print(json.dumps({"median_s": statistics.median(times), "cached": result.cached, "files": result.files_checked}))
"""


def corpus(paths: list[str], sample: int, into: Path) -> Path:
    if not paths:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        paths = [os.path.dirname(spec.origin)] if spec and spec.origin else []
    files = sorted(p for base in paths for p in Path(base).rglob("*.py"))
    step = max(len(files) // sample, 1) if sample else 1
    for number, file in enumerate(files[::step][: sample or None]):
        shutil.copyfile(file, into / f"f{number:05d}.py")
    return into


def warm(checkout: Path, root: Path, cache: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN, str(root), str(cache), str(repeat)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def signing_cost(cache: Path) -> tuple[int, float]:
    """Bytes of all entries, and the seconds HMAC-SHA256 over them takes here."""
    import hashlib
    import hmac
    import time

    data = [p.read_bytes() for p in (cache / "entries-v1").iterdir()]
    start = time.perf_counter()
    for blob in data:
        hmac.new(b"k" * 32, blob, hashlib.sha256).digest()
    return sum(map(len, data)), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--baseline", required=True, help="a checkout whose cache is not signed")
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as temporary:
        (Path(temporary) / "corpus").mkdir()
        root = corpus(args.paths, args.sample, Path(temporary) / "corpus")
        for name, checkout in (("unsigned", Path(args.baseline)), ("signed", here), ("unsigned again", Path(args.baseline)), ("signed again", here)):
            cache = Path(temporary) / f"cache-{name}"
            figures = warm(checkout, root, cache, args.repeat)
            print(f"{name:>15}: warm run {figures['median_s'] * 1000:8.1f} ms median of {args.repeat} ({figures['cached']:.0f}/{figures['files']:.0f} files from the cache)")
        size, seconds = signing_cost(Path(temporary) / "cache-signed")
        print(f"HMAC-SHA256 over every entry ({size / 1e6:.1f} MB): {seconds * 1000:.1f} ms")


if __name__ == "__main__":
    main()
