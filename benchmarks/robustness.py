"""`check` over big real trees: the installed torch package and the standard library.

    python benchmarks/robustness.py [PATH ...] [--select ALL] [--show 10]
    python benchmarks/robustness.py --classes     (every class of hostile input: input_classes.py)

Default paths: the installed torch package and the standard library. For each tree
it prints the files checked, findings, TL000 count (files Python itself rejects: the
standard library ships a few on purpose, as test data), internal errors, and wall
time. The goal is zero internal errors: one bad file must never stop the run.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

from torchlint.config import Config, from_table
from torchlint.engine import lint_paths


def default_paths() -> list[Path]:
    paths = [Path(os.path.dirname(os.__file__))]  # the standard library
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            paths.insert(0, Path(spec.origin).parent)
    except (ImportError, ValueError):
        pass
    return paths


def measure(path: Path, config: Config, show: int) -> dict[str, object]:
    start = time.perf_counter()
    result = lint_paths([path], config)
    wall = time.perf_counter() - start
    tl000 = [f for f in result.findings if f.code == "TL000"]
    return {
        "path": str(path),
        "files": result.files_checked,
        "findings": len(result.findings) - len(tl000),
        "tl000": len(tl000),
        "internal_errors": len(result.errors),
        "wall_s": wall,
        "tl000_examples": [f"{f.location.path}:{f.location.line}: {f.message}" for f in tl000[:show]],
        "error_examples": [f"{e.path}: {e.code}: {e.error}" for e in result.errors[:show]],
        "by_rule": collections.Counter(f.code for f in result.findings).most_common(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--select", help="Rules to run (default: the default rules).")
    parser.add_argument("--show", type=int, default=10, help="How many TL000 and internal errors to list.")
    parser.add_argument("--classes", action="store_true", help="Run the generated input classes instead (input_classes.py).")
    args = parser.parse_args(argv)
    if args.classes:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from input_classes import sweep

        return 1 if sweep() else 0
    table: dict[str, object] = {"respect-gitignore": False, "max-file-size": "1MB"}
    if args.select:
        table["select"] = [args.select]
    config = from_table(table, Path.cwd())
    total_errors = 0
    for path in args.paths or default_paths():
        row = measure(path, config, args.show)
        total_errors += int(row["internal_errors"])  # type: ignore[call-overload]
        print(f"{row['path']}")
        print(f"  files {row['files']}  findings {row['findings']}  TL000 {row['tl000']}  "
              f"internal errors {row['internal_errors']}  wall {row['wall_s']:.1f} s")
        print(f"  by rule: {', '.join(f'{code} {n}' for code, n in row['by_rule'])}")  # type: ignore[union-attr]
        for line in row["tl000_examples"]:  # type: ignore[union-attr]
            print(f"    TL000 {line}")
        for line in row["error_examples"]:  # type: ignore[union-attr]
            print(f"    internal error {line}")
        sys.stdout.flush()
    return 1 if total_errors else 0


if __name__ == "__main__":
    sys.exit(main())
