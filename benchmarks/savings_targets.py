"""The targets of benchmarks/savings.py, judged and printed: per script its findings beside
the hand fixes' true savings, then how torchlint's figures and ranking meet the targets
(measured within +-30 % of true, no saving-less finding ranked above a real one, Spearman
rank correlation >= 0.9) against each truth, fresh processes and warm forks."""

from __future__ import annotations

import statistics

from torchlint.savings import SAVING


def spearman(xs: list[float], ys: list[float]) -> float | None:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else None


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:+.0f} ms"


def score(row: dict) -> float:
    """torchlint's ranking figure (what rank_key uses): the measured saving where the
    measurement decided the rank, else the expected saving."""
    decided = row.get("ranked_by") == "measured" or (row.get("ranked_by") is None and row.get("measured") is not None)
    if decided and row.get("measured") is not None:
        return row["measured"] if row["measured_verdict"] == SAVING else min(row["measured"], 0.0)
    return row["expected"] if row.get("expected") is not None else float("-inf")


def ranking_rule_violations(report: dict) -> list[str]:
    """The ranking rule of issue 28, checked on a report: a finding expected to save
    nothing never ranks above one expected to save something, and a measurement ranks a
    finding only when it decides (a resolved saving, or an interval that excludes the
    expected saving)."""
    ranked = [f for f in report.get("findings", []) + report.get("runtime_findings", []) if f.get("rank") is not None]
    out = []

    def expected(f: dict) -> float | None:
        e = f.get("expected") or {}
        return None if e.get("not_applicable") or e.get("unit", "s") != "s" else e.get("total")

    for a in ranked:
        for b in ranked:
            if a["rank"] < b["rank"] and expected(a) == 0 and (expected(b) or 0) > 0:
                out.append(f"{a['code']}:{a['line']} (expected 0) ranked above {b['code']}:{b['line']} "
                           f"(expected {ms(expected(b))})")
    for f in ranked:
        m, e = f.get("measured") or {}, expected(f)
        if f.get("ranked_by") == "measured" and m.get("verdict") == "no measurable change" and e and e > 0:
            scale = (m["total"] / m["per_step"]) if m.get("per_step") and m.get("total") is not None else 1.0
            if m.get("ci_low") is not None and m["ci_low"] * scale <= e <= m["ci_high"] * scale:
                out.append(f"{f['code']}:{f['line']} ranked by an inconclusive measurement")
    return out


def print_script(name: str, rows: list[dict], res: dict) -> None:
    print(f"== {name}.py  (plain {res['plain_s']:.2f} s, profile {res['profile_s']:.2f} s = {res['overhead']:.2f}x; "
          f"experiment took {res['experiment_wall_s']:.0f} s incl. the profiled run, spent {res['experiment_spent_s'] or 0:.0f} s)")
    print(f"  {'finding':<12} {'fix':<28} {'observed':>10} {'expected':>10} {'measured':>10} {'verdict':<21} "
          f"{'true (95% CI)':>26} {'true, warm forks (95% CI)':>26} {'rank tl':>7} {'rank true':>9}")
    true_order = sorted(rows, key=lambda r: -r["true"])
    for r in rows:
        ci = f"{ms(r['true'])} [{r['low'] * 1e3:+.0f},{r['high'] * 1e3:+.0f}]"
        fork = f"{ms(r['fork'])} [{r['fork_low'] * 1e3:+.0f},{r['fork_high'] * 1e3:+.0f}]" if "fork" in r else "-"
        print(f"  {r['code'] + ':' + str(r['line']):<12} {r['fix']:<28} {ms(r['observed']):>10} {ms(r['expected']):>10} "
              f"{ms(r['measured']):>10} {str(r['measured_verdict']):<21} {ci:>26} {fork:>26} {str(r['rank'] or '-'):>7} "
              f"{true_order.index(r) + 1:>9}")
    violations = res.get("ranking_rule")
    if violations is not None:
        print("  ranking rule (zero expected never above nonzero; only deciding measurements rank): "
              + ("OK" if not violations else f"{len(violations)} violation(s): " + "; ".join(violations)))
    print()


