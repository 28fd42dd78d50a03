"""Does a model's ``forward`` use every parameter its class registers? Known from the
source for this file's own ``nn.Module`` classes: every submodule and ``nn.Parameter``
assigned in ``__init__`` is read in ``forward`` (or a method of the class it calls) on
every path, and each submodule is a built-in layer or a class proved the same way."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.context import short_code
from torchlint.analysis.frozen import PARAMETER_FREE

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})
_INDEXED = frozenset({"torch.nn.ModuleList", "torch.nn.ModuleDict"})  # members may be picked one by one
# Calls that do not make modules: their results hold no parameters of the model.
_PLAIN_CALLS = frozenset({"range", "len", "int", "float", "str", "list", "tuple", "dict", "enumerate", "zip"})
# Ways to register a parameter or module this analysis does not follow.
_DYNAMIC = frozenset({"add_module", "register_module", "register_parameter", "setattr"})
# Calls that return the model they are given with some layers replaced (SyncBatchNorm).
_CONVERTERS = frozenset({"torch.nn.SyncBatchNorm.convert_sync_batchnorm", "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm"})
_MOVES = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "requires_grad_", "share_memory"})
_DEPTH = 4


class Use(enum.Enum):
    ALL = "every parameter is used on every call"
    SOME_UNUSED = "a parameter is never used by forward"
    UNKNOWN = "not known from the source"


@dataclass(frozen=True, slots=True)
class Verdict:
    use: Use
    why: str  # what was proved, or what could not be


@dataclass(frozen=True, slots=True)
class _Read:
    """One read of ``self.attr`` in ``forward``."""

    always: bool  # on every path through forward
    indexed: bool  # ``self.attr[i]``: one member of a container
    called: bool  # run as a module: ``self.attr(x)``, ``for m in self.attr``, ``self.attr[i](x)``


def _unknown(why: str) -> Verdict:
    return Verdict(Use.UNKNOWN, why)


class ParameterUse:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._classes = {c.name.value: c for c in ctx.tree.nodes(cst.ClassDef)}
        self._memo: dict[str, Verdict] = {}

    def of_model(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Verdict:
        """The verdict for the model ``expr`` (``model``, ``Net().to(rank)``) holds at ``at``."""
        return self._of_value(expr, at, 0)

    def _of_value(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> Verdict:
        ctx = self.ctx
        if depth > _DEPTH:
            return _unknown("the model is built too far from where DDP wraps it")
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
                return self._of_value(func.value, at, depth + 1)  # `Net().to(rank)`
            if isinstance(func, cst.Name) and func.value in self._classes and ctx.is_module_class(func.value):
                return self.of_class(func.value)
            qualified = ctx.qname(func) or ""
            if qualified in _CONVERTERS and expr.args:
                return self._of_value(expr.args[0].value, at, depth + 1)  # the same model, its layers swapped
            if qualified in _CONTAINERS:
                return self._of_container(expr, qualified, depth)
            if _builtin_layer(qualified):
                return Verdict(Use.ALL, f"`{qualified.rsplit('.', 1)[-1]}` uses all its parameters")
            return _unknown(f"the model comes from `{short_code(ctx.module, func)}(...)`, whose forward this file does not show")
        if isinstance(expr, cst.Name):
            binding = ctx.bindings.reaching(expr.value, at)
            if binding is None or binding.kind != "assign" or binding.value is None or binding.element is not None:
                return _unknown(f"where `{expr.value}` is built is not known here")
            return self._of_value(binding.value, binding.node, depth + 1)
        return _unknown("the model is not built in this file")

    def _of_container(self, call: cst.Call, qualified: str, depth: int) -> Verdict:
        """``nn.Sequential(A(), B())``: every member is called; a ModuleList's members may be
        indexed, so only its uses in the owner's forward say (handled by the caller)."""
        for arg in call.args:
            if arg.star or isinstance(arg.value, cst.Name):
                return _unknown(f"the members of `{qualified.rsplit('.', 1)[-1]}(...)` are built elsewhere")
        for node in self.ctx.tree.descendants(call):
            if isinstance(node, cst.Call) and node is not call:
                verdict = self._member(node, depth)
                if verdict.use is not Use.ALL:
                    return verdict
        return Verdict(Use.ALL, "every member uses all its parameters")

    def _member(self, call: cst.Call, depth: int) -> Verdict:
        func = call.func
        if isinstance(func, cst.Name) and func.value in _PLAIN_CALLS or self.ctx.qname(func) == "collections.OrderedDict":
            return Verdict(Use.ALL, "")
        if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
            return Verdict(Use.ALL, "")  # the member inside is visited on its own
        return self._of_value(call, call, depth + 1)

    def of_class(self, name: str) -> Verdict:
        """The verdict for this file's ``nn.Module`` class ``name``."""
        if name not in self._memo:
            self._memo[name] = _unknown(f"`{name}` contains itself")  # recursion ends here
            self._memo[name] = self._of_class(self._classes[name])
        return self._memo[name]

    def _of_class(self, cls: cst.ClassDef) -> Verdict:
        ctx = self.ctx
        name = cls.name.value
        if any(ctx.qname(base.value) != "torch.nn.Module" for base in cls.bases):
            return _unknown(f"`{name}` inherits from a class whose parameters this file does not show")
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
        init, forward = methods.get("__init__"), methods.get("forward")
        if init is None or forward is None:
            return _unknown(f"`{name}` has no `__init__` or no `forward` of its own")
        if any(isinstance(n, cst.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] in _DYNAMIC for n in ctx.tree.descendants(init)):
            return _unknown(f"`{name}.__init__` registers modules or parameters by name")
        reads = self._reads(forward, methods)
        if reads is None:
            return _unknown(f"`{name}.forward` returns or raises early on some paths")
        for attr, value in self._parameter_holders(init):
            sites = reads.get(attr, [])
            if isinstance(value, cst.Name) and not any(site.called for site in sites):
                continue  # `self.dim = dim`: a value passed in, which forward never runs as a module
            if not sites:
                return Verdict(Use.SOME_UNUSED, f"`{name}.forward` never uses `self.{attr}`")
            if not any(site.always for site in sites):
                return _unknown(f"`{name}.forward` uses `self.{attr}` only on some paths")
            indexed = [site.indexed for site in sites]
            if all(indexed) or self._indexed_container(value) and any(indexed):
                return _unknown(f"`{name}.forward` picks members of `self.{attr}` by index")
            verdict = self._holder(value)
            if verdict.use is not Use.ALL:
                return verdict
        return Verdict(Use.ALL, f"`{name}.forward` uses every parameter `{name}.__init__` registers")

    def _indexed_container(self, value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Call) and (self.ctx.qname(value.func) or "") in _INDEXED

    def _holder(self, value: cst.BaseExpression) -> Verdict:
        if isinstance(value, cst.Call) and (self.ctx.qname(value.func) or "") in _PARAMETER:
            return Verdict(Use.ALL, "")
        return self._of_value(value, value, 1)

    def _parameter_holders(self, init: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
        """``self.x = value`` in ``__init__`` where ``value`` may hold parameters: a call that
        is not a plain tensor or Python value, or a name (a module passed in)."""
        found = []
        for node in self.ctx.tree.descendants(init):
            if isinstance(node, cst.Assign):
                targets, value = [t.target for t in node.targets], node.value
            elif isinstance(node, cst.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                attr = dotted(target) or ""
                if attr.startswith("self.") and attr.count(".") == 1 and self._may_hold_parameters(value):
                    found.append((attr[5:], value))
        return found

    def _may_hold_parameters(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Name):
            return value.value not in ("True", "False", "None")
        if not isinstance(value, cst.Call):
            return False  # literals, arithmetic, attributes of config objects
        qualified = self.ctx.qname(value.func) or ""
        if qualified.rsplit(".", 1)[-1] in PARAMETER_FREE and qualified.startswith("torch.nn."):
            return False  # an activation, dropout or pooling layer: nothing for DDP to reduce
        if qualified in _PARAMETER or qualified in _CONTAINERS or _builtin_layer(qualified):
            return True
        if qualified.startswith("torch.") or (dotted(value.func) or "") in _PLAIN_CALLS:
            return False  # a tensor (a buffer-like value) or a Python value
        return True

    def _reads(self, forward: cst.FunctionDef, methods: dict[str, cst.FunctionDef]) -> dict[str, list[_Read]] | None:
        """The reads of each ``self.attr`` in ``forward`` and the methods of the class it
        calls; None when one of them may return early."""
        ctx = self.ctx
        reads: dict[str, list[_Read]] = {}
        todo, seen = [(forward, True)], set()
        while todo:
            function, always = todo.pop()
            if function.name.value in seen:
                continue
            seen.add(function.name.value)
            if self._leaves_early(function):
                return None
            for node in ctx.tree.descendants(function.body):
                if not (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"):
                    continue
                every_path = always and ctx.guards.runs_when_reached(node, stop=function) and not self._short_circuit(node, function)
                parent = ctx.tree.parent(node)
                indexed = isinstance(parent, cst.Subscript) and parent.value is node
                called = isinstance(parent, cst.Call) and parent.func is node or isinstance(parent, cst.For) and parent.iter is node
                reads.setdefault(node.attr.value, []).append(_Read(every_path, indexed, called or indexed))
                method = methods.get(node.attr.value)
                if method is not None and isinstance(parent, cst.Call) and parent.func is node:
                    todo.append((method, every_path))
        return reads

    def _leaves_early(self, function: cst.FunctionDef) -> bool:
        """A ``return`` that is not the function's last statement (a ``raise`` ends the step
        with no backward: it leaves no parameter without a gradient)."""
        body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
        last = body[-1] if body else None
        for node in self.ctx.tree.descendants(function.body):
            if isinstance(node, cst.Return) and self.ctx.tree.enclosing_function(node) is function:
                if not (isinstance(last, cst.SimpleStatementLine) and any(n is node for n in last.body)):
                    return True
        return False

    def _short_circuit(self, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
        """On the right of ``and``/``or``, or in a comprehension's condition: may not run."""
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is function:
                return False
            if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
                return True
            if isinstance(ancestor, cst.CompIf):
                return True
            child = ancestor
        return False


def _builtin_layer(qualified: str) -> bool:
    """``torch.nn.Linear`` and the other layers of torch.nn (a class, not a function or
    the ``Module`` base), which use every parameter they hold."""
    if not qualified.startswith("torch.nn.") or qualified.startswith(("torch.nn.functional.", "torch.nn.init.", "torch.nn.utils.", "torch.nn.parallel.")):
        return False
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and qualified not in _CONTAINERS and qualified not in _PARAMETER and last not in ("Module", "Parameter", "DataParallel")
