"""Does `check` stay linear on pathological files? Each input class at sizes n, 2n, 4n.

    python benchmarks/input_scaling.py [--base 500] [--repeat 3] [--only NAME]

For each class the file is generated at three sizes and checked in this process with the
default rules (best of --repeat, libcst's parse included, as a user pays it). A linear
cost doubles with the size: the ratio t(4n)/t(n) is about 4, a quadratic one about 16
(`--steps 4` goes to 8n: 8 against 64).
The script prints the per-unit time and that ratio side by side with a bare libcst parse
of the same files (the floor, itself linear), and exits 1 when a class grows faster than
the parse by more than 2x (ratio over the floor's ratio above 2).

The classes are the shapes that were quadratic once (hardening round 3): many findings in
one loop (one walk of the loop per finding), many hot loops in one function sharing names
(a walk over every binding per use), many module-level statements (a linear search for the
next statement), and the others that are cheap to keep honest.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable

import libcst as cst

from torchlint.engine import lint_source


def items_in_one_loop(n: int) -> str:
    body = "".join(f"    v{i} = loss.item()\n" for i in range(n))
    return "import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n" + body


def hot_loops_sharing_names(n: int) -> str:
    loop = "    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n        print(loss.item())\n"
    return "import torch\ndef train(model, loader, opt):\n" + loop * n


def module_statements(n: int) -> str:
    return "import torch\n" + "".join(f"x{i} = torch.zeros({i})\nx{i} = x{i}.cuda()\n" for i in range(n))


def plain_loops_in_one_function(n: int) -> str:
    return "import torch\ndef f(x):\n" + "".join("    for i in range(10):\n        x = x + i\n" for _ in range(n))


def long_expression(n: int) -> str:
    return "import torch\ny = " + " + ".join(f"t{i}" for i in range(n)) + "\nz = torch.zeros(3).cuda()\n"


def many_functions_calling_each_other(n: int) -> str:
    defs = "".join(f"def f{i}(x):\n    return f{i + 1}(x).item()\n" for i in range(n))
    return "import torch\n" + defs + f"def f{n}(x):\n    return x\nfor b in loader:\n    loss = f0(b)\n    loss.backward()\n    opt.step()\n"


def loops_with_calls_in_one_function(n: int) -> str:
    """Each call asks whether an early exit before it in its block is rare (guards.py)."""
    loop = "    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
    return "import torch\ndef train(model, loader, opt):\n" + loop + "".join(f"    for i in range(10):\n        v{i} = model(x).sum().item()\n" for i in range(n))


def statements_in_one_loop(n: int) -> str:
    """Many statements in one hot loop's block, each a call the summary places."""
    body = "".join(f"        y{i} = torch.relu(x) + {i}\n" for i in range(n))
    return "import torch\ndef train(model, loader, opt):\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n" + body


def helpers_returning_the_next(n: int) -> str:
    """A value returned through a chain of helpers (depth follows the input: analysis/bounded.py)."""
    defs = "".join(f"def h{i}(d):\n    x = h{i - 1}(d)\n    return x * 2\n" for i in range(1, n))
    return "import torch\ndef h0(d):\n    return torch.zeros(3)\n" + defs + f"for s in loader:\n    y = h{n - 1}('cuda').to('cuda')\n    y.item()\n"


def one_name_rebound(n: int) -> str:
    """``x = x + 1`` N times: each binding's kind reads the name's other bindings."""
    return "import torch\ndef f(d):\n    x = torch.zeros(3)\n" + "    x = x + 1\n" * n + "    for s in loader:\n        x.to(d).item()\n"


def method_chain(n: int) -> str:
    """``a.float().float()...``: one expression nested N deep."""
    return "import torch\na = torch.zeros(3)\nfor s in loader:\n    y = a" + ".float()" * n + "\n    y.item()\n"


CLASSES: dict[str, tuple[Callable[[int], str], float]] = {
    # name: (generator, units per --base: sizes are scaled so each file stays under 1 MB)
    "items-in-one-loop": (items_in_one_loop, 1.0),
    "hot-loops-sharing-names": (hot_loops_sharing_names, 0.5),
    "module-statements": (module_statements, 2.0),
    "plain-loops-in-one-function": (plain_loops_in_one_function, 2.0),
    "long-expression": (long_expression, 0.5),
    "functions-calling-each-other": (many_functions_calling_each_other, 1.0),
    "loops-with-calls-in-one-function": (loops_with_calls_in_one_function, 1.0),
    "statements-in-one-loop": (statements_in_one_loop, 1.0),
    "helpers-returning-the-next": (helpers_returning_the_next, 0.5),
    "one-name-rebound": (one_name_rebound, 1.0),
    "method-chain": (method_chain, 0.5),
}


def best_of(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=int, default=500, help="The smallest size n (units of each class).")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="Classes by name, comma-separated.")
    parser.add_argument("--steps", type=int, default=3, help="Sizes n, 2n, ... 2^(steps-1)n (4: up to 8n).")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    last = 2 ** (args.steps - 1)
    print(f"{'class':<34} {'n':>6} {'check s':>9} {'parse s':>9} {'check/unit':>12}   t({last}n)/t(n): check  parse  verdict")
    failed = 0
    for name, (generate, scale) in CLASSES.items():
        if args.only and name not in args.only.split(","):
            continue
        n = max(1, int(args.base * scale))
        checks, parses = [], []
        for size in (n * 2**step for step in range(args.steps)):
            text = generate(size)
            checks.append(best_of(lambda: lint_source(text, "bench.py"), args.repeat))
            parses.append(best_of(lambda: cst.parse_module(text), args.repeat))
            print(f"{name:<34} {size:>6} {checks[-1]:>9.3f} {parses[-1]:>9.3f} {checks[-1] / size * 1e3:>10.3f}ms")
        check_ratio, parse_ratio = checks[-1] / checks[0], parses[-1] / parses[0]
        linear = check_ratio / parse_ratio <= 2.0
        failed += not linear
        print(f"{'':<34} {'':>6} {'':>9} {'':>9} {'':>12}   {check_ratio:>16.1f}  {parse_ratio:>5.1f}  "
              f"{'linear' if linear else 'GROWS FASTER THAN THE PARSE'}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
