"""What a call refers to, for the step summary: a reference of one of the kinds listed in
steps.py (a function of this file, ``self``'s method, an import, a bare name only a star import
defines, a method of an object of a project class, each of the functions a table holds). A mixin
of StepSummarizer over :class:`ObjectRefs`, which supplies ``ctx``, ``keys``, ``class_keys``,
``relative`` and ``star``."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from torchlint.analysis.branch_functions import BranchFunctions
from torchlint.analysis.members import CONTAINERS, class_body
from torchlint.analysis.names import dotted
from torchlint.analysis.objects import _COMPILERS, ObjectRefs
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, Ref


# A module's methods that run the function they are given: `apply` at once on each submodule, the hooks on each
# later call of the module (`register_forward_hook(fn)`), each in the place of the step that runs the module.
_HANDED_TO_MODULES = frozenset({"apply", "register_forward_hook", "register_forward_pre_hook"})


_ALIAS_DEPTH = 8  # `f = g` resolved through at most this many names

class CallTargets(ObjectRefs, BranchFunctions):
    """The reference a call's function makes (see the module docstring)."""

    star: bool
    _function_keys: frozenset[str]

    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """What ``func`` refers to where ``at`` stands. Asked of a call's function by the call sites,
        then again by what other calls pass (their arguments, results, what a function returns,
        the engine's waits): remembered per pair, but only when no resolution is in progress
        (inside one, a cycle guard answers None where a fresh question would not: not kept)."""
        state = self.__dict__
        if state.get("_resolving") or state.get("_expanding") or state.get("_aliases_resolving"):
            return self._target(func, at)
        known = self._targets.get((id(func), id(at)))
        if known is not None and known[0] is func and known[1] is at:
            return known[2]
        found = self._target(func, at)
        self._targets[(id(func), id(at))] = (func, at, found)  # (the nodes kept with it: their ids name no other)
        return found

    @cached_property
    def _targets(self) -> dict[tuple[int, int], tuple[cst.BaseExpression, cst.CSTNode, Ref | None]]:
        return {}

    def _target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
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
            aliased = self._aliased_function(func, at)
            if aliased is not None:  # `f = g` at module level, then `f(x)`: runs `g`
                return aliased
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
            branched = self.branch_function(func, at)
            if branched is not None:  # `spline_fn = rational_quadratic_spline` in one branch, another function in the other
                return branched
            if self.star and func.value not in _BUILTINS:
                return ("star", func.value)
            return None
        if func_type is cst.Attribute:
            receiver = func.value
            if type(receiver) is cst.Call and type(receiver.func) is cst.Name and receiver.func.value == "super":
                cls = ctx.tree.enclosing_class(at)  # `super().training_losses(...)`: a base class's method
                # (`super(Cls, self)` of its own class is the same: the Python 2 spelling, kospeech's metrics)
                return ("super", self.class_keys[id(cls)], func.attr.value) if cls is not None and _own_super(receiver, cls) else None
            own = self._own_class(func.value, at)
            if own is not None:  # `cls.load_model_from_package(package)`: a method of the class
                return ("method", own, func.attr.value)
            if type(func.value) is cst.Name and func.value.value == "self":
                owner = self._instance_class(func, at)
                if owner is not None and owner[0] != "attr":
                    return _object_call(owner, "__call__")  # `self.criterion(out, y)`
                picked = self._picked_attribute(func, at)
                if picked is not None:  # `self.pooling_fun = pooling_dict[cfg.pool]` in `__init__`: one of the table's
                    return picked
                # A method, or else an object a base class keeps there (the join tries both).
                cls = ctx.tree.enclosing_class(at)
                return ("method", self.class_keys[id(cls)], func.attr.value) if cls is not None else None
            member = self._instance_class(func, at) if type(func.value) in (cst.Attribute, cst.Subscript) else None
            if member is not None:  # `self.transformer.wte(idx)`: an nn.ModuleDict's member; `self.down[i].downsample(h)`
                return _object_call(member, "__call__")
            owner = self._instance_class(func.value, at)
            if owner is None and type(func.value) is cst.Call:
                # `DecodingTask(model, options).run(mel)`: a method of the object just built (or a factory returned)
                owner = self._object_of(func.value, at, None)
            if owner is not None and owner[0] == "each" and func.attr.value in _CONTAINER_METHODS \
                    and (self._defines(owner, func.attr.value) or self._built_in_branches(func.value, at) or self._member_of_loop(func.value, at)):
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

    def _member_of_loop(self, receiver: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``receiver`` a loop's variable, every binding of it (``for ema in self.emas["batch"]: ema.update()``,
        demucs): one member at a time, whose own ``update`` it calls, not the container's."""
        if type(receiver) is not cst.Name:
            return False
        bound = self.ctx.bindings.lookup(receiver.value, at)
        return bool(bound) and all(b.kind == "for" and b.element is None for b in bound)

    def _defines(self, owner: Ref, method: str) -> bool:
        """Does a class of this file among ``owner``'s members define ``method`` (so that a
        call of it is the class's, not a container's own ``update``/``append``)?"""
        local = {key for kind, key, *_ in owner[1] if kind == "local"}
        return any(self.class_keys[id(cls)] in local and any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in class_body(cls))
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

    @cached_property
    def _module_aliases(self) -> dict[str, cst.Assign]:
        """Module-level ``f = g`` (a name or a dotted name, bound once at module level): name -> that assignment."""
        found: dict[str, cst.Assign | None] = {}
        for statement in self.ctx.tree.module.body:
            small = statement.body[0] if type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 else None
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                    and type(small.value) in (cst.Name, cst.Attribute):
                name = small.targets[0].target.value
                found[name] = None if name in found else small  # (bound twice: no telling which runs)
        return {name: assign for name, assign in found.items() if assign is not None}

    def _aliased_function(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """The function a module-level ``f = g`` binds, where ``at`` sees that binding alone."""
        assign = self._module_aliases.get(name.value)
        if assign is None:
            return None
        bindings = self.ctx.bindings.lookup(name.value, at)
        if len(bindings) != 1 or bindings[0].node is not assign:
            return None  # bound again (here, or in the function reading it): not the alias alone
        return self._function_ref(assign.value, assign)

    def _function_ref(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """What ``value`` names when it may be a function of the project: one of this file, an import (the
        join tells a function from anything else), a name a star import defines; None for a library's, an
        object, a class of this file. A name bound to itself in a cycle (``f = g``, ``g = f``) names nothing."""
        resolving: set[int] = self.__dict__.setdefault("_aliases_resolving", set())
        if id(at) in resolving or len(resolving) >= _ALIAS_DEPTH:
            return None  # (a chain of aliases deeper than code writes: generated input, not followed)
        resolving.add(id(at))
        try:
            ref = self.target(value, at)
        finally:
            resolving.discard(id(at))
        if ref is None or ref[0] not in ("local", "import", "star", "method"):
            return None
        return ref if ref[0] != "local" or ref[1] in self._function_keys else None  # (a local class: a constructor)

    def class_aliases(self, cls: cst.ClassDef) -> tuple[tuple[str, Ref], ...]:
        """``decode = decode_function`` in a class's body (whisper's ``Whisper``, the function imported), or
        ``predict = forward`` (a method of the class): the attribute's name -> the function a call of it
        on an object runs (``ClassSummary.aliases``)."""
        methods = {s.name.value for s in class_body(cls) if type(s) is cst.FunctionDef}
        found: list[tuple[str, Ref]] = []
        for statement in class_body(cls):
            small = statement.body[0] if type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 else None
            if type(small) is not cst.Assign or len(small.targets) != 1 or type(small.targets[0].target) is not cst.Name \
                    or type(small.value) not in (cst.Name, cst.Attribute):
                continue
            if type(small.value) is cst.Name and small.value.value in methods:  # (a method's name in the class body)
                ref: Ref | None = ("method", self.class_keys[id(cls)], small.value.value)
            else:
                ref = self._function_ref(small.value, small)
            if ref is not None and (ref[0] != "method" or ref[1] == self.class_keys[id(cls)]):
                found.append((small.targets[0].target.value, ref))
        return tuple(found)

    def _picked_function(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """``sample_fn = {"heun": sample_heun, ...}[sampler]``, then ``sample_fn(denoiser, x)``:
        the call runs one of the table's functions."""
        binding = self.ctx.bindings.reaching(name.value, at)
        value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
        return self._stored_functions(value.value, value) if type(value) is cst.Subscript else None

    def _picked_attribute(self, func: cst.Attribute, at: cst.CSTNode) -> Ref | None:
        """``self.pooling_fun(x, batch)`` where every binding of ``self.pooling_fun`` picks from a table
        (``self.pooling_fun = pooling_dict[cfg.model.graph_pooling]``, GraphGym's graph heads): the call
        runs one of the table's functions, here or imported."""
        bindings = self.ctx.bindings.lookup(f"self.{func.attr.value}", at)
        if not bindings or any(b.kind != "assign" or b.element is not None or type(b.value) is not cst.Subscript for b in bindings):
            return None
        found: list[Ref] = []
        for binding in bindings:
            ref = self._stored_functions(binding.value.value, binding.node)
            if ref is None:
                return None  # (one binding picks from what is no table: an object's item, not followed)
            found += [r for r in (ref[1] if ref[0] == "each" else (ref,)) if r not in found]
        return found[0] if len(found) == 1 else ("each", tuple(found))

    def _stored_functions(self, table: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> Ref | None:
        """``STEPS[mode](batch)`` where ``STEPS = {"train": train_step, ...}`` (a dict or list
        of functions defined or imported here, or written in place; bound more than once, each
        binding a table, GraphGym's ``pooling_dict = {**register.pooling_dict, **pooling_dict}``:
        any of each's): the call runs one of them. A table imported from a module of the project
        is that import (``pooling_dict[cfg.pool](x, batch)``): the join finds its functions in the
        module's exports (``exported_tables``)."""
        if type(table) in (cst.Dict, cst.List, cst.Tuple):
            values = [table]
        elif type(table) is cst.Name:
            bindings = self.ctx.bindings.lookup(table.value, at)
            values = [b.value for b in bindings if b.kind == "assign" and b.element is None]
            if not bindings or len(values) != len(bindings) or any(type(v) not in (cst.Dict, cst.List, cst.Tuple) for v in values):
                imported = self.target(table, at) if all(b.kind == "import" for b in bindings) else None
                # (an import of the project only: what a library's table holds runs nothing of the project)
                return imported if imported is not None and imported[0] == "import" else None
        else:
            return None
        items: list[cst.BaseExpression] = []
        merged: list[cst.BaseExpression] = []  # `{**other_table, ...}`: the other table's functions too
        for value in values:
            if type(value) is cst.Dict:
                items += [e.value for e in value.elements if type(e) is cst.DictElement]
                merged += [e.value for e in value.elements if type(e) is cst.StarredDictElement and type(e.value) is cst.Name]
            else:
                items += [e.value for e in value.elements if type(e) is cst.Element]
        found = list(dict.fromkeys(ref for item in items if type(item) is cst.Name and item.value != getattr(table, "value", None)
                                   and (ref := self.target(item, at)) is not None and ref[0] in ("local", "import")))
        for other in merged:
            # (the table itself merged into its new binding is already among its bindings; a chain deeper than code writes: not followed)
            inner = self._stored_functions(other, at, depth + 1) if other.value != getattr(table, "value", None) and depth < 2 else None
            found += [ref for ref in (inner[1] if inner is not None and inner[0] == "each" else ()) if ref not in found]
        return ("each", tuple(found)) if found else None

    def exported_tables(self) -> list[tuple[str, Ref]]:
        """Module-level names bound only to tables of functions (``pooling_dict = {"add": global_add_pool,
        ...}``): ``(name, ("each", functions))``, so another module's ``pooling_dict[name](x, batch)``, or
        an attribute set to it, runs one of them."""
        found: list[tuple[str, Ref]] = []
        for statement in self.ctx.tree.module.body:
            small = statement.body[0] if type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 else None
            if type(small) is not cst.Assign or len(small.targets) != 1 or type(small.targets[0].target) is not cst.Name \
                    or type(small.value) not in (cst.Dict, cst.List, cst.Tuple):
                continue
            name = small.targets[0].target.value
            ref = self._stored_functions(small.targets[0].target, small)
            if ref is not None and ref[0] == "each":
                found = [(n, r) for n, r in found if n != name] + [(name, ref)]  # (bound again: every binding's, once)
        return found

    def handed_function(self, call: cst.Call) -> Ref | None:
        """The function of this file a module runs for ``call``: ``module.apply(fn)`` calls it on each
        submodule there, and ``module.register_forward_hook(fn)`` on each later call of the module (whisper's
        ``save_to_cache``, which grows its key-value cache per decoded token): taken for a call made where
        the hook is registered, which runs as often as the step that runs the module."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in _HANDED_TO_MODULES or not call.args:
            return None
        first = call.args[0]
        if first.keyword is not None or first.star or type(first.value) is not cst.Name:
            return None
        local = self._local_function(first.value.value, call)
        return ("local", local) if local is not None else None

    def keyword_model(self, call: cst.Call) -> Ref | None:
        """``("keywords", names)`` for a call of a name this file cannot resolve (a model out of a table:
        ``model = models["text"]["model"]``) given two keywords or more (``merge_context=True,
        past_kv=kv_cache``): the join takes it for the ``forward`` of the project's module class that takes
        them all (``Project.forwards_taking``), asked only of a decode loop's calls."""
        func = call.func
        if type(func) not in (cst.Name, cst.Attribute) or self.ctx.qname(func) is not None:
            return None  # a library's function, or not a model's call
        keywords = tuple(sorted({a.keyword.value for a in call.args if a.keyword is not None}))
        return ("keywords", keywords) if len(keywords) >= 2 and not any(a.star for a in call.args) else None

    def hooked_forward(self, call: cst.Call) -> tuple[str, Ref] | None:
        """(the ``forward`` of the class, the hook) for ``call`` registering a forward hook of this file
        (``layer.key.register_forward_hook(save_to_cache)``) inside a method of a class with a ``forward``
        (whisper's ``install_kv_cache_hooks``, installing it on the model's own layers): the hook runs on
        every call of that model, wherever the method that installs it runs."""
        func = call.func
        if type(func) is not cst.Attribute or not func.attr.value.startswith("register_forward"):
            return None
        hook = self.handed_function(call)
        tree = self.ctx.tree
        scope = tree.enclosing_function(call)
        while scope is not None and type(tree.parent(tree.parent(scope))) is not cst.ClassDef:
            scope = tree.enclosing_function(scope)  # (the method around the nested function that registers it)
        cls = tree.parent(tree.parent(scope)) if scope is not None else None
        if hook is None or cls is None or "forward" not in {f.name.value for f in class_body(cls) if type(f) is cst.FunctionDef}:
            return None
        return f"{self.class_keys[id(cls)]}.forward", hook

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


def _own_super(call: cst.Call, cls: cst.ClassDef) -> bool:
    """``super()``, or ``super(Cls, self)`` naming the class it is written in (another class
    starts the search past that one: not this class's bases)."""
    if not call.args:
        return True
    args = call.args
    return len(args) == 2 and all(a.keyword is None and not a.star for a in args) \
        and type(args[0].value) is cst.Name and args[0].value.value == cls.name.value and type(args[1].value) is cst.Name
