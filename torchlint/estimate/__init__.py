"""Expected savings: one documented model per rule. Pure: no torch, no libcst.

The observed time at a finding's lines is what the run spent there; it is not
what fixing the finding saves (an ``.item()`` on a CPU tensor costs only the
call; DataLoader workers overlap fetching with compute only as far as the
cores allow). Each model here turns the session's measurements into an
:class:`~torchlint.savings.Estimate`: an *upper bound* on the saving (TLR09's is an
estimate, marked ``bound=False``: no figure of the run bounds it), with a
one-sentence ``model`` saying how it was computed, or ``not_applicable`` with
the reason it cannot act on this machine. docs/profiling.md ("What a number
is") documents every model.

:func:`analyse` is the runtime chain's join step: correlate (with the
experiment's measurements, if any), estimate, rank with
:func:`torchlint.savings.rank_key`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torchlint.correlate import Correlated, Correlation, correlate, fmt_seconds, loader_at
from torchlint.correlate.allocator import churn_seconds
from torchlint.correlate.compiled import GRAPH_BREAK_STATIC_RULES
from torchlint.correlate.model import SYNC_RULES
from torchlint.estimate.syncs import on_gpu, run_steps as _steps, sync_estimate
from torchlint.findings import Finding
from torchlint.profiler.session import ProfileSession
from torchlint.savings import BYTES, Estimate, Measurement

#: Share of an evaluation forward that autograd's bookkeeping (graph nodes, saved
#: activations) can account for on the CPU. Measured here (torch 2.13, 1 thread,
#: median of 200 forwards): 5-6 % for an MLP, up to 19 % for a GRU; the bound
#: takes the high end.
AUTOGRAD_SHARE = 0.2
#: inference_mode over no_grad: it also skips version counters and view tracking.
INFERENCE_MODE_SHARE = 0.05
#: A ``torch.from_numpy`` call: wraps the array's buffer, no copy (1-2 µs a call).
FROM_NUMPY_S = 2e-6

GPU_ONLY = {
    "TL202": "pinned memory only matters for host-to-device copies on a GPU",
    "TL110": "no GPU: nothing is copied to a device",
    "TL113": "no GPU: nothing is uploaded to a device",
    "TL114": "no GPU: the index and the tensor it indexes are on the host",
    "TL111": "no GPU: nothing is copied to a device",
    "TL402": "effect only on GPU tensor cores",
    "TL403": "cuDNN autotuning only runs on a GPU",
    "TL404": "channels_last pays off with GPU tensor cores",
    "TL501": "mixed precision is timed here only on a GPU (CPU autocast is a different trade-off)",
    "TL601": "DataParallel only matters with several GPUs",
    "TL602": "a DistributedSampler only matters with several processes",
    "TLR06": "no GPU: nothing is copied to a device",
    "TLR07": "effect only on GPU tensor cores",
    "TLR08": "TF32 is a mode of GPU tensor cores",
}
#: Figures of the whole run, not of a finding's lines: TL302 (memory), TLR09 (page faults),
#: TLR14 (a graph break no window saw still says so), TLR15 (compile time).
WHOLE_RUN = frozenset({"TL302", "TLR09", "TLR14", "TLR15"})
#: TLR05 on the CPU: foreach took 0.53-0.68x the for-loop's step() time for many small
#: tensors (rules/TLR05), so at most half of the observed step() time is saved.
FOREACH_CPU_SHARE = 0.5
#: TF32 over fp32 GEMMs, tensor-core peak: 8x on the A100 (156 vs 19.5 TFLOP/s), 7.4x on
#: the H100/H200 (495 vs 67); the larger, so TLR08's figure stays an upper bound.
TF32_SPEEDUP = 8.0
def usable_cores(session: ProfileSession) -> int:
    """Cores the profiled process may run on (its CPU affinity), as the child saw it."""
    n = session.meta.get("cpus")
    if isinstance(n, int) and n > 0:
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _per_step(total: float, session: ProfileSession) -> float | None:
    steps = _steps(session)
    return total / steps if steps else None


def _fetch(c: Correlated) -> tuple[float, int]:
    """Batch fetch time and batches at the finding's loop lines (evidence or context)."""
    evs = [e for e in (*c.evidence, *c.context) if e.op in ("DataLoader.__next__", "DataLoader.__iter__")]
    return sum(e.total_s for e in evs), sum(e.calls for e in evs if e.op == "DataLoader.__next__")


