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
- a class reference may also be ``("returned", factory_ref, element)``, what a factory
  returns (``model, criterion = build(args)``), or ``("passed", function_key, parameter)``,
  what the callers pass for a parameter (``CallSite.args`` records it; ``criterion(x)``
  on a parameter, ``self.matcher = matcher`` in ``__init__``).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis import frameworks
from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.host_arguments import may_be_tensor, python_values
from torchlint.analysis.host_consumers import feeds_environment, steps_an_environment
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import FUNCTION_OR_CLASS
from torchlint.analysis.compiled_roots import CompiledRoots, given_arguments
from torchlint.analysis.dataset_work import dataset_work
from torchlint.analysis.loader_classes import loader_sets
from torchlint.analysis.frozen import class_weights
from torchlint.analysis.prefix import cache_methods, keeps_a_cache
from torchlint.analysis.members import CONTAINERS
from torchlint.analysis.object_shapes import positional
from torchlint.analysis.objects import _COMPILERS, ObjectRefs
from torchlint.analysis.impact import Position, Repeat, Where
from torchlint.analysis.positions import plain_code
from torchlint.analysis.patched import patched_forwards
from torchlint.analysis.switches import turned_switches
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, BY_NAME, FULL_BATCH, CallSite, ClassSummary, FileSummary, Hook, LoopSummary, Ref
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


