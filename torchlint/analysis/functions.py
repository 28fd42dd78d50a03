"""Which function of this file a call runs: ``f()`` (a ``def`` visible where the call
is: nested ones first, then module level) or ``self.m()`` (a method of the enclosing
class). Shared by the loop, value and step analyses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.members import method_named
from torchlint.analysis.object_shapes import ENGINES, WRAPPERS, unwrap_moves
from torchlint.analysis.tree import FUNCTION_OR_CLASS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext
    from torchlint.analysis.tree import Tree


class LocalFunctions:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        # scope (module or function) -> name -> its def, None when defined there twice
        self._defined: dict[int, dict[str, cst.FunctionDef | None]] = {}
        for function in tree.nodes(cst.FunctionDef):
            parent = tree.parent(function)
            owner = tree.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
            if isinstance(owner, (cst.FunctionDef, cst.Module)):
                table = self._defined.setdefault(id(owner), {})
                name = function.name.value
                table[name] = None if name in table else function
        self._names = {name for table in self._defined.values() for name in table}

    def all_named(self, name: str) -> list[cst.FunctionDef]:
        """Every ``def name`` of the file, functions and methods of any class (what a call by a
        method name alone may run)."""
        table: dict[str, list[cst.FunctionDef]] | None = self.__dict__.get("_by_name")
        if table is None:  # built on the first question: only a decode loop's calls ask
            table = self.__dict__["_by_name"] = {}
            for function in self.tree.nodes(cst.FunctionDef):
                table.setdefault(function.name.value, []).append(function)
        return table.get(name, [])

    def defines(self, name: str) -> bool:
        """Does a function of this file (not a method) have that name?"""
        return name in self._names

    def named(self, name: str, at: cst.CSTNode) -> cst.FunctionDef | None:
        """The ``def name`` visible at ``at`` (None when there is none, or two)."""
        if name not in self._names:
            return None  # no function of this file has that name
        enclosing = self.tree.enclosing_function  # remembered up the tree: no walk per question
        function = enclosing(at)
        while function is not None:
            table = self._defined.get(id(function))
            if table is not None and name in table:
                return table[name]
            function = enclosing(function)
        return self._defined.get(id(self.tree.module), {}).get(name)

    def method(self, name: str, at: cst.CSTNode) -> cst.FunctionDef | None:
        """``def name`` in the body of the class enclosing ``at``."""
        cls = self.tree.enclosing_class(at)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return None
        methods: dict[int, dict[str, cst.FunctionDef]] = self.__dict__.setdefault("_methods", {})
        if id(cls) not in methods:  # each class's body read once: a call per method cost N² in a class of N methods
            table: dict[str, cst.FunctionDef] = {}
            for statement in cls.body.body:
                if isinstance(statement, cst.FunctionDef):
                    table.setdefault(statement.name.value, statement)  # the first `def`, as the scan found it
            methods[id(cls)] = table
        return methods[id(cls)].get(name)

    def called(self, call: cst.Call, qualified: str | None) -> cst.FunctionDef | None:
        """The function ``call`` runs; ``qualified`` is the callee's imported name, if any
        (an imported name is never a local function)."""
        # `type(...) is`, not isinstance: libcst's classes are ABCs, whose failing isinstance
        # is slow, and this is asked of most calls (no class derives from these two).
        func = call.func
        func_type = type(func)
        if func_type is cst.Name:
            return self.named(func.value, call) if qualified is None else None
        if func_type is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            return self.method(func.attr.value, call)
        return None

    def passed_to(self, param_binding) -> list[tuple[cst.BaseExpression, cst.Call]] | None:  # type: ignore[no-untyped-def]
        """What the callers of a nested function pass for one of its parameters (the
        binding of a ``param``): ``(argument, call)`` per call that passes one (a call
        that leaves it out takes the default, which must be a literal). None when that is not known: a module-level function or a
        method (other files call them), a nested one used otherwise than called (handed on
        as a callback, returned), called with ``*args``/``**kwargs``, or never called."""
        param = param_binding.node
        function = next((a for a in self.tree.ancestors(param) if type(a) is cst.FunctionDef), None)
        if function is None or type(param) is not cst.Param or param.star:
            return None
        known: dict[int, list | None] = self.__dict__.setdefault("_passed_memo", {})
        if id(param) not in known:
            known[id(param)] = self._passed(function, param)
        return known[id(param)]

    def passed_in_file(self, param_binding) -> list[tuple[cst.BaseExpression, cst.Call]] | None:  # type: ignore[no-untyped-def]
        """``passed_to`` for a module-level function too: what this file's own calls pass (a
        training script's ``train_and_evaluate(..., [optim_g, optim_d], ...)`` called from its
        ``run()``). Other files may call it with something else: only for a question about
        what this file builds. None as ``passed_to`` says, and for a method."""
        param = param_binding.node
        function = next((a for a in self.tree.ancestors(param) if type(a) is cst.FunctionDef), None)
        if function is None or type(param) is not cst.Param or param.star:
            return None
        if self.tree.parent(function) is not self.tree.module:
            return self.passed_to(param_binding)  # nested (its own callers only), or a method (None: called through objects)
        known: dict[int, list | None] = self.__dict__.setdefault("_passed_here_memo", {})
        if id(param) not in known:
            known[id(param)] = self._passed(function, param, self.tree.module)
        return known[id(param)]

    def _passed(self, function: cst.FunctionDef, param: cst.Param, owner: cst.CSTNode | None = None) -> list[tuple[cst.BaseExpression, cst.Call]] | None:
        owner = owner or self.tree.enclosing_function(function)
        if owner is None:
            return None  # module level: any file may import and call it
        name = function.name.value
        positional = [*function.params.posonly_params, *function.params.params]
        index = next((i for i, p in enumerate(positional) if p is param), None)
        found = []
        if owner is self.tree.module:  # the file's uses of the name (its index of names), and its defs
            uses = [*self.tree.names_valued(name), *(f for f in self.tree.nodes(cst.FunctionDef) if f.name.value == name)]
        else:
            uses = [n for n in self.tree.descendants(owner) if type(n) in (cst.Name, cst.FunctionDef)]
        if sum(type(n) is cst.FunctionDef and n.name.value == name for n in uses) != 1:
            return None  # two functions of that name: which one a call runs depends on the order
        for use in uses:
            if type(use) is not cst.Name or use.value != name or use is function.name:
                continue
            call = self.tree.parent(use)
            if type(call) is not cst.Call or call.func is not use:
                return None  # handed on, returned, or an argument's keyword (`f(show=...)`)
            if any(arg.star for arg in call.args):
                return None
            given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == param.name.value), None)
            if given is None and index is not None:
                plain = [a.value for a in call.args if a.keyword is None]
                given = plain[index] if index < len(plain) else None
            if given is None:
                if not _literal(param.default):
                    return None
                continue  # left out: the default, a literal, is no tensor
            found.append((given, call))
        return found or None


def built_method(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """The method of a class of this file that ``obj.method(...)`` runs, where ``obj`` is bound
    once in its scope to a construction of that class (CORL's ``trainer = TD3_BC(**kwargs)``
    then ``trainer.train(batch)``; minRF's ``rf = RF(model)`` then ``rf.forward(x, c)``)."""
    func = call.func
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
        return None
    return _method_of_built(ctx, func.value, call, func.attr.value)


def called_object_method(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """What ``obj(...)`` runs where ``obj`` is bound once in its scope to a construction of a
    class of this file: its ``__call__``, else its ``forward`` (``nn.Module.__call__`` runs it)."""
    if type(call.func) is not cst.Name:
        return None
    return _method_of_built(ctx, call.func, call, "__call__") or _method_of_built(ctx, call.func, call, "forward")


def _method_of_built(ctx: FileContext, obj: cst.Name, at: cst.CSTNode, method: str) -> cst.FunctionDef | None:
    constructed = _constructed(ctx, obj, at, 0)
    if constructed is None or type(constructed.func) is not cst.Name:
        return None
    classes = ctx.tree.classes_named(constructed.func.value)
    return method_named(classes[0], method) if len(classes) == 1 else None


def _constructed(ctx: FileContext, obj: cst.Name, at: cst.CSTNode, depth: int) -> cst.Call | None:
    """The call that built the object ``obj`` is bound to once in its scope: ``rf = RF(model)``; through
    a wrapper that runs its module (``DDP(net)``, ``torch.compile(net)``) or an engine made of it
    (``engine, *_ = deepspeed.initialize(model=rf, ...)``, minRF's ``model_engine(x, cond)``), to a
    name bound so in turn; moves and modes keep the object (``Net().cuda()``)."""
    bound = ctx.bindings.lookup(obj.value, at)
    if len(bound) != 1 or bound[0].kind != "assign" or depth > 3:
        return None
    value, element = unwrap_moves(bound[0].value), bound[0].element
    if type(value) is not cst.Call:
        return None
    qualified = ctx.qname(value.func)
    if element is not None and qualified in ENGINES:
        keyword, position = ENGINES[qualified]
        value = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == keyword), None) \
            or next((a.value for i, a in enumerate(value.args) if a.keyword is None and not a.star and i == position), None)
    elif element is None and qualified in WRAPPERS and value.args and value.args[0].keyword is None:
        value = value.args[0].value
    elif element is not None:
        return None
    value = unwrap_moves(value)
    if type(value) is cst.Name:
        return _constructed(ctx, value, bound[0].node, depth + 1)
    return value if type(value) is cst.Call else None


def _literal(default: cst.BaseExpression | None) -> bool:
    """A number, a string, ``None``, ``True`` or ``False``."""
    return type(default) in (cst.Integer, cst.Float, cst.SimpleString) or type(default) is cst.Name and default.value in ("None", "True", "False")  # type: ignore[union-attr]


def dotted_function_name(tree: Tree, function: cst.FunctionDef) -> str:
    """``Cls.m`` / ``f.inner``: the function's dotted name within its file."""
    parts = [function.name.value]
    for ancestor in tree.ancestors(function):
        if type(ancestor) in FUNCTION_OR_CLASS:
            parts.append(ancestor.name.value)
    return ".".join(reversed(parts))
