"""How far a host tensor travels on the host (views, arithmetic, torch functions) and the move that uploads it (a part of ``Uploads``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_reach import FACTORIES
from torchlint.analysis.host_tensors import ARITHMETIC, PLACE_KEEPING
from torchlint.analysis.in_place_fills import fills_in_place
from torchlint.analysis.names import dotted
from torchlint.analysis.sync_ops import ELEMENTWISE_TESTS, SHAPE_METHODS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# In-place fills that return the tensor they fill (`torch.BoolTensor(size).fill_(0)`): the values
# change, not where it lives. A random one draws from the host's generator: no fix on the factory alone.
_FILLS = frozenset({"fill_", "zero_"})
_RANDOM_FILLS = frozenset({"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "log_normal_", "cauchy_", "geometric_"})
# Fills whose arguments are Python numbers whatever they are spelled as (`uniform_(-self.rpo_alpha, self.rpo_alpha)`):
# torch takes no tensor there (`bernoulli_(p)` and `fill_(v)` may take one).
_NUMBER_FILLS = _RANDOM_FILLS - {"bernoulli_"}
# torch functions whose result lives where their tensor arguments do.
_PLACE_KEEPING_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "exp", "log", "sin", "cos", "sqrt", "rsqrt", "pow", "outer", "cat", "stack", "cumsum", "cumprod", "flip",
    "clamp", "abs", "neg", "sigmoid", "tanh", "floor", "ceil", "round", "tril", "triu", "unsqueeze", "reshape",
    "polar", "complex", "einsum", "matmul", "mul", "add", "sub", "div", "where", "exp2", "log2", "erf",
))
_LOOKAHEAD = 6  # statements after the one that makes a tensor where its move still counts


class HostMoves:
    """Where one file's host tensors travel on the host, and the moves that upload them."""

    ctx: FileContext

    # --- how far it travels on the host ---------------------------------------------------
    def host_chain(self, made: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
        """The outermost expression that computes on the host from ``made``: through dtype
        conversions, views and reshapes (``.unsqueeze(0).expand(b, -1)``), arithmetic with
        numbers or other host-made tensors, indexing and place-keeping torch functions
        (``torch.exp(-c * torch.arange(n) / n)``). Also whether only numbers joined it (a
        ``device=`` on ``made`` alone then moves the whole computation)."""
        tree = self.ctx.tree
        current, alone = made, True
        while True:
            parent = tree.parent(current)
            parent_type = type(parent)
            if parent_type is cst.UnaryOperation and type(parent.operator) is cst.Minus:
                current = parent
            elif parent_type is cst.BinaryOperation and type(parent.operator) in ARITHMETIC:
                other = parent.right if parent.left is current else parent.left
                if self.python_number(other, parent):
                    current = parent
                elif self._factory_made(other, parent):
                    current, alone = parent, False
                elif self.loop_number(other, parent):
                    # `(torch.ones(n) * i).to(d)` over `for i in reversed(seq)`: still built on the host, but
                    # the element may be a 0-d host tensor or an array's item: no fix on the factory alone
                    current, alone = parent, False
                else:
                    return current, alone
            elif parent_type is cst.Attribute and parent.value is current:
                call = tree.parent(parent)
                if type(call) is not cst.Call or call.func is not parent:
                    return current, alone
                method = parent.attr.value
                if method in SHAPE_METHODS or self.ctx.devices.dtype_only_to(call) or method in PLACE_KEEPING and all(
                        self.python_number(a.value, call) or self._factory_made(a.value, call) for a in call.args if a.keyword is None):
                    current = call
                elif (method in _FILLS or method in _RANDOM_FILLS) and (method in _NUMBER_FILLS or all(self.python_number(a.value, call) for a in call.args)):
                    current, alone = call, alone and method in _FILLS
                else:
                    return current, alone
            elif parent_type is cst.Subscript and parent.value is current:
                current = parent
            elif parent_type is cst.ListComp and parent.elt is current:
                current = parent  # `[torch.arange(b) for _ in range(n_views)]`: the same host tensor, n times (SimCLR's labels)
            elif (compared := self._compared(parent, current)) is not None:
                # `labels.unsqueeze(0) == labels.unsqueeze(1)` of host-made tensors, or one and a number: a host mask
                comparison, other = compared
                if self.python_number(other, comparison):
                    current = comparison
                elif self._factory_made(other, comparison):
                    current, alone = comparison, False
                else:
                    return current, alone
            elif parent_type in (cst.Arg, cst.Element):
                joined = self._joining_function(parent, current)
                if joined is None:
                    return current, alone
                current, alone = joined
            else:
                return current, alone

    def _compared(self, parent: cst.CSTNode, current: cst.BaseExpression) -> tuple[cst.Comparison, cst.BaseExpression] | None:
        """(the element-wise comparison, its other side) where ``current`` is one side of one (its left, or the
        comparator a ``ComparisonTarget`` holds); None otherwise."""
        if type(parent) is cst.ComparisonTarget and parent.comparator is current:
            comparison = self.ctx.tree.parent(parent)
            if type(comparison) is cst.Comparison and len(comparison.comparisons) == 1 and type(parent.operator) in ELEMENTWISE_TESTS:
                return comparison, comparison.left
            return None
        if type(parent) is cst.Comparison and parent.left is current and len(parent.comparisons) == 1 \
                and type(parent.comparisons[0].operator) in ELEMENTWISE_TESTS:
            return parent, parent.comparisons[0].comparator
        return None

    def _joining_function(self, arg: cst.CSTNode, value: cst.BaseExpression) -> tuple[cst.Call, bool] | None:
        """``torch.exp(value)``, ``torch.cat([value, other])``: a place-keeping torch function
        whose other tensor arguments are numbers or made on the host too."""
        tree = self.ctx.tree
        holder = tree.parent(arg)
        if type(arg) is cst.Element:
            if type(holder) not in (cst.List, cst.Tuple):
                return None
            arg = tree.parent(holder)
            if type(arg) is not cst.Arg:
                return None
            holder = tree.parent(arg)
        if type(holder) is not cst.Call or self.ctx.qname(holder.func) not in _PLACE_KEEPING_FUNCTIONS or arg.keyword is not None:
            return None
        alone = True
        for other in holder.args:
            values = [e.value for e in other.value.elements] if type(other.value) in (cst.List, cst.Tuple) else [other.value]
            for item in values:
                if item is value or other.keyword is not None or self.python_number(item, holder) or type(item) is cst.SimpleString:
                    continue
                if not self._factory_made(item, holder):
                    return None  # data of its own (a batch, an array): that operand decides
                alone = False
        return holder, alone

    def _factory_made(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        made = self.made_on_host(expr, at)
        return made is not None and self.ctx.qname(made.func) in FACTORIES

    # --- the move -------------------------------------------------------------------------
    def move_of(self, expr: cst.BaseExpression) -> cst.Call | None:
        """``expr.to(device)`` / ``expr.cuda()`` right on ``expr``; or ``expr.type_as(t)`` /
        ``expr.to(t)`` with ``t`` a device tensor: to that tensor's device (and dtype)."""
        tree = self.ctx.tree
        attribute = tree.parent(expr)
        if type(attribute) is not cst.Attribute or attribute.value is not expr:
            return None
        call = tree.parent(attribute)
        if type(call) is not cst.Call or call.func is not attribute:
            return None
        if self.ctx.devices.move(call) == "device" or self.moves_like(call):
            return call
        return None

    def moves_like(self, call: cst.Call) -> bool:
        """``x.type_as(enc)``, ``x.to(enc)``: a copy to the device of ``enc``, a device tensor
        (a dtype, ``x.to(y.dtype)``, or a tensor on the host moves nothing across)."""
        ctx = self.ctx
        if ctx.method_name(call) not in ("type_as", "to") or ctx.devices.dtype_only_to(call):
            return False
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(positional) != 1 or len(call.args) > 2 or ctx.devices.device_value(positional[0], call) is not None:
            return False  # `.to(device)` is `move`'s; `.to(t, non_blocking=True)` at most one keyword more
        other = positional[0]
        return type(other) in (cst.Name, cst.Attribute, cst.Subscript) and ctx.syncs.device_tensor(other, call)

    def moved_later(self, top: cst.BaseExpression) -> cst.Call | None:
        """``x = torch.arange(n)`` then, a few statements on in the same block and with ``x``
        only reshaped on the way (``x = x.unsqueeze(0)``), ``x = x.to(device)`` or
        ``model(x.cuda())``: that move."""
        return self._moved_later(top)[0]

    def filled_from_device(self, top: cst.BaseExpression) -> tuple[cst.Assign, cst.Call] | None:
        """``x_pad = torch.zeros(b, c, t)``, ``x_pad[:, :, :n] = x`` with ``x`` a device tensor,
        then ``x = x_pad.to(x.device)``: (the fill, the move). The fill copies the device value
        to the host and waits for it, the move copies it back: a round trip (TL112), not a
        tensor the factory could have made on the device (TL110)."""
        move, fills = self._moved_later(top)
        if move is None:
            return None
        ctx = self.ctx
        for fill in fills:
            value = fill.value
            if type(value) in (cst.Name, cst.Attribute, cst.Subscript) and ctx.syncs.device_tensor(value, fill):
                return fill, move
        return None

    def _moved_later(self, top: cst.BaseExpression) -> tuple[cst.Call | None, list[cst.Assign]]:
        """:meth:`moved_later`'s move, and the item assignments that filled the tensor on the way."""
        tree = self.ctx.tree
        fills: list[cst.Assign] = []
        assign = tree.parent(top)
        if type(assign) is not cst.Assign or assign.value is not top or len(assign.targets) != 1:
            return None, fills
        name = dotted(assign.targets[0].target)
        line = tree.parent(assign)
        if name is None or type(line) is not cst.SimpleStatementLine or line.body[-1] is not assign:
            return None, fills
        tracked = {name}
        statement = line
        for _ in range(_LOOKAHEAD):
            statement = tree.next_statement(statement)
            if statement is None:
                return None, fills
            reads = [n for n in tree.descendants(statement) if type(n) in (cst.Name, cst.Attribute) and dotted(n) in tracked]
            if not reads:
                continue
            if type(statement) is cst.If:
                return self._moved_on_device(statement, tracked), fills  # `if x.is_cuda: zeros = zeros.cuda()`
            if type(statement) is not cst.SimpleStatementLine:
                return None, fills  # used in a loop or a branch: maybe on the host first, maybe not every time
            for read in reads:
                top_read, _ = self.host_chain(read)
                move = self.move_of(top_read)
                if move is not None:
                    return move, fills
            if fills_in_place(statement, tracked):
                if type(statement.body[0]) is cst.Assign:  # (an item assignment: what it copies in may live on the device)
                    fills.append(statement.body[0])
                continue  # `x[:, 0] = 4` on the host, then the move: the factory could fill it on the device
            rebound = self._reshaped(statement, tracked)
            if rebound is None:
                return None, fills  # used for something else first: the host copy may be needed
            tracked.add(rebound)
        return None, fills

    def _moved_on_device(self, branch: cst.If, tracked: set[str]) -> cst.Call | None:
        """``if x.is_cuda: zeros = zeros.cuda()`` (``torch.cuda.is_available()``,
        ``device.type == "cuda"``), no ``else``: the move of a tracked name as the branch's first
        statement that reads one. The test holds on every pass of a GPU run, so the move runs wherever it matters."""
        if branch.orelse is not None or type(branch.body) is not cst.IndentedBlock or not self.ctx.guards.device_test(branch.test, flags=False):
            return None  # a test of something else, or a flag a caller may pass off (`if on_gpu:`): the move may not run every time
        # (the moves of a branch one after another, DGI's `shuf_fts = shuf_fts.cuda()` then `lbl = lbl.cuda()`:
        # the first statement that reads a tracked name must be its move)
        for statement in branch.body.body:
            reads = [n for n in self.ctx.tree.descendants(statement) if type(n) in (cst.Name, cst.Attribute) and dotted(n) in tracked]
            if not reads:
                continue
            if type(statement) is not cst.SimpleStatementLine:
                return None
            return next((move for read in reads if (move := self.move_of(self.host_chain(read)[0])) is not None), None)
        return None

    def _reshaped(self, statement: cst.CSTNode, tracked: set[str]) -> str | None:
        """``y = x.unsqueeze(0)`` / ``x = x * 2``: a tracked name reshaped on the host into a name."""
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or type(statement.body[0]) is not cst.Assign:
            return None
        assign = statement.body[0]
        target = dotted(assign.targets[0].target) if len(assign.targets) == 1 else None
        if target is None:
            return None
        reads = [n for n in self.ctx.tree.descendants(assign.value) if type(n) in (cst.Name, cst.Attribute) and dotted(n) in tracked]
        # (each read computes on the host into the whole value: `labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()`)
        return target if reads and all(self.host_chain(read)[0] is assign.value for read in reads) else None
