"""What functions return and what built a value: the kind a call of this file's function returns, a
Python value on sight, the ``return`` statements of a function, the calls that built a name's value
(a part of ``ValueKinds``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.functions import built_method, called_object_method
from torchlint.analysis.kind_names import NUMBERS_AND_STRINGS, annotated_python_value
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Library functions returning a tuple, and the positions in it that hold a tensor where the input
# was: `x, lengths = pad_packed_sequence(packed)` (its lengths are a CPU tensor: not listed).
_TENSOR_POSITIONS = {"torch.nn.utils.rnn.pad_packed_sequence": frozenset({0})}


class ValueReturns:
    """Returned kinds and constructing calls of one file."""

    ctx: FileContext

    def _returned_kind(self, call: cst.Call, element: int | None) -> Kind:
        """What a call of a module-level function of this file returns, when all its
        ``return``s agree; with ``element``, that position of the returned tuple."""
        if element is not None and element in _TENSOR_POSITIONS.get(self.ctx.qname(call.func) or "", ()):
            return Kind.TENSOR
        function = self._local_function(call.func)
        if function is None or id(function) in self._returning:
            return Kind.UNKNOWN  # not ours, or recursion
        if element is None and annotated_python_value(function):
            return Kind.HOST  # `def cutoff(...) -> int:`
        self._returning.add(id(function))
        try:
            kinds = set()
            for ret in self.returns_of(function):
                value = ret.value
                if element is not None:
                    if not isinstance(value, (cst.Tuple, cst.List)) or element >= len(value.elements):
                        return Kind.UNKNOWN
                    value = value.elements[element].value
                passed = self._passed_back(function, call, value) if element is None else None
                if passed is not None:  # `def layer_init(layer): ...; return layer`: what the call gives it
                    kinds.add(self.kind(passed, call))
                    continue
                kinds.add(self.kind(value, ret) if value is not None else Kind.HOST)
        finally:
            self._returning.discard(id(function))
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    def returned_values(self, call: cst.Call, element: int | None) -> list[tuple[cst.BaseExpression, cst.Return]]:
        """What a call of a function of this file, or of a method of one of its classes on an
        object built from it (``rf = RF(model)``, then ``rf.forward(x, c)``, or ``rf(x, c)``), returns: each
        ``return``'s value with its statement; with ``element``, that position of the returned
        tuple (a ``return`` of anything else adds nothing)."""
        func = call.func
        function = self.ctx.functions.called(call, self.ctx.qname(func) if type(func) is cst.Name else None) \
            or built_method(self.ctx, call) or called_object_method(self.ctx, call)
        found: list[tuple[cst.BaseExpression, cst.Return]] = []
        for ret in self.returns_of(function) if function is not None else ():
            value = ret.value
            if value is not None and element is not None:
                elements = value.elements if type(value) in (cst.Tuple, cst.List) else ()  # type: ignore[attr-defined]
                value = elements[element].value if element < len(elements) \
                    and not any(type(e) is cst.StarredElement for e in elements[:element + 1]) else None
            if value is not None:
                found.append((value, ret))
        return found

    def _passed_back(self, function: cst.FunctionDef, call: cst.Call, value: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """The argument ``call`` passes to the parameter ``value`` names, where the ``return``
        gives back a parameter (cleanrl's ``layer_init(nn.Linear(...))`` initialises the layer
        and returns it: a module); None otherwise, or where the call does not pass it."""
        if type(value) is not cst.Name:
            return None
        params = function.params.params
        for index, param in enumerate(params):
            if param.name.value != value.value:
                continue
            binding = self.ctx.bindings.reaching(value.value, value)
            if binding is None or binding.node is not param:
                return None  # rebound in the body: what it holds there is not what was passed
            keyword = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == value.value), None)
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            return keyword if keyword is not None else positional[index] if index < len(positional) else None
        return None

    def _local_function(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The ``def`` a plain name calls (one visible where it is called, never rebound)."""
        if not isinstance(func, cst.Name) or self.ctx.qname(func) is not None:
            return None
        function = self.ctx.functions.named(func.value, func)
        if function is None or self.ctx.bindings.lookup(func.value, func):
            return None
        return function

    def python_value(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Known to be a plain Python value: a literal, ``x.item()``, ``float(...)``, or a
        name or subscript the value analysis calls one. Other calls are not inferred
        (what they return may be a tensor, and asking costs more than it saves)."""
        value_type = type(value)  # exact types: libcst's ABCs make a failing isinstance slow
        if value_type in NUMBERS_AND_STRINGS:
            return True
        if value_type is cst.Call:
            func = value.func  # type: ignore[attr-defined]
            if type(func) is cst.Attribute:
                return func.attr.value in ("item", "tolist", "size", "dim", "numel") and (not value.args or func.attr.value == "size")
            return isinstance(func, cst.Name) and func.value in ("float", "int", "bool", "str", "len") and self.ctx.qname(func) is None
        return self.kind(value, at) is Kind.HOST

    def returns_of(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own ``return`` statements; none for a generator (it yields)."""
        return self._returns_by_function.get(id(function), [])

    @cached_property
    def _returns_by_function(self) -> dict[int, list[cst.Return]]:
        """Each function's own returns, from one pass over the file's returns and yields
        (every call of a local function asks for its returns)."""
        tree = self.ctx.tree
        found: dict[int, list[cst.Return]] = {}
        for node in tree.nodes(cst.Return):
            function = tree.enclosing_function(node)
            if function is not None:
                found.setdefault(id(function), []).append(node)
        for kind in (cst.Yield, cst.Await):
            for node in tree.nodes(kind):
                function = tree.enclosing_function(node)
                if function is not None:
                    found[id(function)] = []  # a generator or a coroutine
        return found

    def constructed_by(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> cst.Call | None:
        """The call that built ``expr``'s value: ``expr`` itself, or the one call every
        binding of the name ``expr`` is assigned from (``ds = TensorDataset(x, y)``)."""
        if isinstance(expr, cst.Call):
            return expr
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return None
        bound = self.ctx.bindings.lookup(name, at or expr)
        if len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None and isinstance(bound[0].value, cst.Call):
            return bound[0].value
        return None

    def constructors(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> list[cst.Call]:
        """Every call that may have built ``expr``'s value: ``expr`` itself, or the call of
        each binding of the name (``ds = A(...)`` in one branch, ``ds = A(...)`` in the
        other). Empty when a binding is anything but a call assigned whole."""
        if isinstance(expr, cst.Call):
            return [expr]
        name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None or self.ctx.qname(expr) is not None:
            return []
        bound = self.ctx.bindings.lookup(name, at or expr)
        if not bound or not all(b.kind == "assign" and b.element is None and isinstance(b.value, cst.Call) for b in bound):
            return []
        return [b.value for b in bound]  # type: ignore[misc]

    def constructors_passed(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> list[cst.Call]:
        """``constructors``, and for a parameter (or a name unpacked from one: ``optim_g, optim_d
        = optims``) the constructors of what every call of its function in this file passes
        there (``train_and_evaluate(..., [optim_g, optim_d], ...)``, each looked up at its call).
        Empty when one call passes something else, or none is in sight."""
        made = self.constructors(expr, at)
        if made or type(expr) is not cst.Name or self.ctx.qname(expr) is not None:
            return made
        bound = self.ctx.bindings.lookup(expr.value, at or expr)
        if len(bound) != 1:
            return []
        binding, element = bound[0], None
        if binding.kind == "assign" and binding.element is not None and type(binding.value) is cst.Name:
            element = binding.element  # `optim_g, optim_d = optims`: that position of what was passed
            bound = self.ctx.bindings.lookup(binding.value.value, binding.node)
            binding = bound[0] if len(bound) == 1 else binding
        if binding.kind != "param":
            return []
        passed = self.ctx.functions.passed_in_file(binding)
        found: list[cst.Call] = []
        for value, call in passed or ():
            if element is not None:
                if type(value) not in (cst.List, cst.Tuple) or element >= len(value.elements) \
                        or any(type(e) is cst.StarredElement for e in value.elements):  # type: ignore[attr-defined]
                    return []
                value = value.elements[element].value  # type: ignore[attr-defined]
            made = self.constructors(value, call)
            if not made:
                return []
            found.extend(made)
        return found