def workers_estimate(c: Correlated, session: ProfileSession, workers: int = 0) -> Estimate:
    """DataLoader workers: fetch time minus what they cannot overlap with the step's compute.

    Without workers a batch takes ``compute + fetch``. ``W`` = 4 workers fetch in
    parallel, but the CPU part of a fetch (the main thread's CPU time while it
    fetched) runs on at most the cores left once training has one, while the
    rest (sleeping, reading files) needs no core: with workers a batch takes
    ``max(compute, fetch_cpu / min(W, spare cores), fetch / W)``; with no spare
    core, ``max(compute + fetch_cpu, fetch / W)``. With workers already there, the
    fetch time measured is the wait they did not hide: more workers can save at
    most that, and nothing when they already use every spare core.
    """
    fetch_s, batches = _fetch(c)
    cores = usable_cores(session)
    spare = cores - 1
    if fetch_s <= 0 or batches <= 0:
        return Estimate(model="workers overlap batch fetching with compute; no fetch time was measured here", total=0.0, per_step=0.0)
    if workers and workers >= spare:
        return Estimate(
            model=f"cannot overlap more: the loader's {workers} worker(s) already use the {max(spare, 0)} core(s) "
            "the training process leaves",
            total=0.0,
            per_step=0.0,
        )
    fetch = fetch_s / batches
    if workers:
        return Estimate(
            model=f"the {fetch_s:.3g} s the loop still waited for its {workers} worker(s) is the most more workers "
            f"(up to {spare}, the spare cores) can hide",
            per_step=fetch,
            total=fetch_s,
        )
    median = session.steps.get("median_s")
    if median:
        compute = max(float(median) - fetch, 0.0)
    else:
        span = float(session.dataloader.get("loop_span_s") or 0.0)
        compute = max(span - fetch_s, 0.0) / batches
    dl = session.dataloader
    total_fetch = float(dl.get("fetch_s") or 0.0)
    if dl.get("fetch_cpu_s") is None or total_fetch <= 0:
        cpu_share = 0.0  # not measured (older session): no core limit, so the bound stays an upper bound
    else:
        cpu_share = min(float(dl["fetch_cpu_s"]) / total_fetch, 1.0)
    fetch_cpu = fetch * cpu_share
    w = 4
    if spare < 1:
        after = max(compute + fetch_cpu, fetch / w)
        cores_text = f"{cores} usable core: the workers' CPU work takes turns with training"
    else:
        after = max(compute, fetch_cpu / min(w, spare), fetch / w)
        cores_text = f"{cores} usable cores, one kept for training"
    per = max(compute + fetch - after, 0.0)
    model = (
        f"fetch {fmt_seconds(fetch)} ({cpu_share:.0%} of it on the CPU) + compute {fmt_seconds(compute)} per batch; "
        f"{w} workers overlap fetching with compute ({cores_text})"
    )
    return Estimate(model=model, per_step=per, total=per * batches)


def tf32_estimate(c: Correlated, session: ProfileSession) -> Estimate | None:
    """TLR08: the window's GEMM kernels per step (forward and backward: autograd launches the
    backward's), shared between the TLR08 lines by fp32 FLOPs, less that time at TF32's rate.
    Every GEMM counts, so with some in half precision it is an upper bound. Issue 26, one
    H200: 9.1 -> 3.2 ms a step on an fp32 MLP (65 %)."""
    tw = session.torch_window
    matmul, active = tw.get("matmul_device_s"), int(tw.get("active_steps") or 0)
    if not matmul or not active:
        return None  # no device trace of the matmuls: observed, not ranked
    share = _fp32_flops_share(c, session)
    per = float(matmul) / active * share * (1.0 - 1.0 / TF32_SPEEDUP)
    where = "" if share >= 0.999 else f", {share:.0%} of them this line's (by fp32 FLOPs)"
    return Estimate(
        model=f"the GEMM kernels' device time ({fmt_seconds(float(matmul) / active)} a step in the torch.profiler "
        f"window, forward and backward{where}) at TF32's tensor-core throughput, up to {TF32_SPEEDUP:g}x fp32's "
        f"(A100, H100/H200 datasheets): at most {1 - 1 / TF32_SPEEDUP:.0%} of it",
        per_step=per,
        total=per * _steps(session) if _steps(session) else per,
    )


def _fp32_flops_share(c: Correlated, session: ProfileSession) -> float:
    """This TLR08 line's share of the run's fp32 CUDA matmul FLOPs (1 when it is the only one)."""
    records = (session.meta.get("patterns") or {}).get("matmuls") or ()
    fp32 = [r for r in records if r.get("dtype") == "float32" and r.get("device") == "cuda" and r.get("allow_tf32") is False]

    def flops(r: dict[str, Any]) -> float:
        m, n, k = (list(r.get("mnk") or ()) + [0, 0, 0])[:3]
        return 2.0 * float(m) * float(n) * float(k) * int(r.get("calls") or 0)

    total = sum(flops(r) for r in fp32)
    if total <= 0:
        return 1.0
    path = session.resolve(c.finding.location.path)
    mine = sum(flops(r) for r in fp32 if int(r.get("line") or 0) == c.finding.line
               and session.resolve(str(r.get("path") or "")) == path)
    return mine / total


