"""Host data that a torch factory could make on the device itself, with no copy: a NumPy
random draw, fill or range (``np.random.normal(0, 1, (n, d))``), or a Python list of one
number repeated (``[i] * n``); and the legacy ``torch.cuda`` classes (or names bound to
them) that copy it there. Shared by the create-then-move rule (TL110)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.host_tensors import ARITHMETIC
from torchlint.analysis.library_bases import validating_distribution
from torchlint.analysis.names import canonical

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# NumPy calls whose whole result a torch factory makes on the device itself, and that factory.
DEVICE_MAKEABLE_NUMPY = {
    "numpy.zeros": "torch.zeros", "numpy.ones": "torch.ones", "numpy.full": "torch.full", "numpy.arange": "torch.arange",
    "numpy.linspace": "torch.linspace", "numpy.eye": "torch.eye",
    "numpy.random.normal": "torch.randn", "numpy.random.randn": "torch.randn", "numpy.random.standard_normal": "torch.randn",
    "numpy.random.rand": "torch.rand", "numpy.random.random": "torch.rand", "numpy.random.random_sample": "torch.rand",
    "numpy.random.uniform": "torch.rand", "numpy.random.randint": "torch.randint",
}
# NumPy array methods that keep a makeable array makeable (a dtype, a shape).
_NUMPY_PLACE_KEEPING = frozenset({"astype", "reshape", "squeeze", "transpose", "copy", "ravel", "flatten"})


class DeviceMakeable:
    """Host data a factory could make on the device, for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def factory_for(self, data: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str | None:
        """Host data that a torch factory could make on the device itself, with no copy: a
        NumPy fill, range or random draw (``np.random.normal(0, 1, (n, d))``, through
        ``.astype``, reshapes, arithmetic with numbers and a name bound in the same loop
        body and read nowhere else), or a Python list of one number repeated (``[i] * n``).
        The factory that would (``torch.randn``, ``torch.full``), else None."""
        ctx = self.ctx
        if depth > 4:
            return None
        data_type = type(data)
        if data_type is cst.Call:
            qualified = canonical(ctx.qname(data.func))
            if qualified in DEVICE_MAKEABLE_NUMPY:
                return DEVICE_MAKEABLE_NUMPY[qualified]
            func = data.func
            if qualified is None and type(func) is cst.Attribute and func.attr.value in _NUMPY_PLACE_KEEPING:
                return self.factory_for(func.value, at, depth + 1)
            return None
        if data_type is cst.BinaryOperation and type(data.operator) is cst.Multiply:
            for side, other in ((data.left, data.right), (data.right, data.left)):
                if type(side) is cst.List and self._repeated_number(side, at):
                    return "torch.full"  # `[i] * n` (a list times anything is a repetition): one number n times
            if not any(type(side) is cst.List for side in (data.left, data.right)):
                return self._makeable_arithmetic(data, at, depth)
            return None
        if data_type is cst.BinaryOperation and type(data.operator) in ARITHMETIC:
            return self._makeable_arithmetic(data, at, depth)
        if data_type is cst.Name:
            binding = ctx.bindings.reaching(data.value, at)
            if binding is None or binding.kind != "assign" or binding.element is not None or binding.value is None:
                return None
            if not self._only_read_at(data.value, binding.node, at):
                return None  # filled, passed on, or bound outside this loop body (TL113's: the same data each step)
            return self.factory_for(binding.value, binding.node, depth + 1)
        return None

    def _makeable_arithmetic(self, data: cst.BinaryOperation, at: cst.CSTNode, depth: int) -> str | None:
        """``np.random.randn(n) * 0.1``: a makeable operand with a number."""
        for side, other in ((data.left, data.right), (data.right, data.left)):
            made = self.factory_for(side, at, depth + 1)
            if made == "torch.full" and type(data.operator) is not cst.Multiply:
                continue  # (a Python list added to is a concatenation, `[0] * 100 + [1] * 100`: two values, no fill)
            if made is not None and self.ctx.uploads.python_number(other, at):
                return made
        return None

    def _repeated_number(self, listed: cst.List, at: cst.CSTNode) -> bool:
        """``[i]`` with ``i`` a Python number: a loop counter, a constant, a size."""
        if len(listed.elements) != 1 or type(listed.elements[0]) is cst.StarredElement:
            return False
        value = listed.elements[0].value
        return self.ctx.uploads.python_number(value, at) or type(value) is cst.Name and self._counter(value.value, at)

    def _counter(self, name: str, at: cst.CSTNode) -> bool:
        """``i`` in ``for i in indices:`` with ``indices = tqdm(list(range(n))[::-1])``: a
        loop over counted positions binds a Python int."""
        binding = self.ctx.bindings.reaching(name, at)
        if binding is None or binding.kind not in ("for", "comp") or binding.element is not None or binding.value is None:
            return False
        return self._counting(binding.value, binding.node, 0)

    def _counting(self, iterable: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        if depth > 8:
            return False
        if type(iterable) is cst.Subscript:  # `list(range(n))[::-1]`
            return self._counting(iterable.value, at, depth + 1)
        if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.args:
            if iterable.func.value in ("range", "trange"):
                return True
            if iterable.func.value in ("list", "reversed", "sorted", "tqdm"):
                return self._counting(iterable.args[0].value, at, depth + 1)
            return False
        if type(iterable) is cst.Name:
            bound = [b for b in self.ctx.bindings.lookup(iterable.value, at) if self.ctx.tree.index(b.node) < self.ctx.tree.index(at)]
            return bool(bound) and all(b.kind == "assign" and b.element is None and b.value is not None
                                       and self._counting(b.value, b.node, depth + 1) for b in bound)
        return False

    def _only_read_at(self, name: str, bound: cst.CSTNode, at: cst.CSTNode) -> bool:
        """``z = np.random.normal(...)`` then ``torch.from_numpy(z)``: bound in the loop body
        ``at`` is in, and read nowhere else after (a read may fill it, or need it on the host:
        ``to_categorical(labels)`` beside ``LongTensor(labels)``)."""
        tree, loops = self.ctx.tree, self.ctx.loops
        if tree.scope_of(bound) is not tree.scope_of(at):
            return False
        loop = next(iter(loops.enclosing_loops(at)), None)
        if next(iter(loops.enclosing_loops(bound)), None) is not loop:
            return False
        scope = loop or tree.enclosing_function(at) or tree.module
        reads = tree.names_valued_between(name, tree._last_index(bound), tree._last_index(scope) + 1)
        return len(reads) == 1 and tree.is_inside(reads[0], at)

    def typed_device_class(self, func: cst.BaseExpression) -> str | None:
        """``torch.cuda.FloatTensor``, or ``Tensor`` bound to ``torch.cuda.FloatTensor if cuda
        else torch.FloatTensor``: a legacy class that builds on the device (at least when
        the device is there). That ``torch.cuda`` class, else None."""
        ctx = self.ctx
        qualified = ctx.qname(func)
        if qualified is not None:
            return qualified if qualified.startswith("torch.cuda.") and qualified.endswith("Tensor") else None
        if type(func) is not cst.Name:
            return None
        bound = ctx.bindings.module_bindings(func.value)
        if not bound or any(b.kind != "assign" or b.element is not None or b.value is None for b in bound):
            return None
        classes = [ctx.qname(leaf) or "" for b in bound for leaf in _choices(b.value)]  # type: ignore[arg-type]
        if not all(q.startswith("torch.") and q.endswith("Tensor") for q in classes):
            return None
        return next((q for q in classes if q.startswith("torch.cuda.")), None)

    def host_distribution(self, call: cst.Call) -> str | None:
        """``mask_dist.sample(shape)`` of a ``torch.distributions`` distribution built from
        Python numbers alone (decision-diffuser's ``self.mask_dist = Bernoulli(probs=1 -
        self.condition_dropout)``): a draw on the host, which a factory makes on the device
        (``torch.bernoulli(torch.full(shape, p, device=d))``). The distribution's name, else None."""
        ctx = self.ctx
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in _DRAWS:
            return None
        made = ctx.values.constructors(func.value, call)
        names = set()
        for construction in made:
            qualified = canonical(ctx.qname(construction.func)) or ""
            if not validating_distribution(qualified) or not construction.args or any(arg.star for arg in construction.args):
                return None  # not torch's (a project's class may keep its tensors anywhere), or its arguments unseen
            if not all(_host_number(ctx, arg.value, construction) for arg in construction.args
                       if arg.keyword is None or arg.keyword.value != "validate_args"):
                return None  # a parameter from a tensor: it may be on the device, and then so are its draws
            names.add(qualified.rsplit(".", 1)[-1])
        return names.pop() if len(names) == 1 else None


# A distribution's methods that draw a tensor from it.
_DRAWS = frozenset({"sample", "rsample", "sample_n"})


def _host_number(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """A Python number: a literal, a name or attribute the value analysis calls one, and
    arithmetic of those (``1 - self.condition_dropout``)."""
    if type(value) is cst.BinaryOperation:
        return _host_number(ctx, value.left, at) and _host_number(ctx, value.right, at)
    if type(value) is cst.UnaryOperation:
        return _host_number(ctx, value.expression, at)
    return type(value) in (cst.Integer, cst.Float) or ctx.values.python_value(value, at)


def _choices(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values ``a if c else b`` may take."""
    if type(value) is cst.IfExp:
        return _choices(value.body) + _choices(value.orelse)
    return [value]
