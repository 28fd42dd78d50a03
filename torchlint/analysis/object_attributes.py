"""Objects kept on ``self`` and named by annotations: the class of a ``self.x`` attribute (assigned,
annotated, or set by a base class in another module), a parameter, the project class a name
refers to (a part of ``ObjectRefs``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.members import as_container, either
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import annotation_name, positional, unwrap_moves
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, Ref
if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext


class ObjectAttributes:
    """The classes of a file's ``self`` attributes, annotated names and parameters."""

    ctx: FileContext
    keys: dict[int, str]
    class_keys: dict[int, str]
    relative: dict[str, tuple[int, str]]

    # --- annotations, attributes, containers ---------------------------------------------
    def _annotated(self, annotation: cst.Annotation | None, at: cst.CSTNode | None = None) -> Ref | None:
        """``rollout_buffer: RolloutBuffer``, ``policy: Optional["Policy"]``: the class named."""
        if annotation is None:
            return None
        name = annotation_name(annotation.annotation)
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
        if annotated is not None and self._built_by_kept_class(cls, bindings):
            built = None  # `self.policy = self.policy_class(...)`: a class picked at run time; `policy: ActorCriticPolicy` names it
        found = built or annotated or passed
        holder = self.attribute_holder(cls, attr) if found is None and not bindings and attr not in self._class_annotations(cls) else None
        if holder is not None and holder is not cls:
            found = self._self_attribute(holder, attr)  # set by a base class of this module: what it builds, branch by branch
        elif found is None and not bindings and attr not in self._class_annotations(cls) and self._has_project_base(cls):
            found = ("attr", self.class_keys[id(cls)], attr)  # set by a base class in another module
        memo[key] = found
        return found

    def _built_by_kept_class(self, cls: cst.ClassDef, bindings: list[Binding]) -> bool:
        """Is ``self.<attr>`` built only by calling what another attribute of ``cls`` keeps, not a method it
        defines (``self.policy = self.policy_class(...)``: the class a constructor or a table of aliases chose),
        apart from moving it (``self.policy = self.policy.to(device)``)?"""
        methods = {s.name.value for s in cls.body.body if type(s) is cst.FunctionDef} if isinstance(cls.body, cst.IndentedBlock) else set()
        calls = [unwrap_moves(b.value) for b in bindings if b.kind == "assign" and b.value is not None]
        kept = [c for c in calls if type(c) is cst.Call and type(c.func) is cst.Attribute and dotted(c.func.value) == "self"]
        return bool(kept) and all(c.func.attr.value not in methods for c in kept) \
            and all(c in kept or type(c) is cst.Attribute and dotted(c.value) == "self" for c in calls)  # type: ignore[attr-defined]

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

    def attribute_holder(self, cls: cst.ClassDef, attr: str, depth: int = 0) -> cst.ClassDef | None:
        """The class whose methods bind ``self.<attr>`` for ``cls``: itself, or the first base class of
        this module that does (OpenNMT's ``TransformerDecoderLayer`` runs the ``self.feed_forward`` its base's
        ``__init__`` built); None where none does, or a base of another module comes first (it may)."""
        if "self." + attr in self.ctx.bindings.self_attrs.get(id(cls), {}):
            return cls
        for base in cls.bases if depth < 4 else ():
            name = dotted(base.value) if base.keyword is None else None
            local = [c for c in self.ctx.tree.classes_named(name) if c is not cls] if name is not None else []
            if local:
                found = self.attribute_holder(local[0], attr, depth + 1)
                if found is not None:
                    return found
            elif name is not None and name not in ("object", "ABC", "Generic", "Protocol") \
                    and ((qualified := self.ctx.qname(base.value)) is None or qualified.split(".")[0] not in _NOT_PROJECT):
                return None  # (a project base of another module may set it: the join's to find)
        return None

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

    def copied_attributes(self, cls: cst.ClassDef) -> tuple[str, ...]:
        """The attributes ``cls`` only copies from another object it keeps, under the same name
        (rl_games' ``self.value_mean_std = self.model.value_mean_std``, in either branch of a
        conditional expression): the join looks the name up on the project's classes that keep it."""
        found = []
        for name, bindings in self.ctx.bindings.self_attrs.get(id(cls), {}).items():
            attr = name[len("self."):]
            values = [b.value for b in bindings if b.kind == "assign" and b.element is None]
            if not values or len(values) != len(bindings):
                continue  # (a parameter, an augmented or unpacked assignment: not only a copy)
            branches = [branch for value in values for branch in ((value.body, value.orelse) if type(value) is cst.IfExp else (value,))]
            chains = [dotted(branch) if type(branch) is cst.Attribute and branch.attr.value == attr else None for branch in branches]
            # (another object of `self`'s: `self.model.norm`; not a module's or a library object's by name)
            if all(chain is not None and chain.startswith("self.") and chain.count(".") >= 2 for chain in chains) \
                    and not any(self._library_built(cls, chain.split(".")[1]) for chain in chains):  # type: ignore[union-attr]
                found.append(attr)
        return tuple(sorted(found))

    def _library_built(self, cls: cst.ClassDef, attr: str) -> bool:
        """Is ``self.<attr>`` built in ``cls`` by a library's call (``timm.create_model(...)``,
        ``AutoModel.from_pretrained(...)``): its attributes are no project class's."""
        for binding in self.ctx.bindings.self_attrs.get(id(cls), {}).get("self." + attr, []):
            value = binding.value
            while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in ("to", "cuda", "eval", "from_pretrained"):
                if value.func.attr.value == "from_pretrained":
                    return True
                value = value.func.value
            qualified = self.ctx.qname(value.func) if type(value) is cst.Call else None
            if qualified is not None and qualified.split(".")[0] in _NOT_PROJECT:
                return True
        return False

    # --- names of classes ------------------------------------------------------------------
    def _parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, str] | None:
        """(function key, name) when ``expr`` is a parameter of the enclosing function."""
        if not isinstance(expr, cst.Name) or expr.value in ("self", "cls"):
            return None
        function = self.ctx.tree.enclosing_function(at)
        if function is None:
            return None
        bound = self.ctx.bindings.lookup(expr.value, at)
        if not bound or any(b.kind != "param" and not _moved_again(b, expr.value) for b in bound):
            return None  # (`model = model.to(device)` in the step keeps the object its caller passed: kospeech's trainer)
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


def _moved_again(binding: Binding, name: str) -> bool:
    """``model = model.to(device)``, ``net = net.cuda().eval()``: the name bound again to itself
    moved or put in a mode, the same object (``unwrap_moves``)."""
    if binding.kind != "assign" or binding.element is not None or type(binding.value) is not cst.Call:
        return False
    moved = unwrap_moves(binding.value)
    return type(moved) is cst.Name and moved.value == name
