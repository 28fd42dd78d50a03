"""Objects handed between functions: what a factory returns (here, or a project function the join
looks up), and what a call passes for a parameter, dicts of objects included (a part of ``ObjectRefs``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.members import either
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import (
    CONSTRUCTORS, FACTORY_PREFIXES, RETURNING, dict_entries, names_a_class, positional, single, string_key, unwrap_moves,
)
from torchlint.analysis.registries import registered_classes
from torchlint.analysis.summary import Ref
if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ObjectFlow:
    """The classes of the objects a file's functions return and its calls pass."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    relative: dict[str, tuple[int, str]]

    def _returns(self) -> tuple[tuple[str, tuple[Ref | None, ...]], ...]:
        """What factories return, element by element, when it is an object of a class:
        ``return model, criterion, post`` (or ``return build(args)``: whatever that returns)."""
        found: dict[str, tuple[Ref | None, ...]] = {}
        for node in self.ctx.tree.nodes(cst.Return):  # one pass over the file's returns
            function = self.ctx.tree.enclosing_function(node)
            if node.value is None or function is None:
                continue
            values = [e.value for e in node.value.elements] if isinstance(node.value, cst.Tuple) else [node.value]
            refs = tuple(self._returned_class(v, node) for v in values)
            key = self.keys[id(function)]
            if key in found and len(found[key]) == len(refs):  # another `return`: either may be what it returns
                refs = tuple(either(pair) for pair in zip(found[key], refs))
            elif key in found:
                continue
            if any(r is not None for r in refs):
                found[key] = refs
        return tuple(found.items())

    def _returned_class(self, value: cst.BaseExpression, at: cst.Return) -> Ref | None:
        """The class a returned value is of; a name bound in the branches of an ``if`` may be
        any of them (``if swin: model = Swin() else: model = Mlp()``, then ``return model``),
        but a container returned is not one object."""
        if type(value) is cst.Name:
            made = self._made_function(value, at)
            if made is not None:  # `def step_fn(state, batch): ...; return step_fn`: a call of the result runs it
                return made
            reaching = self.ctx.bindings.reaching_each(value.value, at)
            if len(reaching) > 1:
                return either(single(self._binding_class(value, b)) for b in reaching)
        registered = self._registered_class(value)
        if registered is not None:  # `return _CORRECTORS[name]`: one of the classes a decorator registers there
            return registered
        found = self._object_of(value, at, None)
        if found is not None and found[0] == "each" and type(value) is cst.Call and type(value.func) is cst.Subscript:
            return found  # `return MODELS[name](params)`: one object, of any class a function of the table returns
        return single(found)

    def _registered_class(self, value: cst.BaseExpression) -> Ref | None:
        """``_CORRECTORS[name]`` of a module-level registry a decorator fills (``registries``): any of its classes."""
        if type(value) is not cst.Subscript or type(value.value) is not cst.Name or not self._registries:
            return None
        classes = self._registries.get(value.value.value, ())
        return either(("local", self.class_keys[id(c)]) for c in classes if id(c) in self.class_keys)

    @cached_property
    def _registries(self) -> dict[str, tuple[cst.ClassDef, ...]]:
        return registered_classes(self.ctx.tree)

    def _made_function(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """``("local", key)`` where ``name`` at ``at`` is a function of this file and nothing
        else (a factory returning the closure it defines: score_sde's ``get_step_fn``)."""
        function = self.ctx.functions.named(name.value, at)
        if function is None:
            return None
        reaching = self.ctx.bindings.reaching_each(name.value, at)
        if any(b.kind != "def" for b in reaching):
            return None  # rebound (`step_fn = torch.compile(step_fn)`): the object's class, as before
        return ("local", self.keys[id(function)])

    def _argument_classes(self, call: cst.Call) -> tuple[tuple[int | str, Ref], ...]:
        """``train_one_epoch(model, criterion, ...)``: which arguments are objects of a
        class, so the callee's ``criterion(out, y)`` resolves to that class's forward."""
        found: list[tuple[int | str, Ref]] = []
        position = 0
        for arg in (*self.partial_arguments(call), *call.args):
            if arg.star == "**":  # `Trainer(**kwargs)` with `kwargs = {"actor": actor, ...}`: each key a keyword
                found.extend(self._unpacked_keywords(arg.value, call))
                continue
            if arg.star:
                break  # positions after *args are unknown
            value = arg.value
            if type(value) in (cst.List, cst.Tuple):  # `train(rank, [net_g, net_d], ...)`: each element's class
                refs = tuple(single(self._instance_class(e.value, call)) if type(e.value) in (cst.Name, cst.Attribute) else None for e in value.elements)
                owner = ("tuple", refs) if any(r is not None for r in refs) else None
            else:
                owner = self._dict_of_objects(value, call) or self._argument_object(value, call) or self._handed_method(value, call)
            if owner is not None:
                found.append((arg.keyword.value if arg.keyword is not None else position, owner))
            if arg.keyword is None:
                position += 1
        return tuple(found)

    def _reaching_parameter(self, name: cst.Name, at: cst.CSTNode) -> tuple[str, str] | None:
        """(function key, name) where the parameter itself is among what ``name`` may hold at ``at``
        and nothing else it may hold names a class (kospeech's ``model = resume_checkpoint.model``
        under ``if resume:``, then ``self._train_epoches(model=model)``): what the callers pass goes on."""
        reaching = self.ctx.bindings.reaching_each(name.value, at)
        param = next((b for b in reaching if b.kind == "param" and type(b.node) is cst.Param), None)
        function = self.ctx.tree.enclosing_function(at) if param is not None else None
        if function is None or name.value in ("self", "cls") or name.value not in positional(function):
            return None  # (a closure's parameter of its factory, or none: `_parameter`'s cases)
        return self.keys[id(function)], name.value

    def _argument_object(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The classes of an argument: ``model``, ``self.encoder`` (either of two branches),
        built in place (``Trainer(model, WeightedLoss())``, ``run(Net().cuda())``), what a
        function of the project returns (``self._wrap_model(model)``), or a parameter passed
        on (``_WrappedModel(model, ...)`` in ``_wrap_model(self, model)``: what its callers pass)."""
        if type(value) is cst.Call:
            value = unwrap_moves(value)
            if type(value) is cst.Call:
                last = (dotted(value.func) or "").rsplit(".", 1)[-1]
                builds = names_a_class(last) or last.startswith(FACTORY_PREFIXES) or last in CONSTRUCTORS
                if builds:
                    return self._object_of(value, at, None)
                function = self.target(value.func, value)  # the join finds out whether it returns an object
                if function is not None and function[0] == "each":
                    return self._factory_result(function, None)  # `run(MODELS[name](params))`
                return ("returned", function, None) if function is not None and function[0] in RETURNING else None
        if type(value) not in (cst.Name, cst.Attribute):
            return None
        found = self._instance_class(value, at)
        if found is None and type(value) is cst.Name:
            param = self._parameter(value, at) or self._reaching_parameter(value, at)
            if param is not None:
                return ("passed", *param)  # the join follows it to the callers
            function = self.ctx.functions.named(value.value, at)  # a function handed on (`sample_fn(denoiser, x)`): a call of it runs it
            return ("local", self.keys[id(function)]) if function is not None else None
        return found

    def _handed_method(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """``("local", "Cls.m")`` for a method of this file handed to a call as a function: bound
        (``static_scan(self.img_step, ...)``), or the one call a lambda makes (``static_scan(lambda prev, inp:
        self.obs_step(prev[0], inp), ...)``): a callee calling its parameter in a loop runs that method
        once per iteration (dreamerv3's RSSM steps). Only methods of this file: an imported name is
        no object the join can tell from a factory."""
        if type(value) is cst.Lambda:
            value = value.body.func if type(value.body) is cst.Call else None  # (the lambda runs that call, once per call of it)
        if type(value) is not cst.Attribute or type(value.value) is not cst.Name or value.value.value != "self":
            return None
        ref = self.target(value, at)  # type: ignore[attr-defined]
        if ref is None or ref[0] != "method":
            return None
        key = f"{ref[1]}.{ref[2]}"
        return ("local", key) if key in self.keys.values() else None

    def _unpacked_keywords(self, value: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[int | str, Ref]]:
        """The keywords a ``**`` argument passes that are objects of a class: a dict written with
        string keys where it is unpacked, or a local name bound once to one (CORL's ``kwargs``)."""
        entries = dict_entries(self._bound_once(value, at))
        if entries is None:
            return []
        return [(key, owner) for key, item in entries
                if (owner := self._dict_of_objects(item, at) or self._argument_object(item, at)) is not None]

    # --- dicts of objects (score_sde's `state = dict(model=model, ema=ema, ...)`) -------------
    def _dict_of_objects(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """``("dict", ((key, class ref), ...))`` for a dict written with string keys (``{"ema":
        ema}``, ``dict(ema=ema)``, or a name bound once to one) some of whose values are objects
        of a class; None otherwise."""
        entries = dict_entries(self._bound_once(value, at))
        if entries is None:
            return None
        found = tuple((key, ref) for key, item in entries if (ref := single(self._object_of(item, at, None))) is not None)
        return ("dict", found) if found else None

    def _dict_entry(self, expr: cst.Subscript, at: cst.CSTNode) -> Ref | None:
        """The class of ``state["ema"]``: the value that key holds in the dict ``state`` is bound
        to here, or, for a parameter, in what the callers pass (``("passed", f, "state", "ema")``)."""
        key = string_key(expr)
        if key is None or type(expr.value) is not cst.Name:
            return None
        param = self._parameter(expr.value, at)
        if param is not None:
            return ("passed", *param, key)
        entries = dict_entries(self._bound_once(expr.value, at))
        item = dict(entries).get(key) if entries is not None else None
        return single(self._object_of(item, at, None)) if item is not None else None

    def _bound_once(self, value: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
        """What a local name is bound to where ``at`` stands, when one plain assignment reaches
        it; any other expression as it is."""
        for _ in range(4):
            if type(value) is not cst.Name:
                return value
            reaching = self.ctx.bindings.reaching_each(value.value, at)
            if len(reaching) != 1 or reaching[0].kind != "assign" or reaching[0].element is not None:
                return None
            bound, at = reaching[0].value, reaching[0].node
            handed_back = type(bound) is cst.Call and any(type(a.value) is cst.Name and a.value.value == value.value for a in bound.args)
            if not handed_back:
                return bound
            # `state = restore_checkpoint(path, state, device)`: the dict it is given, handed back
        return None
