"""Per-file summary of where steps happen: functions, the calls between them, class bases
and framework hooks. Plain data, so files are analysed independently (in any process,
from a cache) and joined cheaply by :mod:`torchlint.analysis.join`.

A reference to a callee is a tuple, resolved later against the whole project:

- ``("local", key)``: a function of this file (``key`` is ``"f"``, ``"Cls.m"``, ``"f.inner"``);
- ``("method", class_key, name)``: ``self.name(...)`` inside a method of ``class_key``;
- ``("import", level, dotted)``: a name imported from another module (level > 0: relative);
- ``("star", name)``: a bare name that only a ``from m import *`` can define;
- ``("object", class_ref, name)``: method ``name`` of an instance of the class ``class_ref``
  refers to (``meter.update()``; ``criterion(x)`` is ``"__call__"``: ``forward`` first);
- ``("keywords", names)``: a decode loop's call of a model this file cannot name, given those
  keywords: the ``forward`` of the project's module class that takes them all
  (``Project.forwards_taking``; bark's ``models["text"]["model"]``);
- a class reference may also be ``("returned", factory_ref, element)``, what a factory
  returns (``model, criterion = build(args)``), or ``("passed", function_key, parameter)``,
  what the callers pass for a parameter (``CallSite.args`` records it; ``criterion(x)``
  on a parameter, ``self.matcher = matcher`` in ``__init__``).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchlint.analysis import frameworks
from torchlint.analysis.branch_members import BranchMembers
from torchlint.analysis.call_arms import call_arms
from torchlint.analysis.compiled_roots import CompiledRoots
from torchlint.analysis.function_values import valued_functions
from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.guard_shapes import is_none
from torchlint.analysis.host_consumers import feeds_environment, returned
from torchlint.analysis.host_attributes import host_attributes
from torchlint.analysis.host_returns import host_elements
from torchlint.analysis.idle_builds import idle_builds
from torchlint.analysis.literal_tests import literal
from torchlint.analysis.splat_keys import given_with_splats
from torchlint.analysis.losses import DIFFERENTIATED_RETURNS
from torchlint.analysis.multiplicity import Position, Repeat, Where
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import positional
from torchlint.analysis.patched import patched_forwards
from torchlint.analysis.project_index import import_judged, never_resolved
from torchlint.analysis.summary import _NOT_PROJECT, BY_NAME, FULL_BATCH, CallSite, FileSummary, Ref
from torchlint.analysis.summary_arguments import CallArguments, falsy_args, literal_args
from torchlint.analysis.summary_classes import ClassSummaries
from torchlint.analysis.summary_loops import LoopSummaries
from torchlint.analysis.summary_places import CallPlaces
from torchlint.analysis.summary_targets import CallTargets
from torchlint.analysis.switches import turned_switches
from torchlint.analysis.tree import FUNCTION_OR_CLASS
from torchlint.analysis.unnamed_classes import unnamed_classes
from torchlint.findings import Location

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchlint.analysis.context import FileContext

# Objects that hold what they are given as attributes (`ns.f(x)` runs the `f` it was given).
_NAMESPACES = frozenset({"types.SimpleNamespace", "argparse.Namespace"})


def function_key(ctx: FileContext, node: cst.CSTNode) -> str:
    """What a conditional finding waits for: ``Cls.m`` / ``f.inner`` (a function's dotted
    name within its file), ``Cls.m#loop2`` (a loop: see ``Loops.loop_key``) or
    ``f#none:max_len`` (the branch that runs when a caller leaves ``max_len`` out)."""
    if type(node) is cst.FunctionDef:
        return dotted_function_name(ctx.tree, node)
    if type(node) is cst.If:
        return ctx.loops.branch_key(node)
    if type(node) is cst.Param:  # holds when a per-step call passes a constant there
        function = ctx.tree.enclosing_function(node)
        return f"{dotted_function_name(ctx.tree, function) if function is not None else ''}#const:{node.name.value}"
    if type(node) is cst.Name and type(ctx.tree.parent(node)) is cst.Param:  # holds when a per-step call passes a batch it just uploaded
        function = ctx.tree.enclosing_function(node)
        return f"{dotted_function_name(ctx.tree, function) if function is not None else ''}#uploaded:{node.value}"
    return ctx.loops.loop_key(node)


