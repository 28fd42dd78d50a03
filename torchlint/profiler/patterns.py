"""Runtime patterns no source shows (TLR05-TLR08, TLR17): evidence collected in the profiled child.

- **optimizers** (TLR05): each optimizer's ``step()`` is timed by a global pre/post
  step hook, and on its first step the implementation it runs is read from its
  param groups (``fused``, ``foreach``, else torch's own default for those params).
- **matmuls** (TLR07, TLR08): ``F.linear``, ``torch.mm/bmm/addmm/matmul`` and
  ``Tensor.__matmul__/matmul/mm/bmm`` are wrapped. A call is recorded (timed, at its
  innermost user line, with M/N/K) only when it runs in fp16/bf16 (its dtype, or the
  autocast dtype for its device) with a dimension that is not a multiple of 8, or in
  fp32 on CUDA; every other call costs one dtype check.
- **fill-then-move** (TLR06): ``fillwatch.py``; **anomaly mode** (TLR17): ``anomalywatch.py``.
  Their probes write what they see here too (``PATTERNS``), and :func:`summary` reads it all.

Imported only in the profiled child, by probes.py (and runend.py, for the summary).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

ALIGN = 8  # tensor-core alignment in elements (fp16/bf16), as TL402
_MAX_KEYS = 2000  # distinct (line, op, dtype, shape) records kept: varying shapes stay bounded
_LOW = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


class Patterns:
    """What the pattern probes saw; read once by :func:`summary` at the end of the run."""

    def __init__(self) -> None:
        self.optimizers: dict[int, dict[str, Any]] = {}  # id(optimizer) -> record
        self.step_started: dict[int, float] = {}
        self.matmuls: dict[tuple[Any, ...], list[float]] = {}  # key -> [calls, total_s]
        self.in_matmul = False
        # id(tensor) -> (weak reference, creation site): a WeakKeyDictionary would compare
        # tensors with == (elementwise) on a hash collision of its references
        self.created: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self.moves: dict[tuple[Any, ...], list[int]] = {}  # (site, how, kind) -> [calls, bytes]
        self.fill_watch: str | None = None  # why creation lines are not tracked, when they are not
        self.backwards = 0  # backward passes run on the main thread
        self.anomaly_backwards = 0  # ... of them with autograd's anomaly detection on
        self.anomaly_sites: dict[tuple[Any, ...], int] = {}  # user line that turned it on -> calls
        self.hooks: list[Any] = []


PATTERNS = Patterns()


# --------------------------------------------------------------------------
# TLR05: the optimizer's implementation, and its step() time
# --------------------------------------------------------------------------


def optimizer_impl(optimizer: Any) -> tuple[str, bool]:
    """(``fused`` | ``foreach`` | ``for-loop``, whether ``foreach=False`` forced the loop)."""
    impls = set()
    forced = False
    for group in optimizer.param_groups:
        if group.get("fused"):
            impls.add("fused")
        elif group.get("foreach") is True:
            impls.add("foreach")
        elif group.get("foreach") is False:
            impls.add("for-loop")
            forced = True
        else:
            impls.add("foreach" if _default_foreach(group, optimizer) else "for-loop")
    if impls == {"for-loop"}:
        return "for-loop", forced
    return ("fused" if "fused" in impls else "foreach"), False


def _default_foreach(group: dict[str, Any], optimizer: Any) -> bool:
    """What torch picks when neither ``foreach`` nor ``fused`` is given (its own rule)."""
    params = [p for p in group["params"] if p.grad is not None] or list(group["params"])
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        return bool(_default_to_fused_or_foreach(params, bool(group.get("differentiable")), use_fused=False)[1])
    except Exception:  # a torch without the private helper: foreach only when all are on CUDA
        return bool(params) and all(p.device.type == "cuda" for p in params)


def _describe(optimizer: Any, site: tuple[Any, ...] | None) -> dict[str, Any]:
    impl, forced = optimizer_impl(optimizer)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return {
        "class": type(optimizer).__name__,
        "has_foreach": "foreach" in getattr(optimizer, "defaults", {}),
        "has_fused": "fused" in getattr(optimizer, "defaults", {}),
        "impl": impl,
        "forced": forced,
        "tensors": len(params),
        "elements": int(sum(p.numel() for p in params)),
        "devices": sorted({p.device.type for p in params}),
        "path": site[0] if site else None,
        "line": site[1] if site else None,
        "function": site[2] if site else None,
        "steps": 0,
        "step_s": 0.0,
    }


def install_optimizer_watch(main_ident: int | None, user_site: Callable[[Any], Any]) -> None:
    """Time every optimizer's step() on the main thread (global step hooks)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pat = PATTERNS
    perf = time.perf_counter

    def before(optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != main_ident:
            return
        key = id(optimizer)
        if key not in pat.optimizers:
            try:
                pat.optimizers[key] = _describe(optimizer, user_site(sys._getframe(1)))
            except Exception:
                return
        pat.step_started[key] = perf()

    def after(optimizer: Any, args: Any, kwargs: Any) -> None:
        t0 = pat.step_started.pop(id(optimizer), None)
        record = pat.optimizers.get(id(optimizer))
        if t0 is not None and record is not None:
            record["steps"] += 1
            record["step_s"] += perf() - t0

    # registered before torchprof's own post hook: its work is not in step()'s time
    from torchlint.profiler.tooltime import hide_from_dynamo

    pat.hooks = [register_optimizer_step_pre_hook(hide_from_dynamo(before)),
                 register_optimizer_step_post_hook(hide_from_dynamo(after))]


# --------------------------------------------------------------------------
# TLR07 / TLR08: matmuls by dtype and shape
# --------------------------------------------------------------------------


def matmul_dims(op: str, args: tuple[Any, ...]) -> tuple[int, int, int] | None:
    """(M, N, K) of a matmul call, or None for a vector product or an unknown form."""
    if op == "linear":
        x, w = args[0], args[1]
        if w.dim() != 2 or x.dim() < 1:
            return None
        k = int(x.shape[-1])
        return (x.numel() // k if k else 0), int(w.shape[0]), k
    a, b = (args[1], args[2]) if op == "addmm" else (args[0], args[1])
    if a.dim() < 2 or b.dim() < 2:
        return None
    return int(a.shape[-2]), int(b.shape[-1]), int(a.shape[-1])


def _watched(tensor: Any) -> tuple[str | None, str]:
    """(``float16``/``bfloat16``, device) for a call that runs in half precision (its
    dtype, or autocast's for its device), (None, ``cuda``) for fp32 on CUDA, else
    (None, ""). The common case, fp32 on the CPU without autocast, is two cheap checks."""
    dtype = tensor.dtype
    if dtype is torch.float32:
        if tensor.is_cpu:
            return (_LOW.get(torch.get_autocast_dtype("cpu")), "cpu") if torch.is_autocast_enabled("cpu") else (None, "")
        if tensor.is_cuda:
            return (_LOW.get(torch.get_autocast_dtype("cuda")) if torch.is_autocast_enabled("cuda") else None), "cuda"
        return None, ""
    low = _LOW.get(dtype)
    return (low, tensor.device.type) if low is not None else (None, "")


def _wrap_matmul(orig: Callable[..., Any], op: str, main_ident: int | None, user_site: Callable[[Any], Any], rec: Any) -> Callable[..., Any]:
    pat = PATTERNS
    perf = time.perf_counter
    get_ident = threading.get_ident
    compiling = torch.compiler.is_compiling
    getframe = sys._getframe

    first = 1 if op == "addmm" else 0

    @functools.wraps(orig)
    def probe(*args: Any, **kwargs: Any) -> Any:
        # compiling first: torch.compile traces straight through to orig (compilewatch.py)
        if compiling() or kwargs or pat.in_matmul or len(args) <= first + 1:
            return orig(*args, **kwargs)
        try:
            low, device = _watched(args[first])
            if not device or (low is None and device != "cuda"):
                return orig(*args, **kwargs)
            if rec.busy or get_ident() != main_ident:
                return orig(*args, **kwargs)
            dims = matmul_dims(op, args)
        except Exception:
            return orig(*args, **kwargs)
        if dims is None or (low is not None and all(d % ALIGN == 0 for d in dims)):
            return orig(*args, **kwargs)
        site = user_site(getframe(1))
        pat.in_matmul = True
        t0 = perf()
        try:
            return orig(*args, **kwargs)
        finally:
            dt = perf() - t0
            pat.in_matmul = False
            if site is not None:
                tf32 = None if low else bool(torch.backends.cuda.matmul.allow_tf32)
                _count(pat.matmuls, (site[0], site[1], site[2], op, low or "float32", device, dims, tf32), dt)

    return _named(probe, f"{'F.' if op == 'linear' else ''}{getattr(orig, '__name__', op)}")


def _named(probe: Callable[..., Any], op: str) -> Callable[..., Any]:
    """Named as probes.py names its wrappers, so that cprof.user_view shows the wrapped
    call in the wrapper's place (other torchlint frames are removed with their time),
    and hidden from torch.compile's frame evaluation (tooltime.as_probe)."""
    from torchlint.profiler.tooltime import as_probe

    return as_probe(probe, op)


def _count(table: dict[tuple[Any, ...], list[float]], key: tuple[Any, ...], dt: float) -> None:
    entry = table.get(key)
    if entry is not None:
        entry[0] += 1
        entry[1] += dt
    elif len(table) < _MAX_KEYS:
        table[key] = [1, dt]


def install_matmul_watch(main_ident: int | None, user_site: Callable[[Any], Any], rec: Any) -> list[str]:
    """Wrap the matmul entry points; returns their names."""
    import torch.nn.functional as F

    targets = [(F, "linear", "linear"), (torch, "mm", "mm"), (torch, "bmm", "bmm"), (torch, "addmm", "addmm"),
               (torch, "matmul", "matmul"), (torch.Tensor, "__matmul__", "matmul"), (torch.Tensor, "matmul", "matmul"),
               (torch.Tensor, "mm", "mm"), (torch.Tensor, "bmm", "bmm")]
    done = []
    for owner, name, op in targets:
        orig = getattr(owner, name, None)
        if orig is None or getattr(orig, "__torchlint_probe__", False):
            continue
        try:
            setattr(owner, name, _wrap_matmul(orig, op, main_ident, user_site, rec))
        except (AttributeError, TypeError):
            continue
        done.append(f"{'Tensor.' if owner is torch.Tensor else 'F.' if owner is F else 'torch.'}{name}")
    return done


# --------------------------------------------------------------------------
# the session's part
# --------------------------------------------------------------------------


def _tf32_state() -> dict[str, Any]:
    """Whether TF32 could run here (Ampere or newer) and whether it is on."""
    state: dict[str, Any] = {"cuda": False}
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return state
        major, minor = torch.cuda.get_device_capability()
        state.update(
            cuda=True,
            capability=f"{major}.{minor}",
            ampere_or_newer=major >= 8 and torch.version.hip is None,
            allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
            float32_matmul_precision=torch.get_float32_matmul_precision(),
        )
    except Exception as exc:
        state["error"] = f"{type(exc).__name__}: {exc}"
    return state


def summary() -> dict[str, Any]:
    """Plain data for ``session.meta["patterns"]`` (correlate/runtime.py reads it)."""
    pat = PATTERNS
    for hook in pat.hooks:
        try:
            hook.remove()
        except Exception:
            pass
    matmuls = [
        {"path": k[0], "line": k[1], "function": k[2], "op": k[3], "dtype": k[4], "device": k[5],
         "mnk": list(k[6]), "allow_tf32": k[7], "calls": int(v[0]), "total_s": v[1]}
        for k, v in pat.matmuls.items()
    ]
    moves = [
        {"path": k[0], "line": k[1], "function": k[2], "made_by": k[3], "kind": k[4], "calls": v[0], "bytes": v[1]}
        for k, v in pat.moves.items()
    ]
    return {
        "optimizers": [r for r in pat.optimizers.values() if r["steps"]],
        "matmuls": matmuls,
        "fill_moves": moves,
        "fill_watch": pat.fill_watch or "on",
        "tf32": _tf32_state(),
        "anomaly": {
            "backwards": pat.backwards,
            "on": pat.anomaly_backwards,
            "sites": [{"path": k[0], "line": k[1], "function": k[2], "calls": v} for k, v in pat.anomaly_sites.items()],
        },
    }
