"""Autograd's anomaly detection during the backward passes (TLR17): evidence collected in the profiled child.

``torch.autograd.backward`` counts the backward passes run with anomaly detection on, and
``torch.set_anomaly_enabled`` notes the user line that turned it on (one flag read per backward;
nothing else). What it sees goes into ``patterns.PATTERNS`` (``backwards``, ``anomaly_backwards``,
``anomaly_sites``), which ``patterns.summary`` reads.

Imported only in the profiled child, by probes.py.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from torchlint.profiler import patterns
from torchlint.profiler.tooltime import as_probe


def install_anomaly_watch(main_ident: int | None, user_site: Callable[[Any], Any], rec: Any) -> list[str]:
    """Count the backward passes run with anomaly mode on (``torch.autograd.backward``,
    which ``Tensor.backward`` calls), and remember the user lines that turn it on
    (``torch.set_anomaly_enabled``, which ``set_detect_anomaly`` and ``detect_anomaly`` call)."""
    pat = patterns.PATTERNS
    get_ident = threading.get_ident
    getframe = sys._getframe
    is_on = torch.is_anomaly_enabled
    compiling = torch.compiler.is_compiling
    done = []
    backward = getattr(torch.autograd, "backward", None)
    if backward is not None and not getattr(backward, "__torchlint_probe__", False):
        @functools.wraps(backward)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if not compiling() and get_ident() == main_ident:
                pat.backwards += 1
                if is_on():
                    pat.anomaly_backwards += 1
            return backward(*args, **kwargs)

        torch.autograd.backward = as_probe(counted, "torch.autograd.backward")
        done.append("torch.autograd.backward")
    setter = getattr(torch, "set_anomaly_enabled", None)
    if setter is not None and not getattr(setter, "__torchlint_probe__", False):
        @functools.wraps(setter)
        def noted(enabled: Any, *args: Any, **kwargs: Any) -> Any:
            if enabled and not rec.busy and get_ident() == main_ident:
                site = user_site(getframe(1))
                if site is not None:
                    key = (site[0], site[1], site[2])
                    pat.anomaly_sites[key] = pat.anomaly_sites.get(key, 0) + 1
            return setter(enabled, *args, **kwargs)

        torch.set_anomaly_enabled = as_probe(noted, "torch.set_anomaly_enabled")
        done.append("torch.set_anomaly_enabled")
    return done
