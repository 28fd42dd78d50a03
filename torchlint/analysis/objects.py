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
classes come from ``aliases.py``.

``ObjectRefs`` is made of parts: ``object_flow`` (what factories return, what calls pass),
``object_attributes`` (``self`` attributes, annotations, parameters); ``object_shapes`` holds
its words and small tests."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.aliases import AliasRefs
from torchlint.analysis.members import CONTAINERS, MemberRefs, calls_element, either, iterated_item, may_iterate_modules, sliced, target_names
from torchlint.analysis.names import dotted
from torchlint.analysis.object_attributes import ObjectAttributes
from torchlint.analysis.object_flow import ObjectFlow
from torchlint.analysis.object_shapes import (
    CONSTRUCTORS, FACTORY_PREFIXES, LISTS, PREPARERS, WRAPPERS, annotation_name, is_none, names_a_class, self_key, string_key,
    unwrap_moves,
)
from torchlint.analysis.summary import _NOT_PROJECT, Ref, callers_first

if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext

_COMPILERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial", "torch.func.functional_call"})


class ObjectRefs(ObjectFlow, ObjectAttributes, MemberRefs, AliasRefs):
    """Class references for objects (see the reference kinds in steps.py)."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    relative: dict[str, tuple[int, str]]

    def target(self, func: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:  # pragma: no cover - StepSummarizer's
        raise NotImplementedError

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
            if type(value) is cst.IfExp:  # `actor = (Det() if c else Gaussian()).to(d)`: either branch may build it
                branches = [unwrap_moves(b) for b in (value.body, value.orelse)]
                if any(type(b) is cst.Call and self._may_build_object(b) or type(b) in (cst.Name, cst.Attribute) for b in branches):
                    objects |= names
                continue
            if type(value) in (cst.Name, cst.Attribute) or type(value) is cst.Subscript and string_key(value) is not None:
                objects |= names  # `m = self.model`, `model = model.to(device)`, `model = state["model"]`
                continue
            if type(value) is cst.Tuple:
                objects |= unpacked  # `g, d = Gen().cuda(), Disc().cuda()`
                continue
            if type(value) in LISTS:
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
            names = {n.value for n in target_names(loop.target)}
            # `for layer in self.layers`, `enumerate(blocks)`; `self.layers[:n_q]` where the loop calls `layer(x)`
            if may_iterate_modules(loop.iter) or type(loop) is cst.For and may_iterate_modules(loop.iter, calls_element(self.ctx.loops.loop_calls(loop), names)):
                objects |= names
        for param in self.ctx.tree.nodes(cst.Param):
            if param.annotation is not None and annotation_name(param.annotation.annotation) is not None \
                    or type(param.default) is cst.Call and self._may_build_object(param.default):  # `sampler=VSampler()`
                objects.add(param.name.value)
        for assign in self.ctx.tree.nodes(cst.Assign):
            # `lm = model.get_lm_model()`: what a method of an object of the project's returns may be one too
            # (the join follows the method's returns); not a method of any other value (`y = x.sum()`)
            value = unwrap_moves(assign.value)
            if type(value) is cst.Call and type(value.func) is cst.Attribute and type(value.func.value) is cst.Name \
                    and value.func.value.value in objects:
                objects |= {t.target.value for t in assign.targets if type(t.target) is cst.Name}
        return objects, compiled

    def _may_build_object(self, call: cst.Call) -> bool:
        callee = dotted(call.func) or ""
        last = callee.rsplit(".", 1)[-1]
        if names_a_class(last) or last.startswith(FACTORY_PREFIXES) or last in CONSTRUCTORS or last in PREPARERS:
            return True
        qualified = self.ctx.qname(call.func)
        if qualified is not None:
            return qualified in WRAPPERS or qualified.split(".")[0] not in _NOT_PROJECT
        # a factory of this file or of a relative import (other names build nothing of the project's); or a class
        # its callers hand the function (score_sde's `corrector_obj = corrector(sde, score_fn, snr, n_steps)`)
        return type(call.func) is cst.Name and (callee in self.relative or self.ctx.functions.defines(callee) or self._handed_in(call.func))

    def _handed_in(self, name: cst.Name) -> bool:
        """Is ``name`` a parameter of the function around it (what its callers pass, a class maybe)?"""
        bound = self.ctx.bindings.lookup(name.value, name)
        return len(bound) == 1 and bound[0].kind == "param"

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
            if expr.value == "self" and self._first_parameter(at):
                # `model = self if self._fsdp is None else self._fsdp`, then `model(x)`: the object itself, as `self(x)`
                cls = self.ctx.tree.enclosing_class(at)
                return ("local", self.class_keys[id(cls)]) if cls is not None and id(cls) in self.class_keys else None
            if expr.value not in self._assigned_from_calls[0]:
                return None  # never bound to anything that may be an object: skip the lookup
            reaching = self.ctx.bindings.reaching_each(expr.value, at)
            if len(reaching) > 1:  # `if sparse: model = SpGAT() else: model = GAT()`: either may run
                return either(self._binding_class(expr, b) for b in reaching)
            binding = reaching[0] if reaching else self._comprehension_binding(expr.value, at)
            if binding is not None and is_none(binding.value):
                # `helper = Helper() if ... else None` as an if/else: a method called on it is the object's
                bindings = self.ctx.bindings
                binding = bindings.latest_before(bindings.lookup(expr.value, at), at, lambda b: not is_none(b.value))
            found = self._binding_class(expr, binding) if binding is not None else None
            return found if found is not None else self._global_class(expr, at)
        if expr_type is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
            cls = self.ctx.tree.enclosing_class(at)
            return self._self_attribute(cls, expr.attr.value) if cls is not None else None
        keyed = self_key(expr)
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

    def _first_parameter(self, at: cst.CSTNode) -> bool:
        """Is ``self`` at ``at`` the first parameter of the method around it (not a name bound otherwise)?"""
        bound = self.ctx.bindings.lookup("self", at)
        return len(bound) == 1 and bound[0].kind == "param" and type(bound[0].node) is cst.Param

    def _global_class(self, name: cst.Name, at: cst.CSTNode) -> Ref | None:
        """A module-level global read in a function (dlrm's ``dlrm_wrap`` calls ``dlrm(X)``,
        bound in ``run()`` under ``global dlrm``, or after the ``def`` in the script's body):
        the class of any of its bindings, since the function runs after them all."""
        bindings = self.ctx.bindings.global_bindings(name.value, at)[:16]
        return either(self._binding_class(name, b) for b in bindings if not is_none(b.value)) if bindings else None

    def _binding_class(self, expr: cst.Name, binding: Binding) -> Ref | None:
        """The class of what ``binding`` binds ``expr`` to."""
        if binding.kind == "param":
            # `sampler=VSampler()`, `sampler: Sampler`: what the default builds, else the class annotated (where
            # an abstract method of it is called, each subclass's); both only where no caller passes a project
            # class (StyleTTS2's `DiffusionSampler(sampler=ADPM2Sampler())` runs ADPM2's, not VSampler's)
            default = binding.node.default
            fallback = (self._object_of(default, binding.node, None) if type(default) is cst.Call else None) \
                or self._annotated(binding.node.annotation, binding.node)
            param = self._parameter(expr, binding.node) if fallback is not None else None
            # `def generate(model: LLaMA, ...)`: a subclass its callers pass (lit-llama's adapter `LLaMA`), else the class named
            return callers_first(("passed", *param), fallback) if param is not None else fallback
        if binding.kind in ("for", "comp"):
            iterable = self._zipped(binding.value, binding.node)
            source = iterated_item(iterable, binding.element, dict_views=True)
            if sliced(source) is not None and type(binding.node) is cst.For \
                    and calls_element(self.ctx.loops.loop_calls(binding.node), {expr.value}):
                source = sliced(source)  # `for layer in self.layers[:n_q]: layer(residual)`: some of its members, each
            inner = _nested_position(binding.node, binding.element, expr)
            if inner is not None and type(source) is cst.Call and type(source.func) is cst.Name and source.func.value in ("zip", "enumerate"):
                source = iterated_item(source, inner, dict_views=True)  # `for i, (block, kv) in enumerate(zip(self.h, past))`
            if source is None and binding.element is not None and type(iterable) in (cst.Name, cst.Attribute):
                return self._row_members(iterable, binding.element, binding.node)  # `for a, b in self.pairs`
            return self._members_of(source, binding.node) if source is not None else None
        if binding.kind != "assign":
            return None
        if binding.value is None:  # `model: Net` then assigned elsewhere
            return self._annotated(getattr(binding.node, "annotation", None), binding.node)
        if binding.element is None and (type(binding.value) in LISTS or (type(binding.value) is cst.Call and self.ctx.qname(binding.value.func) in CONTAINERS)):
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
        if element is None and type(value) in LISTS:  # `self.heads = [Head() for _ in range(n)]`
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
        if factory is not None and factory[0] in ("import", "local", "method", "object"):  # (a classmethod that builds: `cls.from_package(p)`)
            return ("returned", factory, element)
        if factory is not None and factory[0] == "each":
            return either(("returned", one, element) for one in factory[1] if one[0] in ("import", "local", "object"))
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
            if self.ctx.qname(func) in WRAPPERS and positional:
                value = positional[0]
            elif type(func) is cst.Attribute and func.attr.value in PREPARERS and positional and self.ctx.qname(func) is None:
                if element is None and len(positional) == 1:
                    value = positional[0]
                elif element is not None and element < len(positional) and len(positional) > 1:
                    value, element = positional[element], None
                else:
                    break
            else:
                break
        return value, element


def _nested_position(loop: cst.CSTNode, outer: int | None, name: cst.Name) -> int | None:
    """The position of ``name`` in the tuple at position ``outer`` of a loop's target (``block`` in
    ``for i, (block, kv) in ...``: 0), or None where the target has no such nested tuple."""
    target = getattr(loop, "target", None)
    if outer is None or not isinstance(target, (cst.Tuple, cst.List)) or outer >= len(target.elements):
        return None
    nested = target.elements[outer].value
    if not isinstance(nested, (cst.Tuple, cst.List)):
        return None
    return next((i for i, e in enumerate(nested.elements) if type(e.value) is cst.Name and e.value.value == name.value), None)
