"""summary.md of the GPU check: the machine, then each step's figures and verdict.

Rendered from ``gpu_check.json``'s content alone, after every step, so a run stopped
at its limit still leaves a readable summary of what it had.
"""

from __future__ import annotations

from typing import Any


def _ms(x: Any, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:+.3f} ms" if signed else f"{x * 1e3:.3f} ms"


def _s(x: Any) -> str:
    return "-" if x is None else (f"{x:.2f} s" if abs(x) >= 1 else f"{x * 1e3:.1f} ms")


def _yes(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "NO")


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.0%}"


def render_summary(results: dict[str, Any]) -> str:
    facts, steps = results.get("facts") or {}, results.get("steps") or {}
    dry = results.get("dry_run")
    lines = [f"# torchlint GPU check{' (dry run: plumbing only, no figure)' if dry else ''}", ""]
    devices = facts.get("devices") or []
    gpu = "; ".join(f"{d['name']} (cc {d['capability']}, {d['memory_gib']} GiB)" for d in devices) or "none"
    lines += [
        f"- GPU: {gpu}; driver {facts.get('driver') or '-'}; nvidia-smi: {facts.get('nvidia_smi') or '-'}",
        f"- torch {facts.get('torch') or '-'} (CUDA {facts.get('torch_cuda') or '-'}, cuDNN {facts.get('cudnn') or '-'}), "
        f"Python {facts.get('python') or '-'}, {facts.get('cpus') or '-'} CPUs",
        f"- torchlint: {facts.get('commit') or '-'} (sources {facts.get('sources') or '-'})",
        f"- started {results.get('started')}, "
        + (f"finished {results['finished']} after {results.get('elapsed_s', 0):.0f} s" if results.get("finished")
           else "still running (or stopped before its end: the steps below are what it had)"),
        "",
        "| step | verdict | time | what |",
        "| --- | --- | --- | --- |",
    ]
    for name, step in steps.items():
        wall = step.get("wall_s")
        lines.append(f"| {name} | {step.get('verdict')} | {'-' if wall is None else f'{wall:.0f} s'} | "
                     f"{_cell(step.get('why') or '')} |")
    lines.append("")
    for name, render in (("pytest", _pytest), ("profile", _profile), ("micro", _micro), ("savings", _savings)):
        if name in steps:
            lines += render(steps[name], dry)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def _pytest(step: dict[str, Any], dry: bool) -> list[str]:
    out = ["## 1. pytest -m gpu", ""]
    if dry:
        out += [f"- collected: {len(step.get('collected') or [])} gpu-marked tests", ""]
        return out
    out.append(f"- {step.get('why')}; counts {step.get('counts')}")
    out += [f"- {line}" for line in step.get("failed") or []]
    return out + [""]


