"""Runtime switches: change one call's options in a run without editing the source.

Used by the experiment's windows (:mod:`torchlint.profiler.measure`). A switch is
a plain dict::

    {"target": "DataLoader", "path": "/abs/train.py", "lines": [12, 14],
     "set": {"num_workers": 2, "persistent_workers": True}}

``path`` and ``lines`` name the call site the finding points at; only calls made
from there are changed (the innermost frames are checked, so a ``DataLoader``
subclass built at that line counts too). Targets:

- ``DataLoader``: keyword arguments of ``DataLoader.__init__`` (``num_workers``,
  ``pin_memory``, ``persistent_workers``, ``prefetch_factor``), overriding what
  the call passed, positionally or by keyword;
- ``zero_grad``: ``Optimizer.zero_grad`` / ``Module.zero_grad`` called with
  ``set_to_none=True``;
- ``foreach``: the optimizer whose ``step()`` is called from the site runs its
  multi-tensor implementation (``foreach=True`` in its param groups; fused ones kept);
- ``cudnn.benchmark`` and ``tf32``: global flags (no call site);
- ``anomaly``: autograd's anomaly detection stays off: ``torch.set_anomaly_enabled``
  (which ``set_detect_anomaly`` and ``detect_anomaly`` call) is passed ``False``; each
  call that asked for it on counts;
- ``malloc``: glibc's ``mallopt`` keeps freed memory in the process (TLR09): the
  mmap and trim thresholds at 1 GiB, as ``MALLOC_MMAP_THRESHOLD_`` and
  ``MALLOC_TRIM_THRESHOLD_`` would set them at start-up.

Each applied switch counts the calls it changed; the window reports them, so an
experiment whose switch never fired says so instead of reporting a non-change.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any

_DEPTH = 6  # frames above the patched function searched for the call site


def _at_site(switch: dict[str, Any]) -> bool:
    path = switch["path"]
    lo, hi = switch["lines"]
    frame = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return False
        code = frame.f_code
        if lo <= frame.f_lineno <= hi and os.path.abspath(code.co_filename) == path:
            return True
        frame = frame.f_back
    return False


def _patch_kwargs(owner: Any, name: str, switch: dict[str, Any], counter: dict[str, int]) -> None:
    original = getattr(owner, name)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def patched(*args: Any, **kwargs: Any) -> Any:
        if _at_site(switch):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # let the original raise its own error
                return original(*args, **kwargs)
            bound.arguments.update(switch["set"])
            counter["calls"] += 1
            return original(*bound.args, **bound.kwargs)
        return original(*args, **kwargs)

    setattr(owner, name, patched)


def _foreach_at_site(switch: dict[str, Any], counter: dict[str, int]) -> None:
    """foreach=True for the optimizers stepped from the switch's lines (TLR05)."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def before(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not _at_site(switch):
            return
        for group in optimizer.param_groups:
            if "foreach" in group and not group.get("fused"):
                group["foreach"] = True
        counter["calls"] += 1

    register_optimizer_step_pre_hook(before)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
KEEP_BYTES = 1 << 30


def keep_freed_memory() -> int:
    """glibc's mallopt: 1 when both thresholds were set, 0 where there is no glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    if libc is None or not hasattr(libc, "mallopt"):
        return 0
    return int(libc.mallopt(M_MMAP_THRESHOLD, KEEP_BYTES) == 1 and libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) == 1)


def _anomaly_off(counter: dict[str, int]) -> None:
    """Every request to turn anomaly detection on (TL306, TLR17) leaves it off."""
    import torch

    original = torch.set_anomaly_enabled

    @functools.wraps(original)
    def patched(enabled: Any, *args: Any, **kwargs: Any) -> Any:
        if enabled:
            counter["calls"] += 1
        return original(False, *args, **kwargs)

    torch.set_anomaly_enabled = patched


def apply(switches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Install every switch; returns one record per switch with its call count."""
    import torch

    applied: list[dict[str, Any]] = []
    for switch in switches:
        target = switch["target"]
        counter = {"calls": 0}
        if target == "DataLoader":
            from torch.utils.data import DataLoader

            _patch_kwargs(DataLoader, "__init__", switch, counter)
        elif target == "zero_grad":
            switch = {**switch, "set": {"set_to_none": True}}
            _patch_kwargs(torch.optim.Optimizer, "zero_grad", switch, counter)
            _patch_kwargs(torch.nn.Module, "zero_grad", switch, counter)
        elif target == "cudnn.benchmark":
            torch.backends.cudnn.benchmark = True
            counter["calls"] = 1
        elif target == "foreach":
            _foreach_at_site(switch, counter)
        elif target == "anomaly":
            _anomaly_off(counter)
        elif target == "malloc":
            counter["calls"] = keep_freed_memory()
        elif target == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            counter["calls"] = 1
        else:
            raise ValueError(f"unknown runtime switch {target!r}")
        applied.append({"target": target, "counter": counter})
    return applied


def counts(applied: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"target": a["target"], "calls": a["counter"]["calls"]} for a in applied]
