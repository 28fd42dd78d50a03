"""The project-wide reach of ``torch.compile``: every function dynamo traces when the
compiled code runs. Pure data over the files' summaries (no libcst).

Dynamo inlines the Python functions a compiled function calls, so a graph break in a
helper or a submodule's ``forward`` breaks the compiled graph as much as one in the
compiled function itself. The reach starts at each file's roots
(:mod:`torchlint.analysis.compiled_roots`) and follows the calls the summaries record
(``self.encoder(x)``, ``helper(x)``, a ``ModuleList``'s members), across modules, the
way the step join does; it stops at functions decorated ``@torch.compiler.disable``.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

from torchlint.analysis.summary import CallSite, Ref

_MAX_FUNCTIONS = 20_000  # a bound on the walk, far above any real project's functions


@dataclass(frozen=True, slots=True)
class CompiledInfo:
    root: str  # the compiled function's key ("Net.forward")
    how: str  # "`torch.compile(model)` in train.py"
    via: str = ""  # the traced function that calls this one (none for the root)
    root_path: str = ""  # the compiled function's file: how often it runs is the root's

    def text(self, key: str) -> str:
        """Where a finding in function ``key`` sits: "`Block.forward()` (called from
        `Net.forward()`, compiled by `torch.compile(model)` in train.py)"."""
        name = key.partition("#")[0]
        if key == self.root:
            return f"`{name}()` (compiled by {self.how})"
        traced = f", traced from `{self.root}()`" if self.via != self.root else ""
        return f"`{name}()` (called from `{self.via}()`{traced}, compiled by {self.how})"


Compiled = dict[str, dict[str, CompiledInfo]]  # file path -> function key -> how it is compiled


def compiled_reach(project) -> Compiled:  # project: analysis.project.Project (no import circle)
    """Every function of the project that compiled code traces."""
    found: Compiled = {}
    skipped = {(path, key) for path, summary in project.files.items() for key in summary.not_compiled}
    work: deque[tuple[str, str, CompiledInfo]] = deque()
    for path, summary in project.files.items():
        for ref, how, unless in summary.compiled:
            if unless is not None and project.function(unless, path) is not None:
                continue  # the class defines its own `compile()`: not nn.Module's
            for each in _members(ref):
                for callee in project.callees(each, path):
                    work.append((*callee, CompiledInfo(callee[1], f"{how} in {os.path.basename(path)}", root_path=callee[0])))
    if not work:
        return found  # nothing compiled: the usual case, no call index to build
    calls_by_caller: dict[tuple[str, str], list[CallSite]] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            if call.caller:
                calls_by_caller.setdefault((path, call.caller), []).append(call)
    seen = 0
    while work and seen < _MAX_FUNCTIONS:
        path, key, info = work.popleft()
        if (path, key) in skipped or key in found.get(path, {}):
            continue  # run eagerly, or reached already (recursion, diamonds)
        found.setdefault(path, {})[key] = info
        seen += 1
        for call in calls_by_caller.get((path, key), ()):
            for callee in project.callees(call.target, path):  # every class an attribute may hold
                if callee != (path, key):
                    work.append((*callee, CompiledInfo(info.root, info.how, key, info.root_path)))
    return found


def _members(ref: Ref) -> tuple[Ref, ...]:
    """A container's members are each a root (``torch.compile(self.blocks[i])``)."""
    return ref[1] if ref[0] == "each" else (ref,)
