"""The runtime patterns TLR05-TLR08 and TLR17: decisions on what the child recorded (profiler/patterns.py).

Each ``*_findings`` function reads ``session.meta["patterns"]`` and returns the
findings, or the reason this machine cannot show the pattern (``skipped``). Pure:
no torch, no libcst, so the decisions are tested with plain session data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchlint.correlate.model import Correlated, Evidence, _fmt_s
from torchlint.correlate.sites import constructed_at
from torchlint.findings import Finding
from torchlint.profiler.session import ProfileSession

#: TLR05 on the CPU: measured here (torch 2.13, 1 thread, benchmarks in rules/TLR05), foreach
#: took 0.53-0.68x the loop's step() time for 80 tensors of 1k elements (SGD, Adam, AdamW,
#: RMSprop), but 0.6-1.3x for 4 tensors of 4M elements: per-tensor overhead is what it saves.
#: So on the CPU only optimizers whose tensors average at most this many elements are flagged.
FOREACH_CPU_MAX_MEAN_ELEMENTS = 1 << 16
ALIGN = 8
_MAX_SHAPES = 3

Make = Callable[[str, str, str, int, str | None], Finding]


def _patterns(session: ProfileSession) -> dict[str, Any]:
    value = session.meta.get("patterns")
    return value if isinstance(value, dict) else {}


def _evidence(session: ProfileSession, record: dict[str, Any], op: str, kind: str | None, calls: int, seconds: float) -> Evidence:
    return Evidence(
        source="probe",
        path=session.resolve(str(record.get("path") or "")),
        line=int(record.get("line") or 0),
        function=str(record.get("function") or ""),
        op=op,
        kind=kind,
        calls=calls,
        self_s=seconds,
        total_s=seconds,
    )


# --------------------------------------------------------------------------
# TLR05 optimizer-single-tensor
# --------------------------------------------------------------------------


def single_tensor_reason(record: dict[str, Any]) -> str | None:
    """Why this optimizer's for-loop step is not flagged here, or None when it is."""
    if record.get("impl") != "for-loop" or not record.get("has_foreach"):
        return "ran foreach or fused" if record.get("impl") != "for-loop" else "has no foreach implementation"
    tensors = int(record.get("tensors") or 0)
    if tensors < 2:
        return "one parameter tensor: nothing to batch"
    on_gpu = any(str(d) != "cpu" for d in record.get("devices") or ())
    mean = int(record.get("elements") or 0) / tensors
    if not on_gpu and mean > FOREACH_CPU_MAX_MEAN_ELEMENTS:
        return (
            f"CPU parameters of {mean:,.0f} elements on average: foreach saved nothing consistent on the CPU "
            f"at that size (it saves per-tensor overhead; measured 0.6-1.3x of the loop for 4M-element tensors)"
        )
    return None


def optimizer_findings(session: ProfileSession, make: Make) -> tuple[list[Correlated], list[str]]:
    found: list[Correlated] = []
    skipped: list[str] = []
    for record in _patterns(session).get("optimizers") or ():
        reason = single_tensor_reason(record)
        if reason is not None:
            if record.get("impl") == "for-loop" and record.get("has_foreach"):
                skipped.append(f"{record.get('class')}: {reason}")
            continue
        found.append(_optimizer_finding(session, record, make))
    return found, skipped


def _optimizer_finding(session: ProfileSession, record: dict[str, Any], make: Make) -> Correlated:
    cls, tensors = record.get("class"), int(record.get("tensors") or 0)
    steps, step_s = int(record.get("steps") or 0), float(record.get("step_s") or 0.0)
    on_gpu = any(str(d) != "cpu" for d in record.get("devices") or ())
    why = "foreach=False" if record.get("forced") else ("the default for these parameters" if on_gpu else "torch's default for CPU parameters")
    effect = (
        "on the GPU the loop launches a few kernels per tensor; foreach launches a few per group"
        if on_gpu
        else "on a CPU foreach measured 0.53-0.68x of the loop's time for many small tensors (rules/TLR05)"
    )
    msg = (
        f"{cls}.step() ran the per-parameter for-loop ({why}) over {tensors} parameter tensors: "
        f"{_fmt_s(step_s / steps if steps else 0.0)} per step, {_fmt_s(step_s)} over {steps} steps; {effect}"
    )
    hint = ("Drop foreach=False" if record.get("forced") else f"Pass foreach=True to {cls}(...)") + (
        " (or fused=True, where it exists, on CUDA)" if record.get("has_fused") else ""
    )
    path, line = session.resolve(str(record.get("path") or "")), int(record.get("line") or 1)
    finding = make("TLR05", msg, path, line, hint)
    made = constructed_at(path, str(cls), line) if path else None
    if made is not None and made != line:  # the fix goes on the constructor: the card points there, step() is related
        finding = replace(finding, location=replace(finding.location, line=made), related=(finding.location,))
    c = Correlated(
        finding=finding,
        origin="runtime",
        evidence=[_evidence(session, record, f"{cls}.step", "for-loop", steps, step_s)],
        basis="probe",
    )
    c.calls = steps
    c.total_s = c.self_s = c.observed_s = step_s
    c.share = step_s / session.script_s if session.script_s else None
    return c


