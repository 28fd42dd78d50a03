"""Forward time per ``nn.Module``, by its path in the model, during the torch.profiler windows.

torch.profiler's ``with_modules`` needs its Python tracer, which would take cProfile's
profiling hook (torchprof.py). Instead, global forward pre/post hooks
(``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook``) time each module's forward with ``perf_counter``.
They are registered only while a window records and removed after it: a registered
global hook takes every module call off torch's fast path, so outside the windows the
script runs exactly as without torchlint. A module's path comes from the nesting of
the calls: the outermost module called is named by its class (``Net``), a child by its
attribute name in the module that called it (``Net.features.0``).

The time is host time of the forward call: on a GPU it is launch time, not kernel time.
Each forward is also a ``record_function`` range (``torchlint module <path>``), so the
parent can charge the backward of the autograd nodes its ops created to the module
(tracefile.py: the nodes carry the forward op's sequence number).
Imported only in the profiled child.
"""

from __future__ import annotations

import threading
import time
from typing import Any

MAX_MODULES = 200  # rows kept in the session, by total time
MODULE_PREFIX = "torchlint module "  # each forward's record_function range (tracefile.py reads it)


def _descendants(parent: Any, depth: int = 3) -> Any:
    """``(dotted name, module)`` below ``parent``, nearest first, ``depth`` levels at most."""
    level = [("", parent)]
    for _ in range(depth):
        nxt = []
        for prefix, mod in level:
            for n, m in getattr(mod, "_modules", {}).items():
                if m is not None:
                    name = f"{prefix}{n}"
                    yield name, m
                    nxt.append((name + ".", m))
        level = nxt


def _exit(rf: Any) -> None:
    if rf is not None:
        try:
            rf.__exit__(None, None, None)
        except Exception:
            pass


class ModuleTimer:
    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = {}  # path -> [calls, total_s, self_s]
        self._stack: list[list[Any]] = []  # [module, path, start, child_s, its range]
        self._names: dict[tuple[int, int], str] = {}
        self._handles: list[Any] = []
        self._main = threading.main_thread().ident
        self.used = False
        self.foreign = False  # a hook of the script's own: torch's slow path was not only ours

    @property
    def active(self) -> bool:
        return bool(self._handles)

    def start(self) -> None:
        if self._handles:
            return
        from torch.nn.modules import module as torch_module
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.used = True
        if (torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks
                or torch_module._global_backward_hooks or torch_module._global_backward_pre_hooks):
            self.foreign = True
        from torch.autograd.profiler import record_function

        self._record_function = record_function
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]

    def stop(self) -> None:
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles = []
        while self._stack:  # forwards still running: their ranges end with the window
            _exit(self._stack.pop()[4])

    def _child_name(self, parent: Any, module: Any) -> str | None:
        """``module``'s attribute name in ``parent``; None when it is not its child."""
        key = (id(parent), id(module))
        if key in self._names:
            return self._names[key]
        name = next((n for n, m in parent._modules.items() if m is module), None)
        if name is None:  # held in a container the parent does not call (layers.0 of a ModuleList)
            name = next((n for n, m in _descendants(parent) if m is module), None)
        self._names[key] = name
        return name

    def _pre(self, module: Any, args: Any) -> None:
        if threading.get_ident() != self._main:
            return
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks:
            self.foreign = True
        stack = self._stack
        path = type(module).__name__
        if stack:
            name = self._child_name(stack[-1][0], module)
            if name is None:  # a forward that raised left its entry: find the real parent
                for depth in range(len(stack) - 2, -1, -1):
                    name = self._child_name(stack[depth][0], module)
                    if name is not None:
                        while len(stack) > depth + 1:
                            _exit(stack.pop()[4])
                        break
            path = f"{stack[-1][1]}.{name or path}"
        try:  # the module's range in the trace: tracefile.py charges its ops' backward to it
            rf = self._record_function(MODULE_PREFIX + path)
            rf.__enter__()
        except Exception:
            rf = None
        stack.append([module, path, time.perf_counter(), 0.0, rf])

    def _post(self, module: Any, args: Any, output: Any) -> None:
        now = time.perf_counter()
        stack = self._stack
        if threading.get_ident() != self._main or not stack:
            return
        if stack[-1][0] is not module:
            if not any(entry[0] is module for entry in stack):
                return  # its forward began before the window
            while stack[-1][0] is not module:  # a forward that raised never reached this hook
                _exit(stack.pop()[4])
        _, path, start, child, rf = stack.pop()
        _exit(rf)
        spent = now - start
        row = self.rows.get(path)
        if row is None:
            row = self.rows[path] = [0, 0.0, 0.0]
        row[0] += 1
        row[1] += spent
        row[2] += max(spent - child, 0.0)
        if stack:
            stack[-1][3] += spent

    def summary(self) -> list[dict[str, Any]]:
        rows = sorted(self.rows.items(), key=lambda kv: -kv[1][1])[:MAX_MODULES]
        return [{"module": path, "calls": int(r[0]), "total_s": r[1], "self_s": r[2]} for path, r in rows]

    def splice(self) -> tuple[tuple[str, int, str], ...]:
        """pstats' key of ``Module._call_impl``'s nested ``inner``, when only these hooks
        made torch call it (``profile.prof`` folds it into ``_call_impl``, as a run without
        torchlint has it); nothing when the script has module hooks of its own."""
        if not self.used or self.foreign:
            return ()
        import torch

        code = torch.nn.Module._call_impl.__code__
        inner = [c for c in code.co_consts if getattr(c, "co_name", None) == "inner"]
        return tuple((c.co_filename, c.co_firstlineno, c.co_name) for c in inner)
