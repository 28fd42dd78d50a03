"""The loops of a file as the step summary records them (``LoopSummary``): the loops that are
not hot here, which of them the join may make a step loop (not a loop in a ``forward``, over the
layers an object keeps, around epochs or generations), what they go over, and the functions that
train or make one whole training step. A mixin of StepSummarizer, which supplies ``ctx``,
``keys``, ``class_keys`` and the calls it placed (``_pending``)."""

from __future__ import annotations

import itertools

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.positions import plain_code
from torchlint.analysis.summary import LoopSummary, Ref

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class LoopSummaries:
    """The loops the summary records, and which may step (see the module docstring)."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]

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
        """Functions that make one whole training step (of those that train at all): those whose own
        backward and optimizer step make it, and, a level up at a time, the methods that make it by calling
        them (drqv2's ``DrQV2Agent.update()`` calling ``update_critic()`` and ``update_actor()``; not a
        script's ``main()`` calling a warm start once)."""
        return tuple(sorted(self.keys[key] for key in self._one_step_functions))

    @cached_property
    def _one_step_functions(self) -> dict[int, cst.FunctionDef]:
        ctx, tree = self.ctx, self.ctx.tree
        functions = {id(f): f for call in ctx.method_calls(("backward", "step")) if (f := tree.enclosing_function(call)) is not None}
        found = {key: f for key, f in functions.items() if ctx.loops.makes_one_step(f)}
        level = list(found.values())
        for _ in range(2):  # (the depth `makes_one_step` follows a function's calls to)
            names = {f.name.value for f in level}
            callers = {id(f): f for call in itertools.chain(ctx.method_calls(names), *(ctx.name_calls(n) for n in names))
                       if (f := tree.enclosing_function(call)) is not None and id(f) not in found and tree.enclosing_class(f) is not None}
            level = [f for f in callers.values() if ctx.loops.makes_one_step(f)]
            found.update((id(f), f) for f in level)
        return found

    def _one_step_called(self) -> tuple[str, ...]:
        """The functions of ``_one_step`` that this file calls by name, outside their own body."""
        ctx, tree = self.ctx, self.ctx.tree
        found = []
        for key, function in self._one_step_functions.items():
            name = function.name.value
            calls = ctx.method_calls([name]) if tree.enclosing_class(function) is not None else ctx.name_calls(name)
            if any(not tree.is_inside(call, function) for call in calls):
                found.append(self.keys[key])
        return tuple(sorted(found))

    def _trains(self) -> tuple[str, ...]:
        ctx, found = self.ctx, set()
        for call in ctx.method_calls(("backward", "step")):
            function = ctx.tree.enclosing_function(call)
            if function is not None and ctx.loops.is_step_call(call):
                found.add(self.keys[id(function)])
        return tuple(sorted(found))


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
