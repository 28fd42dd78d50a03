"""The line costs of a torch.profiler window's trace: the bookkeeping tracefile.py's
summaries use to charge each op to the user line around it (linetrace.py's ranges) and
each autograd node's backward to the line (and module) of the forward op that made it.
Pure: no torch.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

LINE_PREFIX = "torchlint line "  # linetrace.py: the user's line an op ran under
MODULE_PREFIX = "torchlint module "  # modules.py: the nn.Module whose forward ran it
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "  # one autograd node's backward
NO_FORWARD = "accumulate"  # the backward of a node no forward op made (a leaf's AccumulateGrad)


def charge_backward(f: Any) -> None:
    """Each autograd node's backward to the line (and module) of the forward op
    that created it: they share the node's sequence number."""
    if f._flow_seq:  # the forward op that made each node, as torch linked them
        for flow, seq in f._flow_seq.items():
            if flow in f._flow_site:
                f._seq_site[seq] = f._flow_site[flow]
    for seq, (cpu, dev) in f._backward.items():
        line, module = f._seq_site.get(seq, (None, None))
        if line is not None:
            cost = f.lines[line]
            cost[1] += cpu
            cost[3] += dev
        else:
            f.backward_unattributed[0] += cpu
            f.backward_unattributed[1] += dev
        if module is not None:
            mod = f.module_backward[module]
            mod[0] += cpu
            mod[1] += dev
    f._backward.clear()
    f._seq_site.clear()
    f._flows, f._flow_site, f._flow_seq = {}, {}, {}


def line_costs(window: Any, top: int = 40) -> dict[str, Any]:
    """What each user line cost in the windows: its forward ops, the backward of the
    autograd nodes its ops created, their device time; the evaluation window's
    forward apart. Totals over the windows (the report divides by their steps)."""
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)
    for f in window.files:
        evaluation = any(f is e for e in window.eval_files)
        for name, (fwd, bwd, fdev, bdev) in f.lines.items():
            row = rows[name]
            if evaluation:
                row[4] += fwd
            else:
                row[0] += fwd
                row[1] += bwd
                row[2] += fdev
                row[3] += bdev
    out = []
    for name, (fwd, bwd, fdev, bdev, ev) in rows.items():
        site = window.labels.get(name)
        if site is None or fwd + bwd + fdev + bdev + ev <= 0:
            continue
        out.append({"path": site[0], "line": int(site[1]), "function": site[2], "forward_s": fwd / 1e6,
                    "backward_s": bwd / 1e6, "device_s": (fdev + bdev) / 1e6,
                    "backward_device_s": bdev / 1e6, "eval_forward_s": ev / 1e6})
    out.sort(key=lambda r: -(r["forward_s"] + r["backward_s"] + r["device_s"] + r["eval_forward_s"]))
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    unattributed = [0.0, 0.0]
    for f in window.files:
        for name, (cpu, dev) in f.module_backward.items():
            modules[name[len(MODULE_PREFIX):]][0] += cpu
            modules[name[len(MODULE_PREFIX):]][1] += dev
        unattributed[0] += f.backward_unattributed[0]
        unattributed[1] += f.backward_unattributed[1]
    train: dict[str, int] = defaultdict(int)  # line range -> in how many of the windows' steps it ran
    evaluation: set[str] = set()
    steps = 0
    for f in window.files:
        if any(f is e for e in window.eval_files):
            evaluation.update(f.seen)
            continue
        steps += len(f.steps)
        for name, where in f.seen.items():
            train[name] += len(where - {""})

    def sites(names: Any) -> list[list[Any]]:
        return sorted([window.labels[n][0], int(window.labels[n][1]), *([names[n]] if isinstance(names, dict) else [])]
                      for n in names if n in window.labels)

    return {
        "lines": out[:top],
        "lines_total": len(out),
        # which lines the training windows ran, and in how many of their steps: what an
        # experiment's step windows (median steps) can see (experiment/runner.py)
        "lines_seen": sites(train),
        "window_steps": steps,
        "eval_lines_seen": sites(evaluation),
        "backward_unattributed_s": unattributed[0] / 1e6,
        "module_backward": {m: {"backward_s": c / 1e6, "backward_device_s": d / 1e6} for m, (c, d) in modules.items()},
    }