# (caller key, target, how often its hot loop runs, the call, the key of the loop around it that is not hot)
_Placed = tuple[str, Ref, Where | None, cst.Call, str]


class StepSummarizer(CallArguments, LoopSummaries, CallTargets, CompiledRoots, CallPlaces, ClassSummaries, BranchMembers):
    """Builds a file's :class:`FileSummary`. Positions are asked only for the calls in hot
    loops (:meth:`hot_call_nodes`), so the engine locates them in the same codegen pass
    as the findings. Its parts: what a call refers to (``summary_targets``, over the objects
    of ``objects``), what it passes (``summary_arguments``), the loops (``summary_loops``),
    the roots of compiled code (``compiled_roots``), where each call runs (``summary_places``),
    the classes and hooks (``summary_classes``); here, the calls placed and the exports."""

    def __init__(self, ctx: FileContext, tails: frozenset[str] | None = None) -> None:
        self.ctx = ctx
        # the project's `module_tails` where the run knows its files (None: any module may exist), and the
        # parts of the imports whose sites it left unfacted for naming none (`FileSummary.skipped`)
        self.tails = tails
        self.skipped: set[str] = set()
        tree = ctx.tree
        self.functions = tree.nodes(cst.FunctionDef)
        self.keys = {id(f): function_key(ctx, f) for f in self.functions}
        self.class_keys = {id(c): self._class_key(c) for c in tree.nodes(cst.ClassDef)}
        self.relative = ctx.imports.relative
        self.star = bool(ctx.imports.stars)

    def _class_key(self, cls: cst.ClassDef) -> str:
        parts = [cls.name.value]
        for ancestor in self.ctx.tree.ancestors(cls):
            if type(ancestor) in FUNCTION_OR_CLASS:
                parts.append(ancestor.name.value)
        return ".".join(reversed(parts))

    def hot_call_nodes(self, located: bool = False) -> list[cst.Call]:
        """The calls whose positions the summary needs: those made from hot loops and those
        made by functions a framework may call per step (the step's call sites). Calls that
        may make a loop a step loop in the join (a call of an object, or of a function named
        like a step) come too when the file pays for positions anyway (``located``: it has
        findings, or the calls above): positions cost a codegen pass over the file."""
        needed = {id(call): call for caller, _, loop, call, _ in self._pending if loop is not None or caller in self._hook_candidates}
        needed.update((id(call), call) for _, _, loop, call, within in self._guarded if loop is not None or within)
        needed.update((id(call), call) for _, _, loop, call, _, _ in self._every_n if loop is not None)
        if needed or located:
            needed.update((id(call), call) for _, target, loop, call, within in self._pending if within and self._may_make_a_step(target, call))
        self._positioned = set(needed)
        return list(needed.values())

    @cached_property
    def _hook_candidates(self) -> set[str]:
        named = {key for key in self.keys.values() if "." in key and key.rsplit(".", 1)[-1] in frameworks.HOOK_METHOD_NAMES}
        return named | {hook.function for hook in self._hooks}

    @cached_property
    def _pending(self) -> list[_Placed]:
        return self._calls_placed[0]

    @cached_property
    def _guarded(self) -> list[_Placed]:
        """Calls made only under an every-N guard of a loop or function that steps no optimizer
        outside it (``if T % replay_frequency == 0: dqn.learn(mem)``): kept apart from the calls
        made every run, for the join to follow to a callee that is a training step itself."""
        return self._calls_placed[1]

    @cached_property
    def _every_n(self) -> list[tuple[str, Ref, Where | None, cst.Call, str, str]]:
        """Calls made only under an every-N guard of a loop or function that steps outside it
        too (``if step % 100 == 0: evaluate()`` in a training loop), each with the guard's words:
        what they run is every N steps, for the join to place so."""
        return self._calls_placed[2]

    @cached_property
    def _calls_placed(self) -> tuple[list[_Placed], list[_Placed], list[tuple[str, Ref, Where | None, cst.Call, str, str]]]:
        found: list[_Placed] = []
        guarded: list[_Placed] = []
        every_n: list[tuple[str, Ref, Where | None, cst.Call, str, str]] = []
        for call in self.ctx.tree.nodes(cst.Call):
            # (`self.decoder.apply(install_hooks)`: the module's method, and the function it runs)
            named = self.target(call.func, call)
            for target in (named, self.handed_function(call), self.keyword_model(call) if named is None else None):
                if target is None:
                    continue
                placed = self._placement(call)
                if target[0] == "keywords" and (placed is None or placed[1] is not Where.INFER):
                    continue  # (a model known by its keywords only where a decode loop calls it)
                if placed is None:
                    placed = self._guarded_placement(call) if target[0] != "each" else None
                    if placed is not None:
                        guarded.append((placed[0], target, placed[1], call, placed[2]))
                    elif (periodic := self._every_n_placement(call)) is not None:
                        caller, loop, within, words = periodic
                        every_n.extend((caller, each, loop, call, within, words) for each in (target[1] if target[0] == "each" else (target,)))
                    continue
                caller, loop, within = placed
                for each in target[1] if target[0] == "each" else (target,):  # a container's members
                    found.append((caller, each, loop, call, within))
            hooked = self.hooked_forward(call)
            if hooked is not None:  # a hook a module class registers on itself runs on every call of its forward too
                found.append((hooked[0], hooked[1], None, call, ""))
        return found, guarded, every_n

    def _branch(self, call: cst.Call, loop: str | None) -> str:
        """The parameter whose leaving out makes ``call`` run (``if max_len is None:``)."""
        found = self.ctx.guards.default_branch(call) if loop is None else None
        return found[1] if found is not None else ""

    _positioned: set[int] = set()  # ids of the calls `hot_call_nodes` asked positions for

    def _call_site(self, caller: str, target: Ref, loop: Where | None, call: cst.Call, within: str,
                   locate: Callable[[cst.CSTNode], Location]) -> CallSite:
        location = locate(call) if id(call) in self._positioned else None
        if self.tails is not None and never_resolved(target, self.tails):
            # A call the join cannot follow (an import that names no module of the project): it reads no more of
            # it than its place's unit (`join_generations`), so its facts and place are not found (a third of a
            # summary's time). The parts it was judged by go with the summary, for a cache read in another project.
            self.skipped.update(import_judged(target)[2].split("."))
            placed = (caller or loop is not None or within) and (target[0] != "local" or target[1] in self._function_keys)
            return CallSite(caller, target, loop, location, within=within, unit=self._unit(call) if placed else _NO_PLACE[2])
        facts = self._call_facts(call)
        # Module-level code outside loops runs once: the join reads such a call only for what it
        # passes (objects, device and host arguments), never where it sits in a step (its place).
        # Nor does it read the place of a call it can never follow (`Project.callees`): a `local`
        # name that is no function of this file (a class's construction, `Linear(d, d)`).
        placed = (caller or loop is not None or within) and (target[0] != "local" or target[1] in self._function_keys)
        place = self._place(call) if placed else _NO_PLACE
        mode, run_flags = self.ctx.guards.run_tests(call) if caller else (False, ())
        return CallSite(caller, target, loop, location, facts["args"],
                        facts["tensors"], within, facts["given"], self._branch(call, loop), facts["constants"], *place[:3],
                        uploads=facts["uploads"], falsy=facts["falsy"], literals=facts["literals"], forwards=facts["forwards"], feeds_env=facts["feeds_env"],
                        returned=facts["returned"], host_args=facts["host_args"], hosts_if=facts["hosts_if"], own_params=facts["own_params"], own_settings=facts["own_settings"], kept_params=facts["kept_params"], devices=facts["devices"],
                        devices_if=facts["devices_if"], opt_in=self.ctx.guards.opt_in(call, optional=True, required=True) or "" if loop is None else "",
                        lists=facts["lists"], results=facts["results"], elements=facts["elements"], turn=self.ctx.places.turn_of(call) if within and placed else -1,
                        switch=self.ctx.guards.switch_of(call) if caller else None, guard=place[3], distributed_only=place[4],
                        flags=(self.member_flags(call, target) or self.branch_flags(call, target)) if caller else (),
                        run_mode=bool(placed) and mode, run_flags=run_flags,
                        maybe_none=facts["maybe_none"],
                        evaluates=bool(loop is not None or within) and self.ctx.places.evaluates(call),
                        arms=facts["arms"], hot_loop=facts["hot_loop"] if loop is not None else -1, node=facts["node"],
                        through_cls=target[0] == "local" and type(call.func) is cst.Name and call.func.value == "cls")

    def _call_facts(self, call: cst.Call) -> dict[str, Any]:
        """What a call site records of the call alone (not of its target, loop or caller): found
        once per call, though a container's members make one site each, and the device
        arguments once, though whether it may pass a tensor asks them too."""
        known = self._facts.get(id(call))
        if known is None:
            args = self._argument_classes(call)
            devices, devices_if, results = self._device_args(call)
            elements = self._element_args(call)
            host_args, hosts_if = self._host_args(call)
            known = self._facts[id(call)] = {
                "args": args, "tensors": bool(devices or devices_if or elements) or self._may_pass_values(call),
                "given": None if self.partial_arguments(call) else given_with_splats(self.ctx, call), "constants": self._constant_args(call),
                "uploads": self._uploaded_args(call), "falsy": falsy_args(call), "literals": literal_args(call), "forwards": self._forwards(call),
                "feeds_env": self._steps_env and feeds_environment(self.ctx, call),
                "returned": returned(self.ctx, call), "own_params": self._forwarded_args(call), "own_settings": self._own_settings(call), "kept_params": self._kept_params(call),
                "maybe_none": self._none_settings(call),
                "devices": devices, "devices_if": devices_if, "lists": self._listed_args(call),
                "results": results, "elements": elements, "host_args": host_args, "hosts_if": hosts_if,
                "arms": call_arms(self.ctx.tree, call), "hot_loop": self.ctx.tree.index(hot) if (hot := self.ctx.loops.local_hot_loop(call)) is not None else -1, "node": self.ctx.tree.index(call)}
        return known

    @cached_property
    def _function_keys(self) -> frozenset[str]:
        return frozenset(self.keys.values())  # FileSummary.functions: what a `local` call may run

    @cached_property
    def _facts(self) -> dict[int, dict[str, Any]]:
        return {}  # id(call) -> _call_facts (the calls live as long as the summarizer)

    def summary(self, path: str, locate: Callable[[cst.CSTNode], Location]) -> FileSummary:
        calls = tuple(self._call_site(*pending, locate) for pending in self._pending)
        guarded = tuple(self._call_site(*pending, locate) for pending in self._guarded)
        every_n = tuple(CallSite(caller, target, loop, locate(call) if id(call) in self._positioned else None, within=within, every=words)
                        for caller, target, loop, call, within, words in self._every_n)
        stars = tuple(self.ctx.imports.stars)
        return FileSummary(
            path, tuple(self.keys.values()), self._classes(), calls, self._hooks, stars, self._exports(), self._trains(),
            host_only=self.ctx.imports_torch() and self.ctx.devices.host_only(), names_device=self.ctx.devices.names_device(),
            trains_anywhere=self._trains_anywhere(), object_sets=tuple(sorted(self.ctx.guards.set_on_objects())),
            samples_anywhere=any(self.ctx.loops.is_hot(loop) and self.ctx.loops.where(loop) is Where.INFER
                                 for loop in (*self.ctx.tree.nodes(cst.For), *self.ctx.tree.nodes(cst.While))),
            params=tuple((self.keys[id(f)], positional(f)) for f in self.functions),
            returns=self._returns(), loops=self._loops(), one_step=self._one_step(), one_step_called=self._one_step_called(),
            host_results=frozenset(self.keys[id(f)] for f in self.functions if self.ctx.devices.returns_host(f)),
            host_helpers=tuple((self.keys[id(f)], *made) for f in self.functions if (made := self.ctx.uploads.helper_device(f)) is not None),
            host_attributes=host_attributes(self.ctx, self.class_keys),
            device_results=self._device_results(),
            compiled=self.compiled_roots, not_compiled=self.not_compiled, compiled_calls=self.compiled_calls, compiled_guards=self.compiled_guards,
            compile_calls=self.compile_calls, settings=self.ctx.constants.setting_values(),
            assigned=self.ctx.constants.assigned_ints(),
            switches=turned_switches(self.ctx), by_name=self._builds_by_name(),
            registered=tuple(self.class_keys[id(c)] for c in self.ctx.tree.nodes(cst.ClassDef) if c.decorators), unnamed=unnamed_classes(self.ctx),
            patched=patched_forwards(self.ctx, self.keys), guarded=guarded, every_n=every_n, host_returns=self._host_returns(),
            idle_builds=idle_builds(self.ctx, self.target, self.class_keys), off_defaults=self._off_defaults(), literal_defaults=self._literal_defaults(),
            unfollowed=self.unfollowed_passes({id(placed[3]) for placed in self._pending}, self.keys),
            valued=valued_functions(self.ctx), skipped=frozenset(self.skipped), **self._drained_ends(),
        )

    def _drained_ends(self) -> dict[str, Any]:
        """``FileSummary.drained_ends`` and ``drained_tails``: the functions whose run ends drained, and those whose
        tail is a call of another file's function that decides it (``DrainedEnds``)."""
        places = self.ctx.places
        ends = frozenset(self.keys[id(f)] for f in self.functions if places.ends_drained(f))
        tails = tuple((self.keys[id(f)], ref) for f in self.functions if (call := places.drained_tail_call(f)) is not None
                      and (ref := self.target(call.func, call)) is not None)
        return {"drained_ends": ends, "drained_tails": tails}

    def _off_defaults(self) -> tuple[tuple[str, str, bool], ...]:
        """``FileSummary.off_defaults``: each function's parameters that default off, never bound again."""
        found = []
        for function in self.functions:
            off = self.ctx.guards.off_by_default(function.body)
            if off:
                params = (*function.params.params, *function.params.kwonly_params)
                found.extend((self.keys[id(function)], p.name.value, is_none(p.default)) for p in params if p.name.value in off)
        return tuple(found)

    def _literal_defaults(self) -> tuple[tuple[str, str, object], ...]:
        """``FileSummary.literal_defaults``: each function's parameters defaulting to a literal, never bound again."""
        return tuple((self.keys[id(function)], p.name.value, found[1])
                     for function in self.functions for p in (*function.params.params, *function.params.kwonly_params)
                     if p.default is not None and (found := literal(p.default)) is not None
                     and all(b.kind == "param" for b in self.ctx.bindings.lookup(p.name.value, function.body)))

    def _device_results(self) -> tuple[tuple[str, tuple[Ref, ...]], ...]:
        """Each function whose every return is a device tensor (``Devices.returns_device``), with the
        targets of the calls among them the join must find to be modules' (``FileSummary.device_results``)."""
        found = []
        for function in self.functions:
            calls = self.ctx.devices.returns_device(function)
            targets = tuple(self.target(call.func, call) for call in calls) if calls is not None else None
            if targets is not None and None not in targets:
                found.append((self.keys[id(function)], targets))
        return tuple(found)  # type: ignore[arg-type]

    def _builds_by_name(self) -> bool:
        """Does this file build objects from names at run time (a config's ``target`` string)?"""
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            func = call.func
            if ctx.qname(func) in BY_NAME:
                return True
            if type(func) is cst.Call and type(func.func) is cst.Name and func.func.value in ("getattr", "globals", "locals") \
                    and not (func.args and (dotted(func.args[0].value) == "self" or self._library_module(func.args[0].value))):
                return True  # `getattr(module, name)(**params)`
            if type(func) is cst.Subscript and type(func.value) is cst.Call and dotted(func.value.func) in ("globals", "locals", "vars"):
                return True  # `globals()[name](...)`
        return False

    def _library_module(self, expr: cst.BaseExpression) -> bool:
        """``nn`` in ``getattr(nn, name)(...)``: a library's module, whose names build none of the project's classes."""
        qualified = self.ctx.imports.qualify(expr) if type(expr) in (cst.Name, cst.Attribute) else None
        return qualified is not None and qualified.split(".")[0] in _NOT_PROJECT

    def _place(self, call: cst.Call) -> tuple[tuple[tuple[str, Repeat], ...], Position | None, str, str, bool]:
        """The loops around ``call`` within its step (its hot loop, else its function),
        whether device work follows it there, what its hot loop's iteration is, the words of
        an every-2nd-step or multi-process-only guard around it there, and whether one is multi-process-only."""
        places = self._places.get(id(call))
        if places is None:
            ctx = self.ctx
            hot = ctx.loops.local_hot_loop(call)
            # module-level code runs per step only in a loop the join makes a step loop: its step is that loop
            stop = hot or ctx.tree.enclosing_function(call) or ctx.loops.statement_loop(call)
            places = self._places[id(call)] = (ctx.places.call_repeats(call, stop), ctx.places.position(call, stop), self._unit(call),
                                               *(ctx.guards.step_guard(call, stop=stop) if stop is not None else ("", False)))
        return places

    def _unit(self, call: cst.Call) -> str:
        """What one iteration of the hot loop around ``call`` is (``CallSite.unit``)."""
        hot = self.ctx.loops.local_hot_loop(call)
        return (FULL_BATCH if self.ctx.loops.full_batch(hot) else self.ctx.places.step_unit(hot)) if hot is not None else "step"

    @cached_property
    def _places(self) -> dict[int, tuple[tuple[tuple[str, Repeat], ...], Position | None, str, str]]:
        return {}  # a call with several targets (a container's members) is placed once

    def _exports(self) -> tuple[tuple[str, Ref], ...]:
        """Names this module re-exports by importing them (``from .metrics import accuracy``
        in a package ``__init__``), so ``from pkg import accuracy`` resolves through it."""
        found: list[tuple[str, Ref]] = [(name, ("import", level, target)) for name, (level, target) in self.relative.items()]
        for name, target in self.ctx.imports.module_level.items():
            if target.split(".")[0] not in _NOT_PROJECT and name not in self.relative:
                found.append((name, ("import", 0, target)))
        aliases = [(name, ref) for name, assign in self._module_aliases.items()
                   if name not in self.relative and (ref := self._function_ref(assign.value, assign)) is not None and ref[0] in ("local", "import")]
        return (*found, *aliases, *self._namespace_members(), *self.exported_tables())

    def _namespace_members(self) -> list[tuple[str, Ref]]:
        """``flash_attn = SimpleNamespace(flash_attn_func=flash_attn_func, ...)`` at module level:
        ``("flash_attn.flash_attn_func", ("local", "flash_attn_func"))``, so another module's
        ``flash_attn.flash_attn_func(q, k, v)`` runs the function the namespace holds."""
        found: list[tuple[str, Ref]] = []
        for statement in self.ctx.tree.module.body:
            small = statement.body[0] if type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 else None
            if type(small) is not cst.Assign or len(small.targets) != 1 or type(small.targets[0].target) is not cst.Name \
                    or type(small.value) is not cst.Call or self.ctx.qname(small.value.func) not in _NAMESPACES:
                continue
            for arg in small.value.args:
                ref = self.target(arg.value, small) if arg.keyword is not None and type(arg.value) is cst.Name else None
                if ref is not None and ref[0] in ("local", "import"):
                    found.append((f"{small.targets[0].target.value}.{arg.keyword.value}", ref))
        return found

    def _trains_anywhere(self) -> bool:
        """A backward or an optimizer step anywhere (module level too), or a framework's training
        hook (Lightning's ``training_step``, whose loss the framework backpropagates)."""
        ctx = self.ctx
        return any(hook.where is Where.TRAIN for hook in self._hooks) \
            or any(f.name.value in DIFFERENTIATED_RETURNS for f in self.functions) \
            or any(ctx.loops.is_step_call(call) for call in ctx.method_calls(("backward", "step")))

    def _host_returns(self) -> tuple[tuple[str, int], ...]:
        """(function key, element) of what this file's functions return made on the host: only in
        a file that imports NumPy or reads a list out of a tensor (a Python number alone is never
        read as a tensor; a list of them may be handed to a library that reads a tensor there,
        `pack_padded_sequence(x, lengths)`)."""
        if not any(m.split(".")[0] == "numpy" for m in self.ctx.imports.modules) and not self.ctx.method_calls("tolist"):
            return ()
        return tuple((self.keys[id(f)], element) for f in self.functions for element in host_elements(self.ctx, f))

# CallSite's defaults: repeats, position, unit, guard, distributed_only
_NO_PLACE: tuple[tuple[tuple[str, Repeat], ...], Position | None, str, str, bool] = ((), None, "step", "", False)
