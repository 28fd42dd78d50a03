"""Host tensors made or filled, then moved to the device (TLR06): evidence collected in the profiled child.

Only where a CUDA device exists (on the CPU nothing can be moved to another device): factories
and in-place fills remember the user line of each host tensor they make (by id, with a weak
reference that removes the entry when the tensor dies, so no tensor is kept alive), and a
host-to-device copy of such a tensor is charged to that line (``note_moved``, called by the copy
probe of probes.py). What it sees goes into ``patterns.PATTERNS`` (``created``, ``moves``,
``fill_watch``), which ``patterns.summary`` reads.

Imported only in the profiled child, by probes.py.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from torchlint.profiler import patterns
from torchlint.profiler.tooltime import as_probe

# Not torch.tensor: a tensor built from host data is copied even with device= (as TL110 says)
_FACTORIES = ("zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange")
_FILLS = ("fill_", "zero_")


def note_created(tensor: Any, site: tuple[Any, ...] | None, how: str) -> None:
    """Remember where the host tensor ``tensor`` was made or filled (while it lives)."""
    if site is None:
        return
    created = patterns.PATTERNS.created
    key = id(tensor)

    def forget(ref: Any) -> None:  # the tensor died: its entry goes (unless replaced since)
        if created.get(key, (None,))[0] is ref:
            del created[key]

    try:
        if tensor.device.type == "cpu":
            created[key] = (weakref.ref(tensor, forget), (site[0], site[1], site[2], how))
    except (TypeError, AttributeError):
        pass


def note_moved(tensor: Any, kind: str | None) -> None:
    """A host-to-device copy of ``tensor``: charged to its creation line, if known."""
    if not kind or not kind.startswith("HtoD"):
        return
    entry = patterns.PATTERNS.created.get(id(tensor))
    if entry is None or entry[0]() is not tensor:
        return
    origin = entry[1]
    entry = patterns.PATTERNS.moves.setdefault((*origin, kind), [0, 0])
    entry[0] += 1
    entry[1] += int(tensor.numel() * tensor.element_size())


def _wrap_creator(orig: Callable[..., Any], how: str, user_site: Callable[[Any], Any], main_ident: int | None, rec: Any) -> Callable[..., Any]:
    getframe = sys._getframe
    get_ident = threading.get_ident
    compiling = torch.compiler.is_compiling

    @functools.wraps(orig)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if compiling():  # torch.compile traces straight through to orig (compilewatch.py)
            return orig(*args, **kwargs)
        result = orig(*args, **kwargs)
        if not rec.busy and get_ident() == main_ident:
            note_created(result, user_site(getframe(1)), how)
        return result

    return as_probe(probe, how)


def fill_watch_wanted() -> bool:
    """Creation lines are tracked only where a host tensor can be moved to a device."""
    return bool(torch.cuda.is_available())


def install_fill_watch(main_ident: int | None, user_site: Callable[[Any], Any], rec: Any) -> list[str]:
    """Track creation lines of host tensors, only where there is a device to move them to."""
    if not fill_watch_wanted():
        patterns.PATTERNS.fill_watch = "no CUDA device: a host tensor has no other device to be moved to"
        return []
    done = []
    for name in _FACTORIES:
        if getattr(torch, name, None) is not None:
            setattr(torch, name, _wrap_creator(getattr(torch, name), f"torch.{name}", user_site, main_ident, rec))
            done.append(f"torch.{name}")
    for name in _FILLS:
        setattr(torch.Tensor, name, _wrap_creator(getattr(torch.Tensor, name), f"Tensor.{name}", user_site, main_ident, rec))
        done.append(f"Tensor.{name}")
    return done
