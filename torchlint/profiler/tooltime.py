"""torchlint's own work inside the script's calls, noted path by path for ``profile.prof``.

cProfile runs for the whole script, so torchlint's hooks (the optimizer step hook that
exports a trace, the evaluation window's start and stop) are recorded inside the
user's calls: ``train_epoch -> Optimizer.step -> <torchlint hook>``. ``profile.prof``
must show the program as ``python -m cProfile`` would, so that time has to come out of
every function above the hook. A table of callers cannot say which functions those
were: taking it out in proportion to each caller's share, level by level, over a
recursive graph (``_call_impl -> forward -> _call_impl``) took every module call's time
to zero (issue 28). cProfile cannot be paused either: ``disable()`` ends the calls in
progress, and a timer that skips torchlint's work is a Python call per event (twice
cProfile's overhead, measured on a call-heavy loop).

So each piece of torchlint's work notes how long it took and the stack above it, as
code objects (cheap to collect: no strings, no hashing of code), and
:func:`torchlint.profiler.cprof.user_view` subtracts it from exactly those functions and
the calls between them, once per distinct function and call as cProfile counts a
recursive one. Work nested in other work is charged once, by the outermost.

Standard library only: the bootstrap imports it before torch.
"""

from __future__ import annotations

import os
import time
from types import CodeType, FrameType
from typing import Any

_TORCHLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

#: cProfile's key of the C call that runs the script's ``<module>`` (the bootstrap's ``exec``)
EXEC_KEY = ("~", 0, "<built-in method builtins.exec>")
_EXEC = 0  # its stand-in in a path of code ids
_MAX_DEPTH = 1000

Key = tuple  # (filename, first line, function name): pstats' key


def _ours(code: CodeType) -> bool:
    return code.co_filename.startswith(_TORCHLINT_DIR)


class ToolTime:
    """Seconds of torchlint's work per path (entry, its caller, ... up to the script's root)."""

    def __init__(self) -> None:
        self.depth = 0
        self.paths: dict[tuple[int, ...], float] = {}
        self.codes: dict[int, CodeType] = {}  # keeps the code objects of the paths alive
        self.charged_s = 0.0

    def begin(self) -> float:
        """Start a piece of torchlint's work; pass the result to :meth:`end`."""
        self.depth += 1
        return time.perf_counter()

    def end(self, t0: float, frame: FrameType | None) -> float:
        """End the work begun at ``t0`` in ``frame`` (a torchlint frame); returns its seconds.
        Only the outermost piece is charged: it holds the nested ones."""
        seconds = time.perf_counter() - t0
        self.depth = max(self.depth - 1, 0)
        if self.depth == 0 and frame is not None:
            self.charge(frame, seconds)
        return seconds

    def charge(self, frame: FrameType, seconds: float) -> None:
        path: list[int] = []
        f: Any = frame
        entry = None
        while f is not None and _ours(f.f_code):  # torchlint's frames at the bottom
            entry = f.f_code
            f = f.f_back
        if entry is None:
            return
        path.append(id(entry))
        self.codes[id(entry)] = entry
        while f is not None and len(path) < _MAX_DEPTH:
            code = f.f_code
            if _ours(code):  # the bootstrap: it ran the script's <module> through exec()
                path.append(_EXEC)
                break
            path.append(id(code))
            if id(code) not in self.codes:
                self.codes[id(code)] = code
            f = f.f_back
        key = tuple(path)
        self.paths[key] = self.paths.get(key, 0.0) + seconds
        self.charged_s += seconds

    def keyed(self) -> list[tuple[Key, list[Key], float]]:
        """``(entry, [its caller, ..., root], seconds)`` with pstats keys."""
        out = []
        for path, seconds in self.paths.items():
            keys = [EXEC_KEY if i == _EXEC else code_key(self.codes[i]) for i in path]
            out.append((keys[0], keys[1:], seconds))
        return out


def as_probe(wrapper: Any, op: str) -> Any:
    """Name a wrapper of a torch function as the call probes are named
    (``<torchlint probe OP>``), so that ``profile.prof`` shows the function it wrapped in
    its place (cprof.user_view): the wrapper's time is the call's, minus what was charged.
    Its frames are hidden from torch.compile (:func:`hide_from_dynamo`)."""
    name = f"<torchlint probe {op}>"
    wrapper.__code__ = wrapper.__code__.replace(co_name=name, co_qualname=name)
    wrapper.__torchlint_probe__ = True
    _note_cprofile_name(wrapper, op)
    hide_from_dynamo(wrapper)
    return wrapper


#: cProfile's name of a C method called through a probe -> the name plain cProfile gives
#: it, or None where plain cProfile shows no call at all (a slot: ``if t:``, ``float(t)``).
#: cProfile names a bound C method by looking its name up on the instance's type, and
#: there it finds the probe: ``<function TensorBase.item at 0x7f...>``, an address in a
#: function's name (cprof.user_view puts the C method's own name back).
CPROFILE_NAMES: dict[str, str | None] = {}

def _note_cprofile_name(wrapper: Any, op: str) -> None:
    wrapped = getattr(wrapper, "__wrapped__", None)
    if type(wrapped).__name__ not in ("method_descriptor", "wrapper_descriptor"):
        return  # a Python function or a module's builtin: cProfile names those itself
    attr = op.rsplit(".", 1)[-1]
    # A dunder is a slot the interpreter calls without a call event (``if t:``, ``x @ w``,
    # ``float(t)``): plain cProfile never lists it, its time is its caller's own.
    slot = attr.startswith("__") and attr.endswith("__")
    CPROFILE_NAMES[repr(wrapper)] = None if slot else repr(wrapped)


# torchlint's wrappers and hooks, as frames torch.compile must run and never compile
# (compilewatch.py): marked once dynamo is imported, the ones made before that then.
_pending: list[CodeType] = []
_skipper: list[Any] = []  # [function marking a code object, the list its failures go to]


def hide_from_dynamo(fn: Any) -> Any:
    """Mark ``fn``'s code (a function, or a bound method's) as a frame dynamo runs as it is.
    Dynamo still traces *through* it when compiled code calls it: each wrapper checks
    ``torch.compiler.is_compiling()`` first and then only calls what it wraps."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:
        return fn
    if _skipper:
        _mark(code)
    else:
        _pending.append(code)
    return fn


def set_frame_skipper(mark: Any, errors: list[str]) -> None:
    """Install dynamo's marker (compilewatch.skip_frames) and mark what was made before it."""
    _skipper[:] = [mark, errors]
    while _pending:
        _mark(_pending.pop())


def _mark(code: CodeType) -> None:
    mark, errors = _skipper
    try:
        mark(code)
    except Exception as exc:  # a torch without the marker: noted once, the run goes on
        if len(errors) < 5:
            errors.append(f"could not hide torchlint's frames from torch.compile: {type(exc).__name__}: {exc}")


def code_key(code: CodeType) -> Key:
    """pstats' key of a Python function's code."""
    return (code.co_filename, code.co_firstlineno, code.co_name)


def stack_keys(frame: FrameType | None) -> list[Key]:
    """pstats' keys of ``frame`` and its callers, up to the script's root (the
    bootstrap's ``exec``: :data:`EXEC_KEY`), as cProfile records them."""
    keys: list[Key] = []
    f: Any = frame
    while f is not None and len(keys) < _MAX_DEPTH:
        if _ours(f.f_code):  # the bootstrap, which ran the script's <module>
            keys.append(EXEC_KEY)
            break
        keys.append(code_key(f.f_code))
        f = f.f_back
    return keys


TOOL = ToolTime()