def _profile(step: dict[str, Any], dry: bool) -> list[str]:
    out = ["## 2. torchlint profile on the GPU fixtures", ""]
    runs = step.get("runs") or {}
    if dry:
        out += [f"- `{r.get('command')}`" for r in runs.values()]
        return out + [""]
    out += ["| run | verdict | steps | median step | GPU idle | syncs/step (window) | profile / plain |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in runs.items():
        ovh, syncs = r.get("overhead"), r.get("window_syncs_per_step")
        out.append(f"| {name} | {r.get('verdict')} {_cell(r.get('why') or '')} | {r.get('steps', '-')} | "
                   f"{_ms(r.get('step_median_s'))} | {_pct(r.get('gpu_idle_share'))} | "
                   f"{'-' if syncs is None else f'{syncs:.1f}'} | {'-' if ovh is None else f'{ovh:.2f}x (one pair)'} |")
    out.append("")
    for name, r in runs.items():
        if not r.get("ranked") and not r.get("unranked"):
            continue
        out += [f"### {name}: ranked findings", "",
                "| rank | finding | reads / step | observed | expected / step | measured / step [95% CI] | model |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for f in [*(r.get("ranked") or []), *(r.get("unranked") or [])]:
            m = f.get("measured") or {}
            meas = "-"
            if m:
                meas = (f"{m.get('verdict')} {_ms(m.get('per_step'), True)} [{_ms(m.get('ci_low'), True)}, "
                        f"{_ms(m.get('ci_high'), True)}]" if m.get("verdict") != "skipped" else f"skipped: {m.get('why')}")
            exp = f.get("not_applicable") or _ms(f.get("expected_per_step"))
            reads = f.get("reads_per_step")
            out.append(f"| {f.get('rank') or '-'} | {f.get('code')}:{f.get('line')} | {'-' if reads is None else f'{reads:g}'} | "
                       f"{_s(f.get('observed_s'))} | {_cell(exp)} | "
                       f"{_cell(meas)} | {_cell(f.get('expected_model') or '')} |")
        gaps = r.get("sync_gaps") or []
        if gaps:
            out += ["", "Sync gaps in the window (the GPU idle after each sync's return):", ""]
            out += [f"- {g.get('path')}:{g.get('line')} {g.get('call')}: {g.get('syncs')} syncs, waited "
                    f"{_ms(g.get('wait_s'))}, gap {_ms(g.get('gap_s'))}, saving bound {_ms(g.get('saving_s'))} (window)"
                    for g in gaps]
        if r.get("runtime_skipped"):
            out += ["", "Runtime patterns not shown: " + "; ".join(f"{x['code']}: {x['reason']}" for x in r["runtime_skipped"])]
        out.append("")
    return out


def _micro(step: dict[str, Any], dry: bool) -> list[str]:
    out = ["## 3. Paired A/B micro-benchmarks (one process, blocks alternated, Hodges-Lehmann shift, exact 95% CI)", ""]
    if dry:
        return out + [f"- ran at tiny sizes on the CPU: {', '.join(step.get('benchmarks') or [])}", ""]
    out += ["| rule | anti-pattern | fix | anti-pattern / step | fix / step | saving / step [95% CI] | saving | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in step.get("results") or []:
        for f in r.get("fixes") or []:
            ci = f"{_ms(f.get('saving_s'), True)} [{_ms(f.get('ci_low'), True)}, {_ms(f.get('ci_high'), True)}]"
            out.append(f"| {r['key']} | {_cell(r['anti_pattern'])} | {_cell(f['arm'])} | {_ms(r['anti_s'])} | "
                       f"{_ms(f.get('fix_s'))} | {ci} | {_pct(f.get('share'))} | {f.get('verdict', '-')} |")
    for key, err in (step.get("errors") or {}).items():
        out.append(f"- {key}: ERROR {_cell(err.splitlines()[0] if err else '')}")
    if step.get("not_run"):
        out.append(f"- not run (time): {', '.join(step['not_run'])}")
    return out + [""]


def _agreement(agree: Any) -> str:
    return "truth too coarse" if agree == "coarse" else _yes(agree)


def _savings(step: dict[str, Any], dry: bool) -> list[str]:
    out = ["## 4. Savings on CUDA: --experiment against the A/B truth (warm forks, whole runs)", ""]
    rows = step.get("rows") or []
    if dry:
        out += [f"- {r['fix']}: {r['code']} on lines {r['lines']} (static finding: {r['static']})" for r in rows]
        return out + [""]
    out += ["| script | fix | rank | expected (run) | measured (run) [95% CI] | truth (run) [95% CI] | same verdict | within 30 % |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t = r.get("truth") or {}
        truth = (f"{_s(t.get('true'))} [{_s(t.get('low'))}, {_s(t.get('high'))}] {t.get('verdict')}" if t else "-")
        ci = r.get("measured_ci") or (None, None)
        meas = (f"{_s(r.get('measured'))} [{_s(ci[0])}, {_s(ci[1])}] {r.get('measured_verdict')}"
                if r.get("measured") is not None else
                " ".join(x for x in (str(r.get("measured_verdict") or "-"), str(r.get("why") or "")[:120]) if x))
        out.append(f"| {r['script']} | {r['fix']} | {r.get('rank') or '-'} | {_s(r.get('expected'))} | {_cell(meas)} | "
                   f"{truth} | {_agreement(r.get('agree'))} | {_yes(r.get('within'))} |")
    for name, note in (step.get("notes") or {}).items():
        out.append(f"- {name}: {note}")
    return out + [""]
