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
from dataclasses import dataclass, replace

from torchlint.analysis.compiled_switch import compile_switch
from torchlint.analysis.summary import CallSite, CompiledCalls, Ref, callers_part

_MAX_FUNCTIONS = 20_000  # a bound on the walk, far above any real project's functions


@dataclass(frozen=True, slots=True)
class CompiledInfo:
    root: str  # the compiled function's key ("Net.forward")
    how: str  # "`torch.compile(model)` in train.py"
    via: str = ""  # the traced function that calls this one (none for the root)
    root_path: str = ""  # the compiled function's file: how often it runs is the root's
    # the parameters some call of the compiled code passes a value that may be true ("*": any);
    # a call made only when one is passed (`CallSite.opt_in`: `kv_cache.get_pos()`) is traced only then
    passed: frozenset[str] = frozenset({"*"})
    # "only with `args.torchcompile`, off by default": every root reaching it is compiled only with a
    # setting of the run that is off by default (analysis/compiled_switch.py); "" where one may compile at the defaults
    switch: str = ""

    def text(self, key: str) -> str:
        """Where a finding in function ``key`` sits: "`Block.forward()` (called from
        `Net.forward()`, compiled by `torch.compile(model)` in train.py)"."""
        name = key.partition("#")[0]
        how = f"{self.how}, {self.switch}" if self.switch else self.how
        if key == self.root:
            return f"`{name}()` (compiled by {how})"
        traced = f", traced from `{self.root}()`" if self.via != self.root else ""
        return f"`{name}()` (called from `{self.via}()`{traced}, compiled by {how})"


Compiled = dict[str, dict[str, CompiledInfo]]  # file path -> function key -> how it is compiled


def compiled_reach(project) -> Compiled:  # project: analysis.project.Project (no import circle)
    """Every function of the project that compiled code traces."""
    found: Compiled = {}
    skipped = {(path, key) for path, summary in project.files.items() for key in summary.not_compiled}
    work: deque[tuple[str, str, CompiledInfo]] = deque()
    roots = [(path, ref, how, uses, guard) for path, summary in project.files.items()
             for (ref, how, unless), uses, guard in zip(summary.compiled, summary.compiled_calls or (None,) * len(summary.compiled),
                                                        summary.compiled_guards or (((), ""),) * len(summary.compiled))
             if unless is None or project.function(unless, path) is None]  # a class with its own `compile()`: not nn.Module's
    if not roots:
        return found  # nothing compiled: the usual case, no call index to build
    calls_by_caller: dict[tuple[str, str], list[CallSite]] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            if call.caller:
                calls_by_caller.setdefault((path, call.caller), []).append(call)
    for path, ref, how, uses, guard in roots:
        switch = compile_switch(project, path, guard)
        for each in _members(ref):
            for callee in project.callees(each, path):
                passed = _root_passed(project, path, each, callee, uses, calls_by_caller)
                work.append((*callee, CompiledInfo(callee[1], f"{how} in {os.path.basename(path)}", root_path=callee[0], passed=passed, switch=switch)))
    seen = 0
    while work and seen < _MAX_FUNCTIONS:
        path, key, info = work.popleft()
        known = found.get(path, {}).get(key)
        opens = known is not None and known.switch and not info.switch  # compiled at the defaults too: not only opt-in
        if (path, key) in skipped or known is not None and info.passed <= known.passed and not opens:
            continue  # run eagerly, or reached already (recursion, diamonds)
        if known is not None:  # reached again passing more: what only that opens is traced too
            info = replace(info if opens else known, passed=known.passed | info.passed)
        found.setdefault(path, {})[key] = info
        seen += 1
        for call in calls_by_caller.get((path, key), ()):
            if call.opt_in and "*" not in info.passed and call.opt_in not in info.passed:
                continue  # `0 if kv_cache is None else kv_cache.get_pos()`: no compiled call passes `kv_cache`
            for callee in project.callees(call.target, path):  # every class an attribute may hold
                if callee != (path, key):
                    passed = project.passes(call, callee, (path, key), info.passed)
                    work.append((*callee, CompiledInfo(info.root, info.how, key, info.root_path, passed, info.switch)))
    return found


def _root_passed(project, path: str, ref: Ref, callee: tuple[str, str], uses: CompiledCalls | None,  # type: ignore[no-untyped-def]
                 calls_by_caller: dict[tuple[str, str], list[CallSite]]) -> frozenset[str]:
    """The parameters of the compiled function ``callee`` that the code calling the compiled
    object passes (``model(x, y)``: not ``kv_cache``), there or in the functions of the project
    it is handed to (``evaluate(model, loader)``, where ``model(x, y, reduction="none")``);
    ``{"*"}`` where it may be called anyhow."""
    if uses is None:
        return frozenset({"*"})
    given, handed = uses
    passed: set[str] = set()
    for each in given:
        passed |= project.passes(CallSite("", ref, None, given=each), callee)
    for function, where in handed:
        for holder in project.callees(function, path):
            names = project.parameters(CallSite("", function, None), holder)
            name = where if isinstance(where, str) else names[where] if where < len(names) else None
            if name is None:
                return frozenset({"*"})  # (`*args`: not followed)
            for call in calls_by_caller.get(holder, ()):
                if any(callers_part(arg) == ("passed", holder[1], name) for _, arg in call.args):
                    return frozenset({"*"})  # handed on again: not followed
                if _runs_parameter(call.target, holder[1], name):
                    passed |= project.passes(call, callee)
    return frozenset(passed)


def _runs_parameter(target: Ref, function: str, name: str) -> bool:
    """``model(x)`` or ``model.forward(x)`` where ``model`` is the parameter ``name`` of ``function``."""
    return target[0] == "object" and callers_part(target[1]) == ("passed", function, name) and target[2] in ("__call__", "forward")


def _members(ref: Ref) -> tuple[Ref, ...]:
    """A container's members are each a root (``torch.compile(self.blocks[i])``)."""
    return ref[1] if ref[0] == "each" else (ref,)