def pin_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    """TL202: without workers, pinning costs a copy in the main process (issue 26)."""
    workers = _loader_workers(c, session)
    if workers == 0:
        return Estimate(
            model="the loader has no workers: pin_memory=True would pin every batch in the main process, one more "
            "host copy before the same host-to-device copy, so no saving is expected (measured 0.94 ms a step slower "
            "on one H200, issue 26); with workers a pin-memory thread pins batches ahead, and non_blocking=True "
            "overlaps the copy",
            per_step=0.0,
            total=0.0,
        )
    return Estimate(
        model="the pageable host-to-device copies in the loop: with workers, batches are pinned ahead by a thread, "
        "and pinned copies are faster (and asynchronous with non_blocking=True)",
        per_step=_per_step(c.observed_s, session),
        total=c.observed_s,
    )


def _loader_workers(c: Correlated, session: ProfileSession) -> int | None:
    """num_workers of the loader iterated at the finding's related loops, as the run saw it."""
    for r in c.finding.related:
        opts = loader_at(session, session.resolve(r.path), r.line)
        if opts is not None and isinstance(opts.get("num_workers"), int):
            return int(opts["num_workers"])
    return None


def tensor_copy_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    calls = c.calls
    saving = max(c.observed_s - calls * FROM_NUMPY_S, 0.0)
    return Estimate(
        model=f"torch.tensor copies the array; torch.from_numpy wraps it (about {fmt_seconds(FROM_NUMPY_S)} a call): "
        f"{calls} call(s) here",
        per_step=_per_step(saving, session),
        total=saving,
    )


def retained_memory_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    mem = session.steps.get("memory") or {}
    growth = mem.get("growth_per_step")
    source = mem.get("source")
    steps = _steps(session)
    if growth is None:
        return Estimate(
            model="memory retained per step: nothing was measured in this run (no optimizer steps)", unit=BYTES
        )
    per = max(float(growth), 0.0)
    what = "allocated CUDA memory (the caching allocator)" if source == "cuda" else "the process's resident memory"
    return Estimate(
        model=f"growth of {what} per optimizer step over the run (an upper bound: anything else that grows counts too)",
        per_step=per,
        total=per * steps,
        unit=BYTES,
    )


def churn_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    record = session.meta.get("allocator")
    seconds = churn_seconds(record if isinstance(record, dict) else {})
    return Estimate(
        model="an estimate, not a bound: the pages faulted in again after the third step times the kernel's work per "
        "page (map, fault, zero, unmap) timed on this machine; how much memory goes back and forth depends on the "
        "heap's layout and varies from run to run (rules/TLR09)",
        per_step=_per_step(seconds, session),
        total=seconds,
        bound=False,
    )


def graph_break_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    """TLR14 (and a static graph-break finding at the same line): the time the run spent
    outside the compiled graphs at the break. The torch.profiler windows time each crossing
    (the eager code at the break, the cache lookup whose guards re-enter the resume function,
    its prologue; traceregions.py), the median over the crossings times the crossings per
    step times the run's steps. Merging the graphs removes the re-entry; the break's own
    work stays if the code still needs it (an ``.item()`` it branches on); on a GPU the
    fusion lost across the break is not counted. So: an estimate, not a bound."""
    facts = [c.facts] if c.finding.code == "TLR14" else list(c.facts.get("graph_breaks") or ())
    seen = [f.get("crossings") for f in facts if f.get("crossings")]
    if not seen:
        return Estimate(model="a graph break costs its crossings, and no torch.profiler window timed the compiled "
                        "code of this run: not timed", bound=False)
    if not any(s.get("calls") for s in seen):
        return Estimate(model="a graph break costs its crossings: the torch.profiler window saw none of this one "
                        "(it did not run there, or no window recorded the compiled code)", total=0.0, per_step=0.0,
                        bound=False)
    per_step = [s["per_step"] * (s.get("cost_s") or 0.0) for s in seen]
    crossing = [s.get("cost_s") for s in seen if s.get("cost_s") is not None]
    return Estimate(
        model=f"the time outside the compiled graphs at each crossing of the break in the torch.profiler window "
        f"(median {fmt_seconds(crossing[0]) if crossing else '?'}: the eager code at the break, the guards that "
        f"re-enter, the resume function's prologue) x {sum(s['per_step'] for s in seen):.3g} crossing(s) a step x "
        f"the run's steps; the break's own work stays if the code needs it, fusion lost across the break (GPU) "
        f"is not counted",
        per_step=sum(per_step),
        total=c.observed_s,
        bound=False,
    )