# the two truths: (figure, interval low, interval high, verdict) keys of a row
TRUTHS = {"fresh processes": ("true", "low", "high", "verdict"),
          "warm forks": ("fork", "fork_low", "fork_high", "fork_verdict")}


def print_targets(rows: list[dict], results: dict) -> None:
    for label, keys in TRUTHS.items():
        judged = [r for r in rows if keys[0] in r]
        if judged:
            _targets_against(judged, results, label, *keys)
    worst = max(results.values(), key=lambda v: v["overhead"]) if results else None
    print("  overhead of torchlint profile vs plain: " + ", ".join(f"{n} {v['overhead']:.2f}x" for n, v in results.items())
          + (f" (worst {worst['overhead']:.2f}x, target <= 1.3x)" if worst else ""))


def _targets_against(rows: list[dict], results: dict, label: str, t: str, lo: str, hi: str, vd: str) -> None:
    print(f"== targets, against the true saving from {label}")
    within = []
    for r in rows:
        if r.get("measured") is None:
            continue
        ok = abs(r["measured"] - r[t]) <= max(0.3 * abs(r[t]), 0.020)
        within.append(ok)
        print(f"  measured vs true  {r['code']}:{r['line']:<4} {r['script']:<15} measured {ms(r['measured'])}, true {ms(r[t])}: "
              f"{'OK' if ok else 'MISS'}")
    print(f"  measured within +-30 % or +-20 ms of true: {sum(within)}/{len(within)}")
    # The true saving is itself a measurement with noise: where its interval holds 0 the
    # +-30 % test compares two noise draws. These say what the data can support.
    measured = [r for r in rows if r.get("measured") is not None]
    inside = [r for r in measured if r[lo] <= r["measured"] <= r[hi]]
    print(f"  measured inside the true saving's 95 % interval: {len(inside)}/{len(measured)}")
    agree = [r for r in measured if r["measured_verdict"] == r[vd]]
    print(f"  same verdict (saving / no measurable change / slower) as the true A/B: {len(agree)}/{len(measured)}")
    inversions = []
    for name in results:
        srows = [r for r in rows if r["script"] == name and r["rank"] is not None]
        for a in srows:
            for b in srows:
                if a["rank"] < b["rank"] and a[vd] != SAVING and b[vd] == SAVING:
                    inversions.append(f"{name}: {a['code']}:{a['line']} (true {ms(a[t])}) ranked above "
                                      f"{b['code']}:{b['line']} (true {ms(b[t])})")
    print(f"  findings with no real saving ranked above one with a real saving: {len(inversions)}")
    for line in inversions:
        print(f"    {line}")
    for name in results:
        srows = [r for r in rows if r["script"] == name]
        # torchlint's order is the report's rank (unranked: after every ranked finding)
        rho = spearman([-(r["rank"] or 1e9) for r in srows], [r[t] for r in srows])
        why = "n/a (fewer than 3 fixes)" if len(srows) < 3 else "n/a (no spread)"
        print(f"  Spearman (torchlint's rank order vs true saving), {name}: {why if rho is None else f'{rho:.2f}'}")
    rho = spearman([score(r) for r in rows], [r[t] for r in rows])
    print(f"  Spearman, all {len(rows)} fixes pooled (torchlint's ranking figure: measured saving, else expected): "
          f"{'n/a' if rho is None else f'{rho:.2f}'} (target >= 0.9)")
    settled = [r[t] if r[vd] != "no measurable change" else 0.0 for r in rows]
    rho = spearman([score(r) for r in rows], settled)
    print(f"  Spearman, pooled, unresolved true savings counted as 0 (ties): {'n/a' if rho is None else f'{rho:.2f}'}")
    # Ranks among fixes whose true effects sit inside each other's noise are coin flips;
    # this one asks only whether the effects the A/B can tell from 0 are ranked right.
    resolved = [r for r in rows if r[vd] != "no measurable change"]
    rho = spearman([score(r) for r in resolved], [r[t] for r in resolved])
    print(f"  Spearman, pooled, only the {len(resolved)} fixes whose true saving is resolved: "
          f"{'n/a' if rho is None else f'{rho:.2f}'}")