class StepSummarizer(ObjectRefs, CompiledRoots):
    """Builds a file's :class:`FileSummary`. Positions are asked only for the calls in hot
    loops (:meth:`hot_call_nodes`), so the engine locates them in the same codegen pass
    as the findings."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
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
    def _calls_placed(self) -> tuple[list[_Placed], list[_Placed]]:
        found: list[_Placed] = []
        guarded: list[_Placed] = []
        for call in self.ctx.tree.nodes(cst.Call):
            target = self.target(call.func, call)
            if target is None:
                continue
            placed = self._placement(call)
            if placed is None:
                placed = self._guarded_placement(call) if target[0] != "each" else None
                if placed is not None:
                    guarded.append((placed[0], target, placed[1], call, placed[2]))
                continue
            caller, loop, within = placed
            for each in target[1] if target[0] == "each" else (target,):  # a container's members
                found.append((caller, each, loop, call, within))
        return found, guarded

    def _constant_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments that hold the same value on every step (``self.alphas`` set in
        ``__init__``, a module constant): a callee that uploads them uploads a constant."""
        found: list[int | str] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            if _may_be_constant(arg.value) and self.ctx.uploads.same_every_step(arg.value, call, None):
                found.append(arg.keyword.value if arg.keyword is not None else position)
        return tuple(found)

    def _uploaded_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments the caller copied from the host just before (``caplens = caplens.to(device)``
        of a loader batch): a callee that reads them back to the host makes a round trip."""
        found: list[int | str] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            if self.ctx.uploads.uploaded_batch(arg.value, call):
                found.append(arg.keyword.value if arg.keyword is not None else position)
        return tuple(found)

    @cached_property
    def _steps_env(self) -> bool:
        return steps_an_environment(self.ctx)  # a file that steps no environment: no call's result feeds one (asked once)

    def _host_args(self, call: cst.Call, target: Ref) -> tuple[int | str, ...]:
        """For a construction (``Layer(dev, m, n)``: a CamelCase name): the arguments that are
        host values (``n`` from ``zip(dims[:-1], dims[1:])`` over ``torch.LongTensor`` lists)."""
        if target[0] not in ("import", "local") or not str(target[-1]).rsplit(".", 1)[-1][:1].isupper():
            return ()
        devices, found = self.ctx.devices, []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value = arg.value
            if type(value) in (cst.Integer, cst.Float, cst.SimpleString) or devices.moved_to_host(value, call):
                found.append(arg.keyword.value if arg.keyword is not None else position)
        return tuple(found)

    def _forwards(self, call: cst.Call) -> tuple[int | str, ...] | None:
        """For ``self.net(x, flag=True, **kwargs)`` where ``kwargs`` is the caller's own ``**``
        parameter: the arguments passed here and the keys the caller sets in ``kwargs``
        (``kwargs.update(looped=True)``, ``kwargs["looped"] = True``)."""
        stars = [a for a in call.args if a.star]
        if len(stars) != 1 or stars[0].star != "**" or type(stars[0].value) is not cst.Name:
            return None
        function = self.ctx.tree.enclosing_function(call)
        star = function.params.star_kwarg if function is not None else None
        if not isinstance(star, cst.Param):
            return None
        names = {stars[0].value.value}
        if star.name.value not in names:  # `chunk_kwargs = kwargs.copy()`: the same keys
            binding = self.ctx.bindings.reaching(stars[0].value.value, call)
            value = binding.value if binding is not None and binding.kind == "assign" else None
            copied = value.func.value if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "copy" \
                else value.args[0].value if type(value) is cst.Call and dotted(value.func) == "dict" and len(value.args) == 1 else None
            if dotted(copied) != star.name.value:
                return None
            names.add(star.name.value)
        found: list[int | str] = [a.keyword.value if a.keyword is not None else i for i, a in enumerate(call.args)
                                  if not a.star and not _is_none(a.value)]
        for node in self.ctx.tree.descendants(function):  # type: ignore[arg-type]
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("update", "setdefault") \
                    and type(node.func.value) is cst.Name and node.func.value.value in names:
                found.extend(a.keyword.value for a in node.args if a.keyword is not None)
                found.extend(a.value.evaluated_value for a in node.args[:1] if node.func.attr.value == "setdefault" and type(a.value) is cst.SimpleString)
            elif type(node) is cst.Assign:
                for target in node.targets:
                    t = target.target
                    if type(t) is cst.Subscript and type(t.value) is cst.Name and t.value.value in names and len(t.slice) == 1 \
                            and type(t.slice[0].slice) is cst.Index and type(t.slice[0].slice.value) is cst.SimpleString:
                        found.append(t.slice[0].slice.value.evaluated_value)
        return tuple(found)

    def _device_args(self, call: cst.Call) -> tuple[tuple[int | str, ...], tuple[tuple[int | str, tuple[str, ...]], ...]]:
        """Arguments known to live on the device (``sigmas`` from ``get_sigmas_karras(...,
        device=device)``): a callee that reads them into Python waits for the device. Then those
        on the device where the caller's parameters are (``z = self.enc_q(y)`` in
        ``forward(self, y)``): the join follows them to the callers (``Steps.device_params``)."""
        found: list[int | str] = []
        conditional: list[tuple[int | str, tuple[str, ...]]] = []
        device_if = self.ctx.devices.device_if
        for position, arg in enumerate(call.args):
            if arg.star == "*":
                break  # positions after `*args` are unknown (`**kwargs` fills no earlier one)
            if arg.star or _is_none(arg.value) or type(arg.value) in (cst.Integer, cst.Float, cst.SimpleString):
                continue
            where = arg.keyword.value if arg.keyword is not None else position
            params = device_if(arg.value, call)
            if params == ():
                found.append(where)
            elif params:
                conditional.append((where, params))
        return tuple(found), tuple(conditional)

    def _devices_of(self, call: cst.Call) -> dict[str, tuple]:  # type: ignore[type-arg]
        devices, devices_if = self._device_args(call)
        return {"devices": devices, "devices_if": devices_if}

    def _forwarded_args(self, call: cst.Call) -> tuple[tuple[int | str, str], ...]:
        """Arguments that are the calling function's own parameters, not rebound before the
        call (``get_mask(x, lengths)`` in ``forward(self, x, lengths)``; ``h, cache =
        self.attn(x, cache)`` rebinds it after): an upload its caller made reaches the callee too."""
        found: list[tuple[int | str, str]] = []
        bindings = self.ctx.bindings
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value = arg.value
            if type(value) is not cst.Name:
                continue
            bound = bindings.lookup(value.value, call)
            if sum(b.kind == "param" for b in bound) == 1 and all(b.kind == "param" or self._bound_after(b.node, call) for b in bound):
                found.append((arg.keyword.value if arg.keyword is not None else position, value.value))
        return tuple(found)

    def _bound_after(self, binding: cst.CSTNode, call: cst.Call) -> bool:
        """Is ``binding`` made after ``call`` in source order, outside any loop around the call
        (where a later iteration would pass what it bound)?"""
        tree = self.ctx.tree
        after = tree.index(binding) > tree.index(call) or tree.is_inside(call, binding)  # (`h, cache = ...` holds the call)
        return after and not any(tree.is_inside(binding, loop) for loop in self.ctx.loops.enclosing_loops(call))


    def _branch(self, call: cst.Call, loop: str | None) -> str:
        """The parameter whose leaving out makes ``call`` run (``if max_len is None:``)."""
        found = self.ctx.guards.default_branch(call) if loop is None else None
        return found[1] if found is not None else ""

    _positioned: set[int] = set()  # ids of the calls `hot_call_nodes` asked positions for

    def _call_site(self, caller: str, target: Ref, loop: Where | None, call: cst.Call, within: str,
                   locate: Callable[[cst.CSTNode], Location]) -> CallSite:
        return CallSite(caller, target, loop, locate(call) if id(call) in self._positioned else None, self._argument_classes(call),
                        self._may_pass_tensors(call), within, None if self.partial_arguments(call) else given_arguments(call),
                        self._branch(call, loop), self._constant_args(call), *self._place(call), uploads=self._uploaded_args(call),
                        falsy=_falsy_args(call), forwards=self._forwards(call), feeds_env=self._steps_env and feeds_environment(self.ctx, call),
                        host_args=self._host_args(call, target), own_params=self._forwarded_args(call), **self._devices_of(call),
                        opt_in=self.ctx.guards.opt_in(call, optional=True, required=True) or "" if loop is None else "")

    def summary(self, path: str, locate: Callable[[cst.CSTNode], Location]) -> FileSummary:
        calls = tuple(self._call_site(*pending, locate) for pending in self._pending)
        guarded = tuple(self._call_site(*pending, locate) for pending in self._guarded)
        stars = tuple(self.ctx.imports.stars)
        return FileSummary(
            path, tuple(self.keys.values()), self._classes(), calls, self._hooks, stars, self._exports(), self._trains(),
            host_only=self.ctx.imports_torch() and self.ctx.devices.host_only(), names_device=self.ctx.devices.names_device(),
            params=tuple((self.keys[id(f)], positional(f)) for f in self.functions),
            returns=self._returns(), loops=self._loops(), one_step=self._one_step(),
            host_returns=frozenset(self.keys[id(f)] for f in self.functions if self.ctx.devices.returns_host(f)),
            compiled=self.compiled_roots, not_compiled=self.not_compiled, compiled_calls=self.compiled_calls, settings=self.ctx.constants.setting_ints(),
            switches=turned_switches(self.ctx), by_name=self._builds_by_name(),
            registered=tuple(self.class_keys[id(c)] for c in self.ctx.tree.nodes(cst.ClassDef) if c.decorators),
            patched=patched_forwards(self.ctx, self.keys), guarded=guarded,
        )

    def _builds_by_name(self) -> bool:
        """Does this file build objects from names at run time (a config's ``target`` string)?"""
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            func = call.func
            if ctx.qname(func) in BY_NAME:
                return True
            if type(func) is cst.Call and type(func.func) is cst.Name and func.func.value in ("getattr", "globals", "locals") \
                    and not (func.args and dotted(func.args[0].value) == "self"):
                return True  # `getattr(module, name)(**params)`
            if type(func) is cst.Subscript and type(func.value) is cst.Call and dotted(func.value.func) in ("globals", "locals", "vars"):
                return True  # `globals()[name](...)`
        return False

    def _place(self, call: cst.Call) -> tuple[tuple[tuple[str, Repeat], ...], Position | None, str]:
        """The loops around ``call`` within its step (its hot loop, else its function),
        whether device work follows it there, and what its hot loop's iteration is."""
        places = self._places.get(id(call))
        if places is None:
            ctx = self.ctx
            hot = ctx.loops.local_hot_loop(call)
            # module-level code runs per step only in a loop the join makes a step loop: its step is that loop
            stop = hot or ctx.tree.enclosing_function(call) or ctx.loops.statement_loop(call)
            unit = (FULL_BATCH if ctx.loops.full_batch(hot) else ctx.places.step_unit(hot)) if hot is not None else "step"
            places = self._places[id(call)] = (ctx.places.call_repeats(call, stop), ctx.places.position(call, stop), unit)
        return places

    @cached_property
    def _places(self) -> dict[int, tuple[tuple[tuple[str, Repeat], ...], Position | None, str]]:
        return {}  # a call with several targets (a container's members) is placed once

    def _loops(self) -> tuple[LoopSummary, ...]:
        """The ``for``/``while`` loops that are not hot here and not inside a hot loop. How
        often one runs and what it goes over are found only where the join reads them: for a
        loop that may step and the loops around it (None and "" elsewhere)."""
        ctx, loops, found = self.ctx, self.ctx.loops, []
        kept = []
        for loop in sorted((*ctx.tree.nodes(cst.For), *ctx.tree.nodes(cst.While)), key=ctx.tree.index):
            if loops.is_hot(loop) or loops.local_hot_loop(loop) is not None:
                continue
            function = ctx.tree.enclosing_function(loop)
            kept.append((loop, function, id(loop) in self._candidate_loops and self._may_step(loop, function)))
        asked: set[int] = set()
        for loop, _, may_step in kept:
            outer: cst.CSTNode | None = loop if may_step else None
            while outer is not None and id(outer) not in asked:
                asked.add(id(outer))
                outer = loops.statement_loop(outer)
        for loop, function, may_step in kept:
            outer = loops.statement_loop(loop)
            parent = loops.loop_key(outer) if outer is not None else (self.keys[id(function)] if function is not None else "")
            where, over = (loops.where(loop), ctx.places.repeat_of(loop).kind) if id(loop) in asked else (None, "")
            found.append(LoopSummary(loops.loop_key(loop), parent, where, may_step, over, type(loop) is cst.While,
                                     self._forward_of(loop, function) if may_step else "", may_step and self._over_batches(loop)))
        return tuple(found)

    def _over_batches(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` go over a loader's batches: a DataLoader, or an iterable or target named
        for them (``for i, testBatch in enumerate(test_ld)``, ``for batch in batches``)?"""
        loops = self.ctx.loops
        iterable = loops.iterated_expression(loop)
        if iterable is None:
            return False
        if loops.loader_of(iterable, loop) is not None:
            return True
        names = " ".join(plain_code(self.ctx.module, part).lower() for part in (iterable, loop.target)) if type(loop) is cst.For else ""
        return any(word in names for word in ("batch", "loader", "_ld", "_dl"))

    def _forward_of(self, loop: cst.CSTNode, function: cst.FunctionDef | None) -> str:
        """The class whose ``forward`` runs ``loop``, when this file cannot tell it is a module
        (its base is in another file): the join makes it no step loop if the class is one."""
        if function is None or not self.ctx.loops.in_class_forward(function) or self.ctx.loops.decodes(loop):
            return ""
        cls = self.ctx.tree.enclosing_class(function)
        return self.class_keys[id(cls)] if cls is not None else ""

    @cached_property
    def _candidate_loops(self) -> set[int]:
        """Loops whose own body makes a call that may make it a step loop in the join."""
        ctx, found = self.ctx, set()
        for _, target, loop, call, within in self._pending:
            if within and self._may_make_a_step(target, call):
                inner = ctx.loops.statement_loop(call)
                if inner is not None:
                    found.add(id(inner))
        return found

    def _may_make_a_step(self, target: Ref, call: cst.Call) -> bool:
        """A call that may make its loop a step loop (:func:`_may_make_a_step`), or a call of a
        method its class defines (``self._process_batch(points)``, which runs the model through
        ``self.predictor``): the join decides whether it runs a model."""
        return _may_make_a_step(target) or target[0] == "method" and self.ctx.functions.called(call, None) is not None

    def _may_step(self, loop: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Can the join make this loop a step loop? Not one that runs at most once, not a
        loop in a ``forward`` or a method a module's forward calls (it runs within the step:
        per step when ``forward`` is; a generator module's decode loop is one), not a loop that builds every model it runs (a demo
        over configurations), not one around an epoch loop or a decode loop, and not a loop over the layers an
        object keeps (``for layer in self.layers``)."""
        loops = self.ctx.loops
        if loops.runs_once(loop) or loops.builds_its_models(loop) or function is not None and function.name.value == "forward" or loops.within_forward(loop):
            return False
        if self.ctx.loops.around_epochs(loop):
            return False  # `for split in range(n): ... for epoch in t:`: each iteration a whole run, its own calls once per run
        if loops.around_decoding(loop):
            return False  # `for i in range(num_samples): generate(...)`: each iteration a whole generation, whose token loop is the step
        iterable = loop.iter if type(loop) is cst.For else None
        return not (iterable is not None and _over_own_attribute(iterable)) and not self._runs_own_layers(loop, function)

    def _runs_own_layers(self, loop: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Is ``loop`` in a method of a module class of this file (one its ``forward`` may not
        call: iSTFTNet's ``Generator.fw_phase``), running only the module's own layers
        (``self.resblocks[k](x, s)``, ``self.ups[i](x)``) with no backward or optimizer step? It
        is part of the model's computation, not a step of its own (taken for one, the file would
        count as reached by a step, and its ``forward`` not as a model run on every call)."""
        cls = self.ctx.tree.enclosing_class(function) if function is not None else None
        if cls is None or not self.ctx.is_module_class(cls.name.value) or self.ctx.loops.decodes(loop):
            return False
        loops = self.ctx.loops
        if any(loops.is_step_call(call) and not _own_layer(call) or loops._calls_a_trainer(call) for call in loops.loop_calls(loop)):
            return False  # a model of another object, a backward, an optimizer step: a loop that may step
        inside = self.ctx.tree.is_inside
        stepping = [call for _, target, _, call, within in self._pending if within and self._may_make_a_step(target, call) and inside(call, loop)]
        return bool(stepping) and all(_own_layer(call) and self.ctx.functions.called(call, None) is None for call in stepping)

    def _one_step(self) -> tuple[str, ...]:
        """Functions that make one whole training step (of those that train at all)."""
        ctx = self.ctx
        functions = {id(f): f for call in ctx.method_calls(("backward", "step")) if (f := ctx.tree.enclosing_function(call)) is not None}
        return tuple(sorted(self.keys[key] for key, f in functions.items() if ctx.loops.makes_one_step(f)))

    def _may_pass_tensors(self, call: cst.Call) -> bool:
        """May ``call`` hand its callee a tensor, for a read under ``isinstance(v, torch.Tensor)``
        there (``Conditional.needs_tensor``)? An argument known to live on the device (or where
        the caller's parameters are) says yes; so does one that may be a tensor
        (``host_arguments.may_be_tensor``: computed in place, or a name bound to such a value or a
        parameter), and a container handed on with ``*``/``**`` not known to hold Python values
        (``**loss_dict`` of losses). A rate read from a schedule (``lr = lr_schedule[it]``) and
        floats read with ``.item()`` are not (dinov2's ``metric_logger.update(lr=lr)``,
        ``update(total_loss=losses_reduced, **loss_dict_reduced)``)."""
        devices, devices_if = self._device_args(call)
        if devices or devices_if:
            return True
        return any(not python_values(self.ctx, arg.value, call) if arg.star else may_be_tensor(self.ctx, arg.value, call) for arg in call.args)

    def _trains(self) -> tuple[str, ...]:
        ctx, found = self.ctx, set()
        for call in ctx.method_calls(("backward", "step")):
            function = ctx.tree.enclosing_function(call)
            if function is not None and ctx.loops.is_step_call(call):
                found.add(self.keys[id(function)])
        return tuple(sorted(found))

    def _exports(self) -> tuple[tuple[str, Ref], ...]:
        """Names this module re-exports by importing them (``from .metrics import accuracy``
        in a package ``__init__``), so ``from pkg import accuracy`` resolves through it."""
        found: list[tuple[str, Ref]] = [(name, ("import", level, target)) for name, (level, target) in self.relative.items()]
        for name, target in self.ctx.imports.module_level.items():
            if target.split(".")[0] not in _NOT_PROJECT and name not in self.relative:
                found.append((name, ("import", 0, target)))
        return (*found, *self._namespace_members())

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

    # --- where a call runs -----------------------------------------------------------
    def _placement(self, call: cst.Call) -> tuple[str, Where | None, str] | None:
        """(caller key, how often its hot loop runs or None, key of the loop around it that is not hot or
        ""), or None when the call does not run per caller run (module-level code outside
        loops, rare branches)."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(call)
        caller = self.keys[id(function)] if function is not None else ""
        if ctx.in_tests(call):
            return caller, None, ""  # a test's loop runs a library on toy inputs: no training step
        loop = None  # the innermost `for`/`while` around it
        for each in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(each):
                if ctx.guards.rare(call, stop=each):
                    return None  # every N steps, or a first-pass branch
                return caller, ctx.loops.where(each), ""
            if loop is None and (type(each) is cst.For or type(each) is cst.While):
                loop = each
        # Not in a hot loop: a loop around it may still be a step loop (the join decides).
        if function is None and loop is None:
            # module-level code runs once: kept only for the objects it passes (`train_epoch(model, ...)`)
            return ("", None, "") if call.args else None
        if ctx.guards.rare(call, stop=function or loop):
            return None
        return caller, None, ctx.loops.loop_key(loop) if loop is not None else ""

    def _guarded_placement(self, call: cst.Call) -> tuple[str, Where | None, str] | None:
        """:meth:`_placement` of a call that only an every-N guard keeps from running every step,
        in a loop or function that makes no optimizer step outside that guard
        (``Guards.may_guard_a_step``); None for any other call."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(call)
        if ctx.in_tests(call):
            return None
        loop = None
        for each in ctx.loops.enclosing_loops(call):
            if ctx.loops.is_hot(each):
                if not ctx.guards.may_guard_a_step(call, stop=each):
                    return None
                return self.keys[id(function)] if function is not None else "", ctx.loops.where(each), ""
            if loop is None and (type(each) is cst.For or type(each) is cst.While):
                loop = each
        if function is None and loop is None or not ctx.guards.may_guard_a_step(call, stop=function or loop):
            return None
        return self.keys[id(function)] if function is not None else "", None, ctx.loops.loop_key(loop) if loop is not None else ""

    # --- what a call refers to ---------------------------------------------------------
    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        ctx = self.ctx
        func_type = type(func)  # exact types: libcst's ABCs make a failing isinstance slow
        if func_type is cst.Name:
            local = self._local_function(func.value, at)
            if local is not None:
                return ("local", local)
            if func.value in self._module_classes:
                return ("local", self._module_classes[func.value])  # a constructor: its arguments matter
            if func.value in self._function_applies:
                return ("method", self._function_applies[func.value], "forward")  # `attention = Attention.apply`
            if func.value in self.relative:
                level, name = self.relative[func.value]
                return ("import", level, name)
            qualified = ctx.imports.qualify(func)
            if qualified is not None:
                return None if qualified.split(".")[0] in _NOT_PROJECT else ("import", 0, qualified)
            if func.value in _BUILTINS:
                return None
            own = self._own_class(func, at)
            if own is not None:  # `cls(encoder, decoder)` in a classmethod: the class's constructor
                return ("local", own)
            if func.value == "self":  # `self(x)` in `training_step`: the module's own forward
                cls = ctx.tree.enclosing_class(at)
                return ("object", ("local", self.class_keys[id(cls)]), "__call__") if cls is not None else None
            constructed = self.constructed(func, at)
            if constructed is not None:  # `execute_type(layers)`: the constructor of each class it may name
                return constructed
            compiled = self._compiled_alias(func, at)
            if compiled is not None:
                return compiled
            owner = self._instance_class(func, at)
            if owner is not None:
                return _object_call(owner, "__call__")  # a module's forward, an object's __call__
            param = self._parameter(func, at)
            if param is not None:
                return ("object", ("passed", *param), "__call__")  # `criterion(out, y)`: what the callers pass
            picked = self._picked_function(func, at)
            if picked is not None:
                return picked
            if self.star and func.value not in _BUILTINS:
                return ("star", func.value)
            return None
        if func_type is cst.Attribute:
            receiver = func.value
            if type(receiver) is cst.Call and type(receiver.func) is cst.Name and receiver.func.value == "super" and not receiver.args:
                cls = ctx.tree.enclosing_class(at)  # `super().training_losses(...)`: a base class's method
                return ("super", self.class_keys[id(cls)], func.attr.value) if cls is not None else None
            own = self._own_class(func.value, at)
            if own is not None:  # `cls.load_model_from_package(package)`: a method of the class
                return ("method", own, func.attr.value)
            if type(func.value) is cst.Name and func.value.value == "self":
                owner = self._instance_class(func, at)
                if owner is not None and owner[0] != "attr":
                    return _object_call(owner, "__call__")  # `self.criterion(out, y)`
                # A method, or else an object a base class keeps there (the join tries both).
                cls = ctx.tree.enclosing_class(at)
                return ("method", self.class_keys[id(cls)], func.attr.value) if cls is not None else None
            member = self._instance_class(func, at) if type(func.value) in (cst.Attribute, cst.Subscript) else None
            if member is not None:  # `self.transformer.wte(idx)`: an nn.ModuleDict's member; `self.down[i].downsample(h)`
                return _object_call(member, "__call__")
            owner = self._instance_class(func.value, at)
            if owner is not None and owner[0] == "each" and func.attr.value in _CONTAINER_METHODS \
                    and (self._defines(owner, func.attr.value) or self._built_in_branches(func.value, at)):
                # `self.decoder.update(...)` where `self.decoder` is one of two classes of this file that define it;
                # `mem.append(...)` where `mem = load_memory(...)` or `mem = ReplayMemory(...)`: an object, not a list
                return ("each", tuple(("object", member, func.attr.value) for member in owner[1]))
            if owner is not None and owner[0] == "passed" and type(func.value) is cst.Name \
                    and any(b.kind in ("for", "comp") for b in ctx.bindings.lookup(func.value.value, at)):
                # `for evaluator in self._evaluators: evaluator.process(inputs, outputs)`, members of a
                # container a caller passes: only calls of the members themselves (blocks) are followed;
                # what a method is handed (outputs the loop already moved to the host) is not known here,
                # and its reads would be taken for syncs
                return None
            if owner is not None:
                return _object_call(owner, func.attr.value)  # `meter.update(...)` on a project class
            if type(func.value) is cst.Name and func.value.value in self._module_classes:
                method = "forward" if func.attr.value == "apply" else func.attr.value  # `Attention.apply(q, k, v)`: an autograd.Function runs its forward
                return ("method", self._module_classes[func.value.value], method)  # `Trainer.step(...)`
            name = dotted(func)
            if name is None:
                return None
            head, _, rest = name.partition(".")
            if head in self.relative:
                level, module = self.relative[head]
                return ("import", level, f"{module}.{rest}")
            qualified = ctx.imports.qualify(func)
            if qualified is not None and qualified.split(".")[0] not in _NOT_PROJECT:
                return ("import", 0, qualified)
            if qualified is None and type(func.value) is cst.Name:
                param = self._parameter(func.value, at)
                if param is not None:  # `model.forward(x)`, `model.loss(out, y)` on `def train_epoch(model, ...)`: what the callers pass
                    return ("object", ("passed", *param), func.attr.value)
        if func_type is cst.Call:  # `getattr(self, f"layer{i}")(x)`: a module registered by name
            owner = self._instance_class(func, at)
            return _object_call(owner, "__call__") if owner is not None else None
        if func_type is cst.Subscript:  # `self.blocks[i](x)`
            owner = self._instance_class(func, at)
            if owner is None:
                return self._stored_functions(func.value, at)
            return _object_call(owner, "__call__")
        return None

    def _built_in_branches(self, receiver: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``receiver`` a name each binding of which (two or more, in the branches before ``at``)
        calls a class or a factory, no container: ``mem = load_memory(path)`` or ``mem =
        ReplayMemory(args)``, one object of either, not a list of both."""
        if type(receiver) is not cst.Name:
            return False
        bound = self.ctx.bindings.reaching_each(receiver.value, at)
        return len(bound) > 1 and all(b.kind == "assign" and b.element is None and type(b.value) is cst.Call
                                      and self.ctx.qname(b.value.func) not in CONTAINERS for b in bound)

    def _defines(self, owner: Ref, method: str) -> bool:
        """Does a class of this file among ``owner``'s members define ``method`` (so that a
        call of it is the class's, not a container's own ``update``/``append``)?"""
        local = {key for kind, key, *_ in owner[1] if kind == "local"}
        return any(self.class_keys[id(cls)] in local and any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in _block(cls.body))
                   for cls in self.ctx.tree.nodes(cst.ClassDef))

    @cached_property
    def _function_applies(self) -> dict[str, str]:
        """Module-level ``attention = AttentionFn.apply``: the name -> the class, whose
        ``forward`` a call of it runs (an autograd.Function)."""
        found: dict[str, str] = {}
        for statement in self.ctx.tree.module.body:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                value = small.value
                if isinstance(value, cst.Attribute) and value.attr.value == "apply" and isinstance(value.value, cst.Name) \
                        and value.value.value in self._module_classes:
                    found[small.targets[0].target.value] = self._module_classes[value.value.value]
        return found

    def _picked_function(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """``sample_fn = {"heun": sample_heun, ...}[sampler]``, then ``sample_fn(denoiser, x)``:
        the call runs one of the table's functions."""
        binding = self.ctx.bindings.reaching(name.value, at)
        value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
        return self._stored_functions(value.value, value) if type(value) is cst.Subscript else None

    def _stored_functions(self, table: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """``STEPS[mode](batch)`` where ``STEPS = {"train": train_step, ...}`` (a dict or list
        of functions defined or imported here, bound once, or written in place): the call
        runs one of them."""
        if type(table) in (cst.Dict, cst.List, cst.Tuple):
            value = table
        elif type(table) is cst.Name:
            bindings = self.ctx.bindings.lookup(table.value, at)
            value = getattr(bindings[0], "value", None) if len(bindings) == 1 else None
        else:
            return None
        if type(value) is cst.Dict:
            items = [e.value for e in value.elements if type(e) is cst.DictElement]
        elif type(value) in (cst.List, cst.Tuple):
            items = [e.value for e in value.elements if type(e) is cst.Element]
        else:
            return None
        found = tuple(dict.fromkeys(ref for item in items if type(item) is cst.Name and item.value != getattr(table, "value", None)
                                    and (ref := self.target(item, at)) is not None and ref[0] in ("local", "import")))
        return ("each", found) if found else None

    def _local_function(self, name: str, at: cst.CSTNode) -> str | None:
        """The key of the ``def name`` visible at ``at`` (methods are reached through ``self``)."""
        function = self.ctx.functions.named(name, at)
        return self.keys[id(function)] if function is not None else None

    def _compiled_alias(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """``step = torch.compile(train_step)`` then ``step(x)``: the call runs ``train_step``."""
        if name.value not in self._assigned_from_calls[1]:
            return None
        ctx = self.ctx
        binding = ctx.bindings.reaching(name.value, at)
        value = getattr(binding, "value", None)
        if isinstance(value, cst.Call) and ctx.qname(value.func) in _COMPILERS and value.args:
            first = value.args[0].value  # `partial(self.diffusion.training_losses, model, x)` too
            if type(first) in (cst.Name, cst.Attribute) and dotted(first) != name.value:
                return self.target(first, value)
        return None

    # --- classes and framework hooks ---------------------------------------------------
    def _classes(self) -> tuple[ClassSummary, ...]:
        found = []
        for cls in self.ctx.tree.nodes(cst.ClassDef):
            bases = tuple(ref for base in cls.bases if base.keyword is None and (ref := self._base_ref(base.value, cls)) is not None)
            methods = tuple(s.name.value for s in _block(cls.body) if isinstance(s, cst.FunctionDef))
            test = self.ctx.in_tests(cls) or any(part.startswith("Test") for part in self.class_keys[id(cls)].split("."))
            weights = class_weights(self.ctx, cls) if self.ctx.is_module_class(cls.name.value) else ""
            found.append(ClassSummary(self.class_keys[id(cls)], bases, methods, self.class_attributes(cls), test, dataset_work(self.ctx, cls),
                                      loader_sets(self.ctx, cls), weights=weights, cache_methods=cache_methods(cls),
                                      keeps_cache=keeps_a_cache(self.ctx, cls)))
        return tuple(found)

    def _base_ref(self, base: cst.BaseExpression, cls: cst.ClassDef) -> Ref | None:
        name = dotted(base)
        if name is None:
            return None
        for other in self.ctx.tree.nodes(cst.ClassDef):
            if other is not cls and other.name.value == name:
                return ("local", self.class_keys[id(other)])
        head, _, rest = name.partition(".")
        if head in self.relative:
            level, module = self.relative[head]
            return ("import", level, f"{module}.{rest}" if rest else module)
        qualified = self.ctx.imports.qualify(base)
        if qualified is not None:
            return ("import", 0, qualified)
        return ("star", name) if self.star else None

    @cached_property
    def _hooks(self) -> tuple[Hook, ...]:
        """Functions registered with ignite (the only registration API in the table)."""
        return self._find_hooks() if any(m.split(".")[0] == "ignite" for m in self.ctx.imports.modules) else ()

    def _find_hooks(self) -> tuple[Hook, ...]:
        ctx = self.ctx
        hooks: list[Hook] = []
        for call in ctx.tree.nodes(cst.Call):
            text = frameworks.STEP_REGISTRATIONS.get(ctx.qname(call.func) or "")
            if text is not None and call.args:
                target = self.target(call.args[0].value, call)
                if target is not None and target[0] == "local":
                    hooks.append(Hook(target[1], text))
            if ctx.method_name(call) == "add_event_handler" and len(call.args) >= 2 and _per_step_event(call.args[0].value):
                target = self.target(call.args[1].value, call)
                if target is not None and target[0] == "local":
                    hooks.append(Hook(target[1], "an ignite iteration handler"))
        for function in self.functions:
            for decorator in function.decorators:
                d = decorator.decorator
                if isinstance(d, cst.Call) and isinstance(d.func, cst.Attribute) and d.func.attr.value == "on" and d.args and _per_step_event(d.args[0].value):
                    hooks.append(Hook(self.keys[id(function)], "an ignite iteration handler"))
        return tuple(hooks)


_STEP_WORDS = ("step", "train", "update", "learn", "optimi", "fit", "decode", "generate", "sample", "predict", "infer", "search", "translate")


def _may_make_a_step(target: Ref) -> bool:
    """A call that may make its loop a step loop: a method of a project object (a model's
    forward, or a method that runs one: ``search.decode(x)``), a function of the project
    (it may run a model: the join decides), or a method of the class whose name says it
    trains or generates (``self.train_step``, ``self.update``, ``self.generate``)."""
    if target[0] in ("object", "import", "local"):
        return True  # a model's forward, or a function that may run one (`predict(x)`, `HANDLERS[kind](x)`)
    name = str(target[-1]).rsplit(".", 1)[-1].lower()
    return any(word in name for word in _STEP_WORDS)


def _may_be_constant(value: cst.BaseExpression) -> bool:
    """``self.alphas``, ``1.0 - self.alphas``, ``WEIGHTS``: what may hold the same value on
    every step (a cheap filter: most arguments are the step's own values)."""
    value_type = type(value)
    if value_type is cst.Attribute:
        return type(value.value) is cst.Name and value.value.value == "self"
    if value_type is cst.Name:
        return value.value.isupper()
    if value_type is cst.BinaryOperation:
        return _may_be_constant(value.left) or _may_be_constant(value.right)
    return False


def _falsy_args(call: cst.Call) -> tuple[int | str, ...]:
    """Arguments (position or keyword) passed ``False``, ``0`` or ``""``: a flag left off
    (``None`` counts as left out already: ``given_arguments``)."""
    found: list[int | str] = []
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        value = arg.value
        if type(value) is cst.Name and value.value == "False" or type(value) is cst.Integer and value.value == "0" \
                or type(value) is cst.SimpleString and value.evaluated_value == "":
            found.append(arg.keyword.value if arg.keyword is not None else position)
    return tuple(found)


def _is_none(value: cst.BaseExpression) -> bool:
    return type(value) is cst.Name and value.value == "None"


def _own_layer(call: cst.Call) -> bool:
    """``self.conv(x)``, ``self.blocks[i](x)``: a call of a layer the object keeps (not a backward or a step)."""
    func = call.func
    if type(func) is cst.Subscript:
        func = func.value
    elif type(func) is cst.Attribute and func.attr.value in ("backward", "step"):
        return False
    return type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self"


def _over_own_attribute(iterable: cst.BaseExpression) -> bool:
    """``self.layers``, ``enumerate(self.blocks)``, ``zip(self.a, self.b)``, ``self.heads.values()``."""
    while type(iterable) is cst.Call:
        func = iterable.func
        if type(func) is cst.Name and func.value in ("enumerate", "zip", "reversed") and iterable.args:
            iterable = iterable.args[0].value
        elif type(func) is cst.Attribute and func.attr.value in ("values", "items", "children", "modules"):
            iterable = func.value
        else:
            return False
    return type(iterable) is cst.Attribute and type(iterable.value) is cst.Name and iterable.value.value == "self"


# Methods of a container itself (`self.downs.append(block)`), never of its members.
_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "add_module", "pop", "keys", "values", "items", "update", "index", "remove", "clear"})


def _object_call(owner: Ref, method: str) -> Ref | None:
    """A call of ``method`` on an object of ``owner``; on each member for a container (or
    each class an attribute set in two branches may hold)."""
    if owner[0] == "each":
        if method in _CONTAINER_METHODS:
            return None
        return ("each", tuple(("object", member, method) for member in owner[1]))
    return ("object", owner, method)


def _per_step_event(expr: cst.BaseExpression) -> bool:
    """``Events.ITERATION_COMPLETED``, but not ``Events.ITERATION_COMPLETED(every=100)``."""
    name = dotted(expr) or ""
    return name.rsplit(".", 1)[-1] in frameworks.PER_STEP_EVENTS


def _block(body: cst.BaseSuite) -> tuple[cst.CSTNode, ...]:
    return tuple(body.body) if isinstance(body, cst.IndentedBlock) else ()