def recompile_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    """TLR15: the compile time of the recompilations, measured by torch (its compilation
    records: dynamo's whole frame, the backend, the backward graphs); a fix that keeps the
    guards true (or makes the input dynamic) compiles once, so at most that is saved."""
    return Estimate(
        model="the time torch spent compiling these recompilations (torch._dynamo's compilation records, forward "
        "and backward graphs), measured under the profilers, which slow dynamo's Python (about 2x for "
        "fixtures/scripts/compiled_train.py); keeping the guarded value fixed or marking it dynamic compiles once",
        per_step=_per_step(c.observed_s, session),
        total=c.observed_s,
    )


def share_estimate(share: float, what: str) -> Callable[[Correlated, ProfileSession], Estimate]:
    def model(c: Correlated, session: ProfileSession) -> Estimate:
        saving = share * c.observed_s
        return Estimate(
            model=f"{what}: at most {share:.0%} of the time observed at the line", per_step=_per_step(saving, session), total=saving
        )

    return model


def observed_bound(what: str) -> Callable[[Correlated, ProfileSession], Estimate]:
    def model(c: Correlated, session: ProfileSession) -> Estimate:
        return Estimate(model=what, per_step=_per_step(c.observed_s, session), total=c.observed_s)

    return model


MODELS: dict[str, Callable[[Correlated, ProfileSession], Estimate]] = {
    **{code: sync_estimate for code in SYNC_RULES},
    "TL201": workers_estimate,
    "TLR01": lambda c, s: workers_estimate(c, s, workers=int(c.loader_workers or 0)),
    "TL203": tensor_copy_estimate,
    "TL302": retained_memory_estimate,
    "TL301": share_estimate(AUTOGRAD_SHARE, "autograd bookkeeping in an evaluation forward"),
    "TL304": share_estimate(INFERENCE_MODE_SHARE, "inference_mode over no_grad (version counters, view tracking)"),
    "TL303": observed_bound("the memset of the gradients: the zero_grad line's time is the bound"),
    "TL202": pin_estimate,
    "TL110": observed_bound("the host-to-device copy at the line: creating on the device skips it"),
    "TL111": observed_bound("the blocking host-to-device copy at the line: non_blocking overlaps it"),
    "TL113": observed_bound("the upload at the line, repeated every step: one upload before the loop skips it"),
    "TLR09": churn_estimate,
    "TLR08": tf32_estimate,
    "TLR14": graph_break_estimate,
    **{code: graph_break_estimate for code in GRAPH_BREAK_STATIC_RULES},
    "TLR15": recompile_estimate,
    "TLR05": lambda c, s: (observed_bound("the for-loop step() time: foreach replaces its per-tensor launches")
                           if on_gpu(s) else share_estimate(FOREACH_CPU_SHARE, "foreach over the for-loop step() on the CPU"))(c, s),
}


def expected_saving(c: Correlated, session: ProfileSession) -> Estimate | None:
    """The expected saving of fixing ``c`` in this run, or None when no model applies."""
    code = c.finding.code
    if code in GPU_ONLY and not on_gpu(session):
        return Estimate(model="not timed on this machine", not_applicable=GPU_ONLY[code])
    model = MODELS.get(code)
    if model is None:
        return None
    if code not in WHOLE_RUN and not c.observed:
        return None  # nothing ran at the finding's lines: no time to save
    return model(c, session)


def hint_for(c: Correlated, session: ProfileSession) -> str | None:
    """A fix hint that agrees with this run (the static hints assume a GPU)."""
    code = c.finding.code
    cores = usable_cores(session)
    if code == "TL201" and not on_gpu(session):
        return (
            f"Pass `num_workers` > 0 so worker processes prepare batches ahead of the step (this process may "
            f"use {cores} core(s): CPU-bound loading gains little from more than {max(cores - 1, 1)} worker(s))"
        )
    return None


def analyse(
    findings: Iterable[Finding],
    session: ProfileSession,
    measurements: Sequence[Measurement] | None = None,
) -> Correlation:
    """Join, estimate and rank: the correlation the reports render."""
    result = correlate(findings, session, measurements=measurements, estimator=expected_saving)
    for c in (*result.findings, *result.runtime):
        hint = hint_for(c, session)
        if hint:
            c.hint = hint
    return result


__all__ = ["AUTOGRAD_SHARE", "analyse", "expected_saving", "hint_for", "usable_cores", "workers_estimate"]
