"""Hidden syncs: where Python needs a device tensor's value, or its size, without a call
that says so. ``if t:``, ``all(done)``, ``int(t)``, ``min(decay, t)``, ``items[t]`` read the
value; ``x[mask]``, ``nonzero()`` and ``unique()`` make a tensor whose size only the device
knows. Each one waits for every kernel queued before it, like ``.item()``.

A value counts as a device tensor when the value analysis calls it a tensor (or the code
uses it as one: ``x.unsqueeze(0)`` in the same function) and the device analysis does not
place it on the host (a DataLoader batch not moved yet, ``torch.arange(n)``, ``.cpu()``).

``HiddenSyncs`` is made of parts: ``device_tensors`` (is it a tensor, on the device?),
``device_elements`` (a dict or list of device tensors built and handed on), ``sync_sizes`` (tensors sized by their values, boolean masks); ``sync_ops`` holds the words."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_elements import DeviceElements, may_hold_values
from torchlint.analysis.device_tensors import DeviceTensors
from torchlint.analysis.kinds import Kind
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import ELEMENTS
from torchlint.analysis.sync_ops import ARRAY_METHODS, TRUTH_BUILTINS, compared_values, plainly_python
from torchlint.analysis.sync_sizes import SizedByValues
from torchlint.analysis.tree import node_types

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchlint.analysis.context import FileContext

_SIMPLE_OR_COMPOUND = node_types(cst.SimpleStatementLine, cst.BaseCompoundStatement)
# Places inside a statement where code runs on its own terms (a branch, once per item, later).
_OWN_PLACES = node_types(cst.IfExp, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.BooleanOperation)


class HiddenSyncs(DeviceTensors, DeviceElements, SizedByValues):
    """Facts about device tensors read by Python, for one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._judging = False  # an outermost tensorish question is being answered
        self._tensorish_memo: dict[tuple[int, int], tuple[cst.CSTNode, cst.CSTNode, bool]] = {}
        # parameters taken for device tensors (`device_parameters`), `elements:name` for one whose values are
        self._assumed: frozenset[str] = frozenset()

    def in_step(self, node: cst.CSTNode) -> bool:
        """May ``node`` run every step on device tensors: in a hot loop (or a function or loop
        the project-wide join may find per-step), not in a rare branch (``step % 100 == 0``),
        not in a file whose tensors never leave the host?"""
        # The answer is the same for every node of a simple statement, unless a conditional
        # expression, a comprehension or a lambda sits between: remembered per statement.
        parents = self.ctx.tree.parents
        current = parents.get(id(node))
        while current is not None and type(current) not in _SIMPLE_OR_COMPOUND:
            if type(current) in _OWN_PLACES:
                return self._in_step(node)
            current = parents.get(id(current))
        if type(current) is not cst.SimpleStatementLine:
            return self._in_step(node)
        memo: dict[int, bool] = self.__dict__.setdefault("_in_step_memo", {})
        known = memo.get(id(current))
        if known is None:
            known = memo[id(current)] = self._in_step(node)
        return known

    def _in_step(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        place = ctx.loops.local_hot_loop(node)
        if place is not None:
            if ctx.devices.host_only():
                return False  # a file whose tensors never leave the host
        else:  # the join decides, device included (`host_only(node)` is False there)
            place = ctx.tree.enclosing_function(node) or ctx.loops.statement_loop(node)
            if place is None:
                return False
        return not ctx.guards.rare(node, stop=place)

    def reads_truth(self, expr: cst.BaseExpression, at: cst.CSTNode, traced: bool = False) -> bool:
        """Does Python take the truth value of a device tensor to evaluate ``expr`` (a
        condition): ``t``, ``not t``, ``a and t``, ``t > eps``, ``all(done)``,
        ``any(not p.isfinite().all() for p in ps)``? ``traced``: of any tensor, in code
        torch.compile traces (:meth:`traced_tensor`), where the device does not matter."""
        expr_type = type(expr)
        if expr_type is cst.BooleanOperation:
            if type(expr.operator) is cst.And and not traced and self.ctx.guards.option_off(expr.left) is not None:
                return self.reads_truth(expr.left, at)  # `args.target_kl is not None and kl > args.target_kl`: off by default, the rest never runs
            # the right side read where it stands: it runs only where the left side lets it
            # (`self.training is False and i >= n`, with `n` a device tensor only in training)
            return self.reads_truth(expr.left, at, traced) or self.reads_truth(expr.right, expr.right if at is expr else at, traced)
        if expr_type is cst.UnaryOperation and type(expr.operator) is cst.Not:
            return self.reads_truth(expr.expression, at, traced)
        is_tensor = self.traced_tensor if traced else self.device_tensor
        if expr_type is cst.Comparison:
            if len(expr.comparisons) == 1 and type(expr.comparisons[0].operator) in (cst.In, cst.NotIn):
                return not traced and self._membership_reads(expr.left, expr.comparisons[0].comparator, at)
            return any(is_tensor(o, at) for o in compared_values(expr))  # (identity, membership and a string literal read no tensor's value)
        if expr_type is cst.Call and self.truth_builtin(expr):
            return not traced and self.truth_of_each(expr.args[0].value, at)
        return is_tensor(expr, at)

    def _membership_reads(self, item: cst.BaseExpression, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``t in [eos, pad]``: a list or tuple compares its items with ``==`` and takes each result's
        truth value, a read of the device tensor per item; ``x in t`` is ``(t == x).any()`` read. A set
        or a dict hashes a tensor by its identity (no read), and a container of unknown kind may be one."""
        if self.device_tensor(container, at):
            return True
        return self.ctx.values.is_sequence_literal(container, at) and self.device_tensor(item, at)

    def per_token_stop(self, statement: cst.CSTNode) -> bool:
        """``if (idx_next == eos).all(): break`` in a decode loop of this file: a device
        tensor's truth value read once per decoded token to stop early (the read waits
        before the next token's forward can be queued). A read with ``.item()`` in the test
        is a call of its own (TL101 reports it there)."""
        ctx = self.ctx
        if type(statement) is not cst.If or not _leaves_loop(statement):
            return False
        loop = ctx.loops.statement_loop(statement)
        if loop is None or not ctx.loops.decodes(loop) or ctx.devices.host_only(statement.test):
            return False  # a decode loop's own stop check only: elsewhere TL104 (opt-in) decides
        if ctx.loops.local_hot_loop(statement) is loop and ctx.loops.where(loop) is not Where.INFER:
            return False  # a training loop that samples: its stop checks are TL104's
        if ctx.guards.rare(statement, stop=loop) or ctx.guards.rare_test(statement, loop):
            return False  # checked every N tokens: that is the fix
        if any(type(n) is cst.Call and ctx.method_name(n) in ("item", "tolist") for n in ctx.tree.descendants(statement.test)):
            return False
        return self.reads_truth(statement.test, statement.test)

    def condition_read(self, statement: cst.CSTNode, test: cst.BaseExpression) -> bool:
        """``if``/``while``/``assert``/``a if t else b`` whose ``test`` reads a device
        tensor's truth value, where it may run every step (not under a rare guard)."""
        return self.condition_runs(statement, test) and self.reads_truth(test, test)

    def condition_runs(self, statement: cst.CSTNode, test: cst.BaseExpression) -> bool:
        """Whether ``test`` runs where a read of a device tensor in it would be one per step:
        in a hot loop (or a function the join may place), in a file whose tensors may leave the
        host, not under a rare guard. What the test reads aside: where this is False, no
        caller's tensors make ``condition_read`` true (``device_parameters`` would find none)."""
        ctx = self.ctx
        loop = ctx.loops.hot_loop(test)
        if loop is None or ctx.devices.host_only(test):
            return False
        return not ctx.guards.rare(statement, stop=loop)

    def device_parameters(self, node: cst.CSTNode, holds: Callable[[], bool]) -> tuple[str, ...]:
        """The parameters of ``node``'s function, of no kind known here (no annotation but a
        tensor's, no default but None), that make ``holds()`` true when taken for device tensors:
        a sampler's ``sigmas[i] == 0`` where ``sigmas`` is what its callers pass
        (``get_sigmas_karras(..., device=device)``), an attention's ``if input_pos[-1] >= n:`` with
        ``input_pos: Optional[torch.Tensor] = None``. The join keeps such a finding where every call
        that passes the parameter passes a device tensor there (``Steps.device_params``); () when
        none does, or ``holds()`` is true as it is."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None:
            return ()
        params = {p.name.value: p for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
        open_params = {name for name, p in params.items() if name not in ("self", "cls") and _may_be_passed_a_tensor(p)}
        containers = {name for name, p in params.items() if name not in ("self", "cls") and may_hold_values(p)}
        if not open_params and not containers:
            return ()  # (checked before the names `node` reads are followed: typed code, `forward(self)`, has none)
        behind = self._names_behind(node, function)
        candidates = tuple(dict.fromkeys(name for name in behind if name in open_params))
        if not candidates or not self._holds_assuming(candidates, holds):
            # `for k, v in metrics.items(): float(v)`: holds where every call passes a dict (or list) of device tensors
            held = tuple(dict.fromkeys(f"{ELEMENTS}{name}" for name in self._names_behind(node, function, loops=True) if name in containers))
            return tuple(name for name in held if self._holds_assuming((name,), holds))
        if len(candidates) > 1:  # `x[i, :, start:end]` with `start = ids_str[i]`: `ids_str` decides, not `x`
            alone = tuple(name for name in candidates if self._holds_assuming((name,), holds))
            return alone or candidates
        return candidates

    def _holds_assuming(self, names: tuple[str, ...], holds: Callable[[], bool]) -> bool:
        """``holds()`` with ``names`` taken for device tensors; what was learnt meanwhile forgotten."""
        memos = {key: dict(value) for key, value in self.__dict__.items() if key.endswith("_memo") and isinstance(value, dict)}
        self._assumed = frozenset(names)
        try:
            return holds()
        finally:
            self._assumed = frozenset()
            self.__dict__.update(memos)  # what was learnt under the assumption is not known

    def _names_behind(self, node: cst.CSTNode, function: cst.FunctionDef, loops: bool = False) -> list[str]:
        """The names ``node`` reads, and those the values bound to them in ``function`` read
        (``idx_str = ids_str[i]``: ``ids_str``), a few assignments deep; with ``loops``, what a
        loop variable iterates too (``for k, v in metrics.items()``: ``metrics``)."""
        ctx, tree = self.ctx, self.ctx.tree
        found: list[str] = []
        frontier: list[tuple[cst.CSTNode, cst.CSTNode]] = [(node, node)]
        for _ in range(4):
            following: list[tuple[cst.CSTNode, cst.CSTNode]] = []
            for expr, at in frontier:
                for name in (n for n in ((expr,) if type(expr) is cst.Name else tree.descendants(expr)) if type(n) is cst.Name):
                    if name.value in found:
                        continue
                    found.append(name.value)
                    binding = ctx.bindings.reaching(name.value, at)
                    if binding is not None and (binding.kind == "assign" or loops and binding.kind in ("for", "comp")) \
                            and binding.value is not None and tree.is_inside(binding.node, function):
                        following.append((binding.value, binding.node))
            frontier = following
        return found

    def repeated_in_step(self, node: cst.CSTNode) -> bool | None:
        """Does ``node`` run more than once per step by the loops of its own file (a loop
        over heads or node types inside the step)? None when the project-wide join decides
        (its function or loop runs per step from elsewhere: ``Report.repeated`` waits for it).
        TL101 reports a hidden sync that repeats; TL104/TL106 (opt-in) the one that does not."""
        ctx = self.ctx
        hot = ctx.loops.local_hot_loop(node)
        if hot is None:
            return None
        return bool(ctx.places.repeats(node, ctx.places.update_loop(hot)))

    def traced_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """Is ``expr`` a tensor in code torch.compile traces: :meth:`tensorish`, or the result
        of a method only tensors and arrays have (``x.sum()``, ``h.sin()``; dynamo traces
        NumPy arrays as tensors too), a comparison with one, arithmetic on one, or a name
        bound to one of those?"""
        if depth > 4:
            return False
        expr_type = type(expr)
        if expr_type is cst.BinaryOperation:
            return self.traced_tensor(expr.left, at, depth + 1) or self.traced_tensor(expr.right, at, depth + 1)
        if expr_type is cst.UnaryOperation:
            return self.traced_tensor(expr.expression, at, depth + 1)
        if expr_type is cst.Comparison:
            return self.bool_mask(expr, at, depth + 1, traced=True)
        if expr_type is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in ARRAY_METHODS:
            if self.ctx.qname(expr.func) is None and self.ctx.values.kind(expr.func.value, at) is not Kind.HOST:
                return True
        if plainly_python(expr):
            return False
        if self.tensorish(expr, at):
            return True
        if expr_type is cst.Name:  # `y = x.sin()`, then `y > 0`
            binding = self.ctx.bindings.reaching(expr.value, at)
            value = getattr(binding, "value", None) if binding is not None and binding.kind == "assign" and binding.element is None else None
            return value is not None and self.traced_tensor(value, binding.node, depth + 1)
        return False

    def truth_builtin(self, call: cst.Call) -> bool:
        """``all(...)``/``any(...)``, the builtins (not ``torch.all``, not a method)."""
        func = call.func
        return type(func) is cst.Name and func.value in TRUTH_BUILTINS and self.ctx.qname(func) is None and len(call.args) == 1

    def truth_of_each(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``all(value)``: a device tensor (every element is read), or a generator or list of
        tests each of which reads one."""
        value_type = type(value)
        if value_type in (cst.GeneratorExp, cst.ListComp, cst.SetComp):
            return self.reads_truth(value.elt, value.elt)
        if value_type in (cst.List, cst.Tuple):
            return any(self.reads_truth(e.value, at) for e in value.elements)
        return self.device_tensor(value, at)


def _may_be_passed_a_tensor(param: cst.Param) -> bool:
    """``sigmas``, ``input_pos: Optional[torch.Tensor] = None``: a parameter whose callers decide
    what it holds, a tensor maybe. A default other than None holds when a call leaves it out
    (``scale=1.0``, ``levels=DEFAULT_LEVELS``), and the join takes a call that leaves the
    parameter out for one that passes no tensor: only None says "nothing passed"."""
    default = param.default
    if default is not None and not (type(default) is cst.Name and default.value == "None"):
        return False
    # `sigma: float` is given a 0-d tensor as often (StyleTTS2's `get_sigmas(sigma: float, ...)`, called with
    # `sigmas[i]`): what every call passes decides, as for a parameter with no annotation (`pos: int` is a
    # position or a count: a Python int)
    return param.annotation is None or _tensor_annotation(param.annotation.annotation) \
        or type(param.annotation.annotation) is cst.Name and param.annotation.annotation.value == "float"


def _tensor_annotation(annotation: cst.BaseExpression) -> bool:
    """``torch.Tensor``, ``Tensor``, ``Optional[torch.LongTensor]``, ``Tensor | None``,
    ``"torch.Tensor"``: an annotation that names a tensor (or None) and nothing else."""
    if type(annotation) is cst.SimpleString:  # a forward reference: `"torch.Tensor"`
        try:
            annotation = cst.parse_expression(annotation.evaluated_value)  # type: ignore[arg-type]
        except (cst.ParserSyntaxError, TypeError):
            return False
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:  # `Tensor | None`
        sides = [annotation.left, annotation.right]
        return all(_tensor_annotation(side) or type(side) is cst.Name and side.value == "None" for side in sides) \
            and any(_tensor_annotation(side) for side in sides)
    if type(annotation) is cst.Subscript and dotted(annotation.value) in ("Optional", "typing.Optional") and len(annotation.slice) == 1 \
            and type(annotation.slice[0].slice) is cst.Index:
        return _tensor_annotation(annotation.slice[0].slice.value)
    name = dotted(annotation)
    return name is not None and name.rsplit(".", 1)[-1].endswith("Tensor")


def _leaves_loop(branch: cst.If) -> bool:
    """Does the branch's body leave the loop (``break`` or ``return`` among its statements)?"""
    body = branch.body.body if type(branch.body) is cst.IndentedBlock else (branch.body,)
    for statement in body:
        small = statement.body if type(statement) in (cst.SimpleStatementLine, cst.SimpleStatementSuite) else ()
        if any(type(part) in (cst.Break, cst.Return) for part in small):
            return True
    return False