# --------------------------------------------------------------------------
# TLR07 low-precision-matmul-misaligned, TLR08 fp32-matmul-without-tf32
# --------------------------------------------------------------------------


def misaligned(mnk: list[int]) -> str:
    """``M=100 N=10 K=33`` with the dimensions that are not multiples of 8 marked."""
    return " ".join(f"{n}={d}{'*' if d % ALIGN else ''}" for n, d in zip("MNK", mnk))


def _by_line(records: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    lines: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        lines[(str(r.get("path") or ""), int(r.get("line") or 0))].append(r)
    return lines


def _matmul_finding(session: ProfileSession, code: str, head: str, rs: list[dict[str, Any]], make: Make, hint: str | None = None) -> Correlated:
    rs = sorted(rs, key=lambda r: -int(r.get("calls") or 0))
    calls = sum(int(r.get("calls") or 0) for r in rs)
    seconds = sum(float(r.get("total_s") or 0.0) for r in rs)
    shapes = "; ".join(f"{r['op']} {r['dtype']} {misaligned(r['mnk'])} x{r['calls']}" for r in rs[:_MAX_SHAPES])
    more = f"; {len(rs) - _MAX_SHAPES} more shapes" if len(rs) > _MAX_SHAPES else ""
    c = Correlated(
        finding=make(code, f"{head.format(calls=calls)}: {shapes}{more}", session.resolve(str(rs[0].get("path") or "")), int(rs[0].get("line") or 1), hint),
        origin="runtime",
        evidence=[_evidence(session, r, f"{r['op']} {r['dtype']}", misaligned(r["mnk"]), int(r["calls"]), float(r["total_s"])) for r in rs],
        basis="probe",
    )
    c.calls = calls
    c.total_s = c.self_s = c.observed_s = seconds
    return c


def low_precision_findings(session: ProfileSession, make: Make) -> list[Correlated]:
    """One TLR07 per user line with fp16/bf16 matmuls whose M, N or K is not a multiple of 8."""
    records = [r for r in _patterns(session).get("matmuls") or () if r.get("dtype") in ("float16", "bfloat16")
               and any(int(d) % ALIGN for d in r.get("mnk") or ())]
    on_gpu = any(str(r.get("device")) == "cuda" for r in records)
    where = "" if on_gpu else " (tensor cores: effect only on a GPU; this run was on the CPU)"
    head = "{calls} fp16/bf16 matmuls with a dimension that is not a multiple of 8 (marked *)" + where
    return [_matmul_finding(session, "TLR07", head, rs, make) for rs in _by_line(records).values()]


def tf32_skip_reason(tf32: dict[str, Any]) -> str | None:
    """Why TF32 cannot be judged on this machine, or None when it can."""
    if not tf32.get("cuda"):
        return "no CUDA device: TF32 is a mode of GPU tensor cores"
    if tf32.get("error"):
        return f"the GPU could not be queried ({tf32['error']})"
    if not tf32.get("ampere_or_newer"):
        return f"GPU compute capability {tf32.get('capability')}: TF32 needs Ampere (8.0) or newer"
    return None


def tf32_findings(session: ProfileSession, make: Make) -> tuple[list[Correlated], list[str]]:
    """TLR08: fp32 matmuls on CUDA with TF32 off, on a GPU that has it."""
    pats = _patterns(session)
    tf32 = pats.get("tf32") or {}
    reason = tf32_skip_reason(tf32)
    if reason is not None:
        return [], [reason]
    if tf32.get("allow_tf32") or tf32.get("float32_matmul_precision") in ("high", "medium"):
        return [], []
    records = [r for r in pats.get("matmuls") or () if r.get("dtype") == "float32" and r.get("device") == "cuda"
               and r.get("allow_tf32") is False]
    head = f"{{calls}} fp32 matmuls ran with TF32 off on a GPU of compute capability {tf32.get('capability')}"
    hint = "torch.backends.cuda.matmul.allow_tf32 = True, or torch.set_float32_matmul_precision('high')"
    return [_matmul_finding(session, "TLR08", head, rs, make, hint) for rs in _by_line(records).values()], []


# --------------------------------------------------------------------------
# TLR06 fill-then-move
# --------------------------------------------------------------------------


def fill_move_findings(session: ProfileSession, make: Make) -> tuple[list[Correlated], list[str]]:
    """One TLR06 per creation line whose host tensors were copied to the device."""
    pats = _patterns(session)
    watch = pats.get("fill_watch")
    if watch and watch != "on":
        return [], [str(watch)]
    out = []
    for rs in _by_line(list(pats.get("fill_moves") or ())).values():
        calls = sum(int(r.get("calls") or 0) for r in rs)
        size = sum(int(r.get("bytes") or 0) for r in rs)
        made = ", ".join(sorted({str(r.get("made_by")) for r in rs}))
        msg = (f"{calls} host tensor(s) made here ({made}) were then copied to the device "
               f"({size / 1e6:.2f} MB in all): create them there with device=")
        c = Correlated(
            finding=make("TLR06", msg, session.resolve(str(rs[0].get("path") or "")), int(rs[0].get("line") or 1), None),
            origin="runtime",
            evidence=[_evidence(session, r, str(r.get("made_by")), str(r.get("kind")), int(r.get("calls") or 0), 0.0) for r in rs],
            basis="probe",
        )
        c.calls = calls
        out.append(c)
    return out, []


# --------------------------------------------------------------------------
# TLR17 anomaly-mode-enabled
# --------------------------------------------------------------------------

ANOMALY_HINT = ("Turn anomaly detection off for training runs (remove `set_detect_anomaly(True)` / "
                "`detect_anomaly()`, or put it behind a flag that is off by default)")


def anomaly_findings(session: ProfileSession, make: Make) -> list[Correlated]:
    """TLR17: backward passes run with autograd's anomaly detection on, at the line that
    turned it on (the script's first line when no user line did: an imported library)."""
    record = _patterns(session).get("anomaly") or {}
    on, total = int(record.get("on") or 0), int(record.get("backwards") or 0)
    if on <= 0:
        return []
    sites = sorted(record.get("sites") or (), key=lambda r: -int(r.get("calls") or 0))
    top = sites[0] if sites else {"path": session.meta.get("script") or "", "line": 1, "function": ""}
    times = int(top.get("calls") or 0)
    where = ("turned on outside the user's code" if not sites
             else "turned on at this line" + (f", {times} times" if times > 1 else ""))
    msg = (f"Autograd's anomaly detection was on for {on} of {total} backward passes ({where}): every op "
           f"records the stack of the forward op that made it and checks its output for NaN, measured at "
           f"1.7-2.2x a CPU training step (rules/TL306)")
    c = Correlated(
        finding=make("TLR17", msg, session.resolve(str(top.get("path") or "")), int(top.get("line") or 1), ANOMALY_HINT),
        origin="runtime",
        evidence=[_evidence(session, r, "torch.set_anomaly_enabled", "on", int(r.get("calls") or 0), 0.0) for r in sites],
        basis="probe",
    )
    c.calls = on
    return [c]


def pattern_findings(session: ProfileSession, make: Make) -> tuple[list[Correlated], dict[str, str]]:
    """TLR05-TLR08 and TLR17 findings, and the reason for each pattern this run could not show."""
    if not _patterns(session):
        return [], {}
    optimizers, opt_skipped = optimizer_findings(session, make)
    fills, fill_skipped = fill_move_findings(session, make)
    tf32, tf32_skipped = tf32_findings(session, make)
    skipped = {}
    if opt_skipped and not optimizers:
        skipped["TLR05"] = "; ".join(opt_skipped)
    if fill_skipped:
        skipped["TLR06"] = fill_skipped[0]
    if tf32_skipped:
        skipped["TLR08"] = tf32_skipped[0]
    return [*optimizers, *fills, *low_precision_findings(session, make), *tf32, *anomaly_findings(session, make)], skipped
