"""Objects of the project's classes, for the step summary: which class an expression is
an instance of, and what factories return. A mixin of StepSummarizer, which supplies
``ctx``, ``keys``, ``class_keys``, ``relative`` and ``target``.

An object is followed through what keeps it the same object: moves and modes
(``m = m.to(d)``, ``.cuda()``, ``.train()``, ``.half()``), wrappers (``DataParallel``,
``DistributedDataParallel``, FSDP, ``torch.compile``, ``accelerator.prepare``),
factories (``model, opt = build(args)``, here or in another module: ``("returned", ...)``),
constructors by class method (``Net.from_pretrained(path)``), attributes kept on ``self``
(assigned, or annotated: ``policy: ActorCriticPolicy``), annotated parameters
(``rollout_buffer: RolloutBuffer``), what callers pass for a parameter
(``("passed", ...)``) and an attribute a base class in another module sets
(``("attr", class_key, name)``). The members of ``nn.Sequential``/``ModuleList``/``ModuleDict``
are several classes at once: ``("each", refs)``, which the summary expands into one call
per member (``for layer in self.layers: x = layer(x)``, ``self.blocks[i](x)``); so is an
attribute set in two branches (``self.attn = Flash(d) if flash else Attention(d)``): a call
of it may run either forward. Classes built through ``partial`` or a name bound to
classes come from ``aliases.py``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.aliases import AliasRefs
from torchlint.analysis.members import (
    CONTAINERS,
    MemberRefs,
    as_container,
    either,
    iterated_item,
    may_iterate_modules,
    target_names,
)
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, Ref
from torchlint.analysis.values import MODULE_CHAIN

if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext

_FACTORY_PREFIXES = ("build", "create", "make", "get_model", "load_model", "setup")
_COMPILERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial", "torch.func.functional_call"})
# Calls that return the module they are given, wrapped: its forward is what runs.
_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.compile", "torch.jit.script",
    "torch.jit.trace", "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "apex.parallel.DistributedDataParallel",
    "fairscale.nn.FullyShardedDataParallel", "fairscale.nn.data_parallel.FullyShardedDataParallel",
})
# Methods that hand back the objects they are given, in order (`accelerator.prepare(model, opt)`).
_PREPARERS = frozenset({"prepare", "prepare_model", "setup"})
# Class methods that build an instance of their class.
CONSTRUCTORS = frozenset({"from_pretrained", "from_config", "load_from_checkpoint", "from_checkpoint"})
# Annotations that never name a project class.
_PLAIN_TYPES = frozenset({"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "object", "Any", "None", "Tensor", "Module"})
# Python lists (and tuples) that may hold modules: their elements are a container's members.
_LISTS = (cst.List, cst.ListComp, cst.Tuple)
# Calls of the project's functions whose result the join can look up (``Project.class_of``).
_RETURNING = frozenset({"local", "import", "method", "super", "object"})


class ObjectRefs(MemberRefs, AliasRefs):
    """Class references for objects (see the reference kinds in steps.py)."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    relative: dict[str, tuple[int, str]]

    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:  # pragma: no cover - StepSummarizer's
        raise NotImplementedError

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
                return either(_single(self._binding_class(value, b)) for b in reaching)
        found = self._object_of(value, at, None)
        if found is not None and found[0] == "each" and type(value) is cst.Call and type(value.func) is cst.Subscript:
            return found  # `return MODELS[name](params)`: one object, of any class a function of the table returns
        return _single(found)

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
            if arg.star:
                break  # positions after *args are unknown
            value = arg.value
            if type(value) in (cst.List, cst.Tuple):  # `train(rank, [net_g, net_d], ...)`: each element's class
                refs = tuple(_single(self._instance_class(e.value, call)) if type(e.value) in (cst.Name, cst.Attribute) else None for e in value.elements)
                owner = ("tuple", refs) if any(r is not None for r in refs) else None
            else:
                owner = self._dict_of_objects(value, call) or self._argument_object(value, call)
            if owner is not None:
                found.append((arg.keyword.value if arg.keyword is not None else position, owner))
            if arg.keyword is None:
                position += 1
        return tuple(found)

    def _argument_object(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The classes of an argument: ``model``, ``self.encoder`` (either of two branches),
        built in place (``Trainer(model, WeightedLoss())``, ``run(Net().cuda())``), what a
        function of the project returns (``self._wrap_model(model)``), or a parameter passed
        on (``_WrappedModel(model, ...)`` in ``_wrap_model(self, model)``: what its callers pass)."""
        if type(value) is cst.Call:
            value = unwrap_moves(value)
            if type(value) is cst.Call:
                last = (dotted(value.func) or "").rsplit(".", 1)[-1]
                builds = names_a_class(last) or last.startswith(_FACTORY_PREFIXES) or last in CONSTRUCTORS
                if builds:
                    return self._object_of(value, at, None)
                function = self.target(value.func, value)  # the join finds out whether it returns an object
                if function is not None and function[0] == "each":
                    return self._factory_result(function, None)  # `run(MODELS[name](params))`
                return ("returned", function, None) if function is not None and function[0] in _RETURNING else None
        if type(value) not in (cst.Name, cst.Attribute):
            return None
        found = self._instance_class(value, at)
        if found is None and type(value) is cst.Name:
            param = self._parameter(value, at)
            if param is not None:
                return ("passed", *param)  # the join follows it to the callers
            function = self.ctx.functions.named(value.value, at)  # a function handed on (`sample_fn(denoiser, x)`): a call of it runs it
            return ("local", self.keys[id(function)]) if function is not None else None
        return found

    # --- dicts of objects (score_sde's `state = dict(model=model, ema=ema, ...)`) -------------
    def _dict_of_objects(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """``("dict", ((key, class ref), ...))`` for a dict written with string keys (``{"ema":
        ema}``, ``dict(ema=ema)``, or a name bound once to one) some of whose values are objects
        of a class; None otherwise."""
        entries = _dict_entries(self._bound_once(value, at))
        if entries is None:
            return None
        found = tuple((key, ref) for key, item in entries if (ref := _single(self._object_of(item, at, None))) is not None)
        return ("dict", found) if found else None

    def _dict_entry(self, expr: cst.Subscript, at: cst.CSTNode) -> Ref | None:
        """The class of ``state["ema"]``: the value that key holds in the dict ``state`` is bound
        to here, or, for a parameter, in what the callers pass (``("passed", f, "state", "ema")``)."""
        key = _string_key(expr)
        if key is None or type(expr.value) is not cst.Name:
            return None
        param = self._parameter(expr.value, at)
        if param is not None:
            return ("passed", *param, key)
        entries = _dict_entries(self._bound_once(expr.value, at))
        item = dict(entries).get(key) if entries is not None else None
        return _single(self._object_of(item, at, None)) if item is not None else None

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

    @cached_property
    def _assigned_from_calls(self) -> tuple[set[str], set[str]]:
        """Names that may hold an object of a class (the only names worth a lookup):
        assigned from a call of a class, a factory, a wrapper or a project function, from
        another name through moves (``m = m.to(d)``), loop variables over containers, and
        annotated parameters; and names assigned from a compiler (``torch.compile(f)``)."""
        objects: set[str] = set()
        compiled: set[str] = set()
        for assign in (*self.ctx.tree.nodes(cst.Assign), *self.ctx.tree.nodes(cst.AnnAssign)):
            targets = [t.target for t in assign.targets] if type(assign) is cst.Assign else [assign.target]
            names = {t.value for t in targets if type(t) is cst.Name}
            unpacked = {e.value.value for t in targets if type(t) in (cst.Tuple, cst.List) for e in t.elements if type(e.value) is cst.Name}
            if type(assign) is cst.AnnAssign and assign.value is None:
                objects |= names
                continue
            value = unwrap_moves(assign.value)
            if type(value) in (cst.Name, cst.Attribute) or type(value) is cst.Subscript and _string_key(value) is not None:
                objects |= names  # `m = self.model`, `model = model.to(device)`, `model = state["model"]`
                continue
            if type(value) is cst.Tuple:
                objects |= unpacked  # `g, d = Gen().cuda(), Disc().cuda()`
                continue
            if type(value) in _LISTS:
                objects |= names  # `heads = [Head() for _ in range(n)]`: a list of modules, maybe
                continue
            if type(value) is not cst.Call:
                continue
            objects |= unpacked  # `model, criterion = build(args)`: a factory's objects, maybe
            if self._may_build_object(value):
                objects |= names
            if self.ctx.qname(value.func) in _COMPILERS:
                compiled |= names
        for loop in (*self.ctx.tree.nodes(cst.For), *self.ctx.tree.nodes(cst.CompFor)):
            if may_iterate_modules(loop.iter):  # `for layer in self.layers`, `enumerate(blocks)`
                objects |= {n.value for n in target_names(loop.target)}
        for param in self.ctx.tree.nodes(cst.Param):
            if param.annotation is not None and _annotation_name(param.annotation.annotation) is not None:
                objects.add(param.name.value)
        return objects, compiled

    def _may_build_object(self, call: cst.Call) -> bool:
        callee = dotted(call.func) or ""
        last = callee.rsplit(".", 1)[-1]
        if names_a_class(last) or last.startswith(_FACTORY_PREFIXES) or last in CONSTRUCTORS or last in _PREPARERS:
            return True
        qualified = self.ctx.qname(call.func)
        if qualified is not None:
            return qualified in _WRAPPERS or qualified.split(".")[0] not in _NOT_PROJECT
        # a factory of this file or of a relative import (other names build nothing of the project's)
        return type(call.func) is cst.Name and (callee in self.relative or self.ctx.functions.defines(callee))

    # --- objects of the project's classes ----------------------------------------------
    def _instance_class(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The class ``expr`` is an instance of, when it may be the project's:
        ``meter = MetricLogger()``, ``self.criterion = SetCriterion()``, a loop variable
        over ``self.layers`` (``("each", refs)``)."""
        # `node = node.parent()` in a loop reaches itself: such a cycle names no class
        resolving: set[tuple[int, int]] = self.__dict__.setdefault("_resolving", set())
        key = (id(expr), id(at))
        if key in resolving or len(resolving) > 40:
            return None
        resolving.add(key)
        try:
            return self._instance_class_of(expr, at)
        finally:
            resolving.discard(key)

    def _instance_class_of(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        expr_type = type(expr)
        if expr_type is cst.Name:
            if expr.value not in self._assigned_from_calls[0]:
                return None  # never bound to anything that may be an object: skip the lookup
            reaching = self.ctx.bindings.reaching_each(expr.value, at)
            if len(reaching) > 1:  # `if sparse: model = SpGAT() else: model = GAT()`: either may run
                return either(self._binding_class(expr, b) for b in reaching)
            binding = reaching[0] if reaching else self._comprehension_binding(expr.value, at)
            if binding is not None and _is_none(binding.value):
                # `helper = Helper() if ... else None` as an if/else: a method called on it is the object's
                bindings = self.ctx.bindings
                binding = bindings.latest_before(bindings.lookup(expr.value, at), at, lambda b: not _is_none(b.value))
            found = self._binding_class(expr, binding) if binding is not None else None
            return found if found is not None else self._global_class(expr, at)
        if expr_type is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
            cls = self.ctx.tree.enclosing_class(at)
            return self._self_attribute(cls, expr.attr.value) if cls is not None else None
        keyed = _self_key(expr)
        if keyed is not None:  # `self.transformer.h`, `self.transformer["h"]` of an nn.ModuleDict
            cls = self.ctx.tree.enclosing_class(at)
            found = self._keyed_member(cls, *keyed) if cls is not None else None
            if found is not None or expr_type is cst.Attribute:
                return found
        if expr_type is cst.Subscript:  # `self.blocks[i]`, `self.heads[name]`; `state["ema"]` of a dict of objects
            return self._dict_entry(expr, at) or self._members_of(expr.value, at)
        if expr_type is cst.Call and self._getattr_of_self(expr):  # `getattr(self, f"layer{i}")`
            cls = self.ctx.tree.enclosing_class(at)
            name = expr.args[1].value
            literal = name.evaluated_value if type(name) is cst.SimpleString else None
            return (self._self_attribute(cls, literal) if isinstance(literal, str) else self._registered_members(cls, None)) if cls is not None else None
        if expr_type is cst.Attribute and type(expr.value) is cst.Subscript:  # `self.down[i].attn`
            return self._namespace_member(expr.value, expr.attr.value, at)
        return None

    def _global_class(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """A module-level global read in a function (dlrm's ``dlrm_wrap`` calls ``dlrm(X)``,
        bound in ``run()`` under ``global dlrm``, or after the ``def`` in the script's body):
        the class of any of its bindings, since the function runs after them all."""
        bindings = self.ctx.bindings.global_bindings(name.value, at)[:16]
        return either(self._binding_class(name, b) for b in bindings if not _is_none(b.value)) if bindings else None

    def _binding_class(self, expr: cst.Name, binding: Binding) -> Ref | None:
        """The class of what ``binding`` binds ``expr`` to."""
        if binding.kind == "param":
            annotated = self._annotated(binding.node.annotation, binding.node)
            param = self._parameter(expr, binding.node) if annotated is not None and annotated[0] != "each" else None
            # `def generate(model: LLaMA, ...)`: the class named, or a subclass its callers pass (lit-llama's adapter `LLaMA`)
            return either((annotated, ("passed", *param))) if param is not None else annotated
        if binding.kind in ("for", "comp"):
            iterable = self._zipped(binding.value, binding.node)
            source = iterated_item(iterable, binding.element)
            if source is None and binding.element is not None and type(iterable) in (cst.Name, cst.Attribute):
                return self._row_members(iterable, binding.element, binding.node)  # `for a, b in self.pairs`
            return self._members_of(source, binding.node) if source is not None else None
        if binding.kind != "assign":
            return None
        if binding.value is None:  # `model: Net` then assigned elsewhere
            return self._annotated(getattr(binding.node, "annotation", None), binding.node)
        if binding.element is None and (type(binding.value) in _LISTS or (type(binding.value) is cst.Call and self.ctx.qname(binding.value.func) in CONTAINERS)):
            # `blocks = []` (or `nn.ModuleList()`), then `blocks.append(Block())`
            return self._list_members(expr, binding.node)
        found = self._object_of(binding.value, binding.node, binding.element)
        if found is None and type(binding.node) is cst.AnnAssign:
            return self._annotated(binding.node.annotation, binding.node)
        return found

    def _zipped(self, iterable: cst.BaseExpression | None, at: cst.CSTNode) -> cst.BaseExpression | None:
        """What a loop iterates, through ``list(...)``/``tuple(...)`` and a local name bound once
        to such a call (DALLE's ``layers_and_args = list(zip(self.layers, args))``, then
        ``for (f, g), (f_args, g_args) in layers_and_args``): the ``zip``/``enumerate`` itself."""
        for _ in range(3):
            if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("list", "tuple") \
                    and len(iterable.args) == 1 and iterable.args[0].keyword is None and not iterable.args[0].star:
                iterable = iterable.args[0].value
            elif type(iterable) is cst.Name:
                bound = self.ctx.bindings.lookup(iterable.value, at)
                value = bound[0].value if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None else None
                if type(value) is not cst.Call or type(value.func) is not cst.Name or value.func.value not in ("list", "tuple", "zip", "enumerate"):
                    return iterable  # a list of rows (`for a, b in pairs`), or anything else: as it is
                iterable, at = value, bound[0].node
            else:
                return iterable
        return iterable

    def _getattr_of_self(self, call: cst.Call) -> bool:
        return type(call.func) is cst.Name and call.func.value == "getattr" and len(call.args) == 2 \
            and type(call.args[0].value) is cst.Name and call.args[0].value.value == "self"

    def _comprehension_binding(self, name: str, at: cst.CSTNode) -> Binding | None:
        """``[head(x) for head in self.heads.values()]``: the ``for`` of a comprehension
        comes after the call in source order, so ``reaching`` never sees it."""
        tree = self.ctx.tree
        for binding in self.ctx.bindings.lookup(name, at):
            if binding.kind == "comp":
                comprehension = next((a for a in tree.ancestors(binding.node) if type(a) is not cst.CompFor), None)  # `for a in b for c in d`
                if comprehension is not None and tree.is_inside(at, comprehension):
                    return binding
        return None

    def _object_of(self, value: cst.BaseExpression | None, at: cst.CSTNode, element: int | None) -> Ref | None:
        """The class of what ``value`` (element ``element`` of it, for ``a, b = value``) holds."""
        value, element = self._unwrapped(value, element)
        if type(value) is cst.BooleanOperation:  # `sampler or UniformSampler(diffusion)`: the one that is known
            return self._object_of(value.left, at, element) or self._object_of(value.right, at, element)
        if type(value) is cst.IfExp:  # `Flash(d) if cfg.flash else Attention(d)`: either may run
            return either((self._object_of(value.body, at, element), self._object_of(value.orelse, at, element)))
        if element is None and type(value) in _LISTS:  # `self.heads = [Head() for _ in range(n)]`
            return self._list_members(value, at)
        if element is not None and type(value) in (cst.Tuple, cst.List):
            items = value.elements
            if element >= len(items):
                return None
            value, element = self._unwrapped(items[element].value, None)
        value_type = type(value)
        if value_type is cst.Call:
            func = value.func
            if element is None:
                if type(func) is cst.Attribute and func.attr.value in CONSTRUCTORS:
                    return self._class_ref(dotted(func.value))  # `Net.from_pretrained(path)`
                name = dotted(func) or ""
                if names_a_class(name.rsplit(".", 1)[-1]):
                    owner = self._class_ref(name)
                    if owner is not None:
                        return owner
                if self.ctx.qname(func) in CONTAINERS:
                    return self._container_members(value, at)
                own = self._own_class(func, at)
                if own is not None:  # `model = cls(encoder, decoder)` in a classmethod
                    return ("local", own)
                aliased = self._aliased_class(func, value, 0) if type(func) is cst.Name else None
                if aliased is not None:  # `block = partial(ResnetBlock, ...)`, `klass = A if c else B`
                    return aliased
            return self._factory_result(self.target(func, value), element)
        if element is None and (value_type is cst.Name or value_type is cst.Attribute or value_type is cst.Subscript):
            return self._instance_class(value, at)
        if element is not None and value_type is cst.Name:  # `net_g, net_d = nets`, a parameter
            param = self._parameter(value, at)
            return ("passed", *param, element) if param is not None else None
        return None

    @staticmethod
    def _factory_result(factory: Ref | None, element: int | None) -> Ref | None:
        """What a call of a project function returns: ``build(args)``, or any of the
        functions a table holds (``MODELS[name](params)``: each one's return)."""
        if factory is not None and factory[0] in ("import", "local", "method"):  # (a classmethod that builds: `cls.from_package(p)`)
            return ("returned", factory, element)
        if factory is not None and factory[0] == "each":
            return either(("returned", one, element) for one in factory[1] if one[0] in ("import", "local"))
        return None

    def _unwrapped(self, value: cst.BaseExpression | None, element: int | None) -> tuple[cst.BaseExpression | None, int | None]:
        """``DDP(model.cuda(), device_ids=[r])`` → ``model``; ``accelerator.prepare(model, opt)``
        element 1 → ``opt``: what is wrapped or handed back keeps its class."""
        for _ in range(8):
            value = unwrap_moves(value)
            if type(value) is not cst.Call:
                break
            positional = [a.value for a in value.args if a.keyword is None and not a.star]
            func = value.func
            if self.ctx.qname(func) in _WRAPPERS and positional:
                value = positional[0]
            elif type(func) is cst.Attribute and func.attr.value in _PREPARERS and positional and self.ctx.qname(func) is None:
                if element is None and len(positional) == 1:
                    value = positional[0]
                elif element is not None and element < len(positional) and len(positional) > 1:
                    value, element = positional[element], None
                else:
                    break
            else:
                break
        return value, element

    # --- annotations, attributes, containers ---------------------------------------------
    def _annotated(self, annotation: cst.Annotation | None, at: cst.CSTNode | None = None) -> Ref | None:
        """``rollout_buffer: RolloutBuffer``, ``policy: Optional["Policy"]``: the class named."""
        if annotation is None:
            return None
        name = _annotation_name(annotation.annotation)
        if name is None:
            return None
        return self._class_ref(name)

    def _self_attribute(self, cls: cst.ClassDef, attr: str) -> Ref | None:
        """What ``self.<attr>`` holds in ``cls``: the objects built there (in any branch: each
        may run; with what is appended to a container there), else its annotation, what the
        constructor's caller passes, or what a project base class sets."""
        memo: dict[tuple[int, str], Ref | None] = self.__dict__.setdefault("_attribute_memo", {})
        key = (id(cls), attr)
        if key in memo:
            return memo[key]
        memo[key] = None  # `self.policy = self.policy.to(device)`: the cycle ends here
        built: list[Ref | None] = []
        annotated = passed = None
        bindings = self.ctx.bindings.self_attrs.get(id(cls), {}).get("self." + attr, [])
        for binding in bindings:
            if binding.kind != "assign":
                continue
            if binding.value is None:
                annotated = annotated or self._annotated(getattr(binding.node, "annotation", None), binding.node)
                continue
            if type(binding.value) is cst.Name and binding.element is None:  # `self.matcher = matcher`
                param = self._parameter(binding.value, binding.node)
                if param is not None:
                    passed = passed or self._instance_class(binding.value, binding.node) or ("passed", *param)
                    continue
            built.append(self._object_of(binding.value, binding.node, binding.element))
        # `self.layers = nn.ModuleList()`, then `self.layers.append(Block())` in a loop: what is
        # appended makes a container, even of one class (`for layer in self.layers` runs each)
        built = either((*built, as_container(either(self._appended_members(cls, attr))),
                        self._registered_members(cls, attr)))  # every branch's object: any may run; `self.add_module("conv", Conv())`
        if annotated is None:
            annotated = self._annotated(self._class_annotations(cls).get(attr), cls)
        found = built or annotated or passed
        if found is None and not bindings and attr not in self._class_annotations(cls) and self._has_project_base(cls):
            found = ("attr", self.class_keys[id(cls)], attr)  # set by a base class in another module
        memo[key] = found
        return found

    def _class_annotations(self, cls: cst.ClassDef) -> dict[str, cst.Annotation]:
        """``policy: ActorCriticPolicy`` in the class body."""
        memo: dict[int, dict[str, cst.Annotation]] = self.__dict__.setdefault("_annotations_memo", {})
        if id(cls) in memo:
            return memo[id(cls)]
        found = memo[id(cls)] = {}
        for statement in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
            if type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.AnnAssign and type(small.target) is cst.Name:
                        found[small.target.value] = small.annotation
        return found

    def _has_project_base(self, cls: cst.ClassDef) -> bool:
        for base in cls.bases:
            name = dotted(base.value)
            if name is None or base.keyword is not None:
                continue
            qualified = self.ctx.qname(base.value)
            if qualified is None or qualified.split(".")[0] not in _NOT_PROJECT:
                return name not in ("object", "ABC", "Generic", "Protocol")
        return False

    def class_attributes(self, cls: cst.ClassDef) -> tuple[tuple[str, Ref], ...]:
        """The objects a class keeps on ``self`` (for subclasses in other modules); a name
        appears once per class it may hold (two branches, a container's members)."""
        names = {name[len("self."):] for name in self.ctx.bindings.self_attrs.get(id(cls), {})} | set(self._class_annotations(cls)) \
            | {name for key, name in self._registered if key == id(cls) and name is not None}
        found = []
        for name in sorted(names):
            ref = self._self_attribute(cls, name)
            for each in (ref[1] if ref[0] == "each" else (ref,)) if ref is not None else ():
                if each[0] != "attr":
                    found.append((name, each))  # several entries: the attribute may hold any of them
        return tuple(found)

    # --- names of classes ------------------------------------------------------------------
    def _parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, str] | None:
        """(function key, name) when ``expr`` is a parameter of the enclosing function."""
        if not isinstance(expr, cst.Name) or expr.value in ("self", "cls"):
            return None
        function = self.ctx.tree.enclosing_function(at)
        if function is None:
            return None
        bound = self.ctx.bindings.lookup(expr.value, at)
        if not bound or any(b.kind != "param" for b in bound):
            return None
        while function is not None:  # a closure's free name is its factory's parameter (`model` in `get_model_fn(model)`'s `model_fn`)
            if expr.value in positional(function):
                return (self.keys[id(function)], expr.value)
            function = self.ctx.tree.enclosing_function(function)
        return None

    def _own_class(self, name: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """The class key where ``name`` is the first parameter ``cls`` of a ``@classmethod`` of it."""
        if type(name) is not cst.Name or name.value != "cls":
            return None
        function = self.ctx.tree.enclosing_function(at)
        if function is None or not any(dotted(d.decorator) == "classmethod" for d in function.decorators):
            return None
        params = function.params.params
        cls = self.ctx.tree.enclosing_class(function)
        return self.class_keys[id(cls)] if cls is not None and params and params[0].name.value == "cls" else None

    def _class_ref(self, name: str | None) -> Ref | None:
        """The class a dotted name refers to, when it may be the project's."""
        if name is None or name in _BUILTINS:
            return None
        if "." not in name and name in self._module_classes:
            return ("local", self._module_classes[name])
        head, _, rest = name.partition(".")
        if head in self.relative:
            level, module = self.relative[head]
            return ("import", level, f"{module}.{rest}" if rest else module)
        imported = self.ctx.imports.aliases.get(head)
        qualified = (f"{imported}.{rest}" if rest else imported) if imported is not None else None
        if qualified is not None and qualified.split(".")[0] not in _NOT_PROJECT:
            return ("import", 0, qualified)
        return None

    @cached_property
    def _module_classes(self) -> dict[str, str]:
        body = self.ctx.tree.module.body
        return {s.name.value: self.class_keys[id(s)] for s in body if isinstance(s, cst.ClassDef)}


def _string_key(expr: cst.Subscript) -> str | None:
    """``"ema"`` of ``state["ema"]``."""
    if len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index or type(expr.slice[0].slice.value) is not cst.SimpleString:
        return None
    key = expr.slice[0].slice.value.evaluated_value
    return key if isinstance(key, str) else None


def _dict_entries(value: cst.BaseExpression | None) -> list[tuple[str, cst.BaseExpression]] | None:
    """(key, value) of a dict written with string keys: ``{"ema": ema}``, ``dict(ema=ema)``."""
    if type(value) is cst.Dict:
        return [(e.key.evaluated_value, e.value) for e in value.elements
                if type(e) is cst.DictElement and type(e.key) is cst.SimpleString and isinstance(e.key.evaluated_value, str)]
    if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "dict":
        return [(a.keyword.value, a.value) for a in value.args if a.keyword is not None]
    return None


def _single(ref: Ref | None) -> Ref | None:
    """A reference to one class (a container's several members are not one object)."""
    return None if ref is None or ref[0] == "each" else ref


def _annotation_name(annotation: cst.BaseExpression) -> str | None:
    """The class an annotation names: ``Net``, ``models.Net``, ``"Net"``, ``Optional[Net]``,
    ``Net | None``; None for plain Python types, unions of classes and anything else."""
    if type(annotation) is cst.SimpleString:
        text = annotation.value.strip("\"'")
        return text if text.replace(".", "").replace("_", "").isalnum() and text.split(".")[-1] not in _PLAIN_TYPES else None
    if type(annotation) is cst.Subscript and (dotted(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
        inner = annotation.slice[0].slice if len(annotation.slice) == 1 else None
        return _annotation_name(inner.value) if isinstance(inner, cst.Index) else None
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:
        left, right = annotation.left, annotation.right
        if type(right) is cst.Name and right.value == "None":
            return _annotation_name(left)
        if type(left) is cst.Name and left.value == "None":
            return _annotation_name(right)
        return None
    name = dotted(annotation)
    if name is None or name.rsplit(".", 1)[-1] in _PLAIN_TYPES or not name.rsplit(".", 1)[-1][:1].isupper():
        return None
    return name


def names_a_class(name: str) -> bool:
    """``Net``, ``_WrappedModel`` (a private class): a name written as a class's."""
    return name.lstrip("_")[:1].isupper()


def unwrap_moves(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``Net(...).cuda().eval()`` → ``Net(...)``: moves and modes keep the object."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    return value


def positional(function: cst.FunctionDef) -> tuple[str, ...]:
    params = function.params
    return tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def _self_key(expr: cst.BaseExpression) -> tuple[str, str] | None:
    """(attribute, key) for ``self.<attribute>.<key>`` and ``self.<attribute>["<key>"]``."""
    if type(expr) is cst.Attribute:
        owner, key = expr.value, expr.attr.value
    elif type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Index \
            and type(expr.slice[0].slice.value) is cst.SimpleString:
        owner, key = expr.value, expr.slice[0].slice.value.evaluated_value
    else:
        return None
    if type(owner) is cst.Attribute and type(owner.value) is cst.Name and owner.value.value == "self":
        return owner.attr.value, key
    return None


def _is_none(value: cst.BaseExpression | None) -> bool:
    return type(value) is cst.Name and value.value == "None"
