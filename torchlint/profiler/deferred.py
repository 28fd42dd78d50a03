"""Reads that a deferred-sync source variant calls, in the experiment's windows only.

The TL101/TL102 variant (experiment/variants.py) keeps a per-step value on the device
(``total += loss.detach()`` for ``total += loss.item()``; ``preds.append(out)`` for
``preds.append(out.cpu())``) and wraps every place that reads the name in
``__torchlint_read__(name)`` (``__torchlint_read_cpu__``, ``__torchlint_read_tolist__`` for
those calls; no string argument, so an f-string can hold it), which this module puts among the builtins of every
window (the original's too, so both arms prepare alike). A read hands the code what
the original held: the tensor converted as the original call did (``.item()``,
``.tolist()``, ``.cpu()``), and a list's tensors converted in place, the scalars of one
device and dtype with one sync. Everything else passes through unchanged.
"""

from __future__ import annotations

import builtins
import functools
from typing import Any

#: how the original converted the value -> the builtin a variant calls to read it
NAMES = {"item": "__torchlint_read__", "cpu": "__torchlint_read_cpu__", "tolist": "__torchlint_read_tolist__"}


def install() -> None:
    for how, name in NAMES.items():
        setattr(builtins, name, functools.partial(read, how=how))


def read(value: Any, how: str = "item") -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return _convert(value, how)
    if isinstance(value, list):
        kept = [i for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
        if kept:
            for i, v in zip(kept, _convert_all([value[i] for i in kept], how)):
                value[i] = v
    return value


def _convert(t: Any, how: str) -> Any:
    if how == "cpu":
        return t.cpu()
    if how == "tolist":
        return t.tolist()
    return t.item()


def _convert_all(tensors: list[Any], how: str) -> list[Any]:
    """Scalars of one device and dtype are read with one sync (stacked); others one by one."""
    import torch

    first = tensors[0]
    if how == "item" and len(tensors) > 1 and all(
        t.dim() == 0 and t.device == first.device and t.dtype == first.dtype for t in tensors
    ):
        return torch.stack(tensors).tolist()
    return [_convert(t, how) for t in tensors]
