"""A discounted return or GAE computed by a reversed Python loop over timesteps on device tensors."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.decoding import mentions
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import children
from torchlint.checks.base import Check

# Arithmetic that launches a kernel on a device tensor; `t + 1` in an index is host arithmetic.
_ARITHMETIC = (cst.BinaryOperation, cst.UnaryOperation)


# Fewer launches than this each time it runs (under 2.5-5 ms at 5-10 µs each) are noise in an update:
# a short rollout over many environments (Isaac Gym's 16 timesteps x 4,096) spends its time elsewhere.
_FEW_LAUNCHES = 500


class TimestepRecurrenceOnDevice(Check):
    """`for t in reversed(range(n)): advantages[t] = last = delta + g * l * last`: a few tiny kernels per timestep."""

    code = "TL115"
    name = "timestep-recurrence-on-device"
    cost = Cost.TIMESTEP_LAUNCHES
    message = ("`{head}` computes `{store}` one timestep at a time on device tensors (`{tensor}`): about {ops} tiny "
               "kernel launches per timestep{trips}, each a few microseconds of host time for a few bytes of work")
    fix_hint = ("Run the recurrence on the host: move the buffers once (`r = rewards.cpu().numpy()`, likewise values "
                "and dones), loop over NumPy rows (about a microsecond an operation), and upload the result once "
                "(`torch.as_tensor(adv, device=device)`); or compile the function with `torch.compile`")

    def visit_For(self, node: cst.For) -> None:
        ctx = self.ctx
        if type(node.target) is not cst.Name or not _backwards(ctx, node.iter):
            return  # a recurrence over time runs backwards from the last step (`reversed(range(n))`)
        step = node.target.value
        store, carried = _recurrence(node, step)
        if store is None:
            return  # no `returns[t] = ...` made from what the previous timestep made
        tensor = _device_read(ctx, node, step, store)
        if tensor is None:
            return  # NumPy arrays or Python lists: an operation costs about a microsecond, no launch
        # Once per update (after the rollout, before the epochs of minibatches): not every step, but
        # its share of the update does not shrink with the rollout's length (rules/TL115).
        bound = _trip_count(ctx, node.iter)
        ops = _launches(node.body, step)
        trips = f", {bound} timesteps: about {bound * ops:,} launches each time it runs" if bound is not None else ""
        # Under `if iteration % N == 0:` (a periodic evaluation's returns), every N updates.
        where = Where.EVERY_N if ctx.guards.rare(node) else Where.EPOCH
        few = bound is not None and bound * ops < _FEW_LAUNCHES  # a short rollout: milliseconds an update
        self.report(node, where=where, cost=Cost.SMALL_WORK if few else None,
                    head=short_code(ctx.module, node.iter, limit=50).join(("for " + step + " in ", "")), store=store,
                    tensor=tensor, ops=ops, trips=trips, related=(carried,) if carried is not None else ())


def _backwards(ctx, iterable: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``reversed(range(n))`` or ``range(n - 1, -1, -1)``."""
    if type(iterable) is not cst.Call:
        return False
    name = dotted(iterable.func)
    if name == "reversed" and len(iterable.args) == 1:
        inner = iterable.args[0].value
        return type(inner) is cst.Call and dotted(inner.func) == "range"
    if name == "range" and len(iterable.args) == 3:
        return ctx.constants.int_value(iterable.args[2].value) == -1
    return False


def _trip_count(ctx, iterable: cst.Call) -> int | None:  # type: ignore[no-untyped-def]
    """How many timesteps the loop walks, where its bound is known (`args.num_steps`'s default)."""
    if dotted(iterable.func) == "reversed":
        inner = iterable.args[0].value
        args = inner.args  # type: ignore[attr-defined]
        if len(args) == 1:
            return ctx.constants.int_value(args[0].value, iterable)
        if len(args) == 2:
            start, stop = (ctx.constants.int_value(a.value, iterable) for a in args)
            return stop - start if start is not None and stop is not None else None
        return None
    start, stop = (ctx.constants.int_value(a.value, iterable) for a in iterable.args[:2])
    return start - stop if start is not None and stop is not None else None


def _recurrence(loop: cst.For, step: str) -> tuple[str | None, cst.CSTNode | None]:
    """The buffer the loop writes at its timestep from a value carried from the previous
    timestep (``advantages[t] = lastgaelam = delta + ... * lastgaelam``, ``returns[t] =
    rewards[t] + gamma * returns[t + 1]``), and the statement carrying it; (None, None) if none."""
    assigns = [s for line in loop.body.body if type(line) is cst.SimpleStatementLine for s in line.body
               if type(s) in (cst.Assign, cst.AugAssign)]
    assigns += [s for line in _nested_statements(loop.body) for s in line.body if type(s) in (cst.Assign, cst.AugAssign)]
    carried_names = {dotted(t.target) for s in assigns if type(s) is cst.Assign for t in s.targets
                     if type(t.target) is cst.Name and t.target.value in mentions(s.value)}
    carried_names |= {dotted(s.target) for s in assigns if type(s) is cst.AugAssign and type(s.target) is cst.Name}
    for statement in assigns:
        if type(statement) is not cst.Assign:
            continue
        for target in statement.targets:
            buffer = dotted(target.target.value) if type(target.target) is cst.Subscript else None
            if buffer is not None:  # `after = returns[t + 1]`, then `returns[t] = r[t] + g * after`: carried through `after`
                carried_names |= {dotted(s.targets[0].target) for s in assigns if type(s) is cst.Assign and len(s.targets) == 1
                                  and type(s.targets[0].target) is cst.Name and buffer in mentions(s.value)}
    for statement in assigns:
        subscripts = [t.target for t in statement.targets] if type(statement) is cst.Assign else [statement.target]
        for target in subscripts:
            if type(target) is not cst.Subscript or not target.slice or step not in mentions(target.slice[0]):
                continue  # not a write at the loop's timestep
            buffer = dotted(target.value)  # type: ignore[union-attr]
            value = mentions(statement.value)
            if buffer is not None and (value & carried_names or buffer in value):
                return buffer, statement
    return None, None


def _nested_statements(block: cst.BaseSuite) -> list[cst.SimpleStatementLine]:
    """The simple statements under the ``if``/``else`` branches of a loop's body (not nested loops)."""
    found: list[cst.SimpleStatementLine] = []
    stack = [line for line in getattr(block, "body", ()) if type(line) is cst.If]
    while stack:
        branch = stack.pop()
        for part in (branch.body, getattr(branch.orelse, "body", None)):
            if part is None:
                continue
            if type(part) is cst.If:
                stack.append(part)
                continue
            for line in part.body:  # type: ignore[union-attr]
                if type(line) is cst.SimpleStatementLine:
                    found.append(line)
                elif type(line) is cst.If:
                    stack.append(line)
    return found


def _device_read(ctx, loop: cst.For, step: str, store: str) -> str | None:  # type: ignore[no-untyped-def]
    """A device tensor the loop reads at a timestep (``rewards`` of ``rewards[t]``), if any; the
    buffer it writes (``store``) where it reads no other."""
    found = None
    for node in sorted(_walk(loop.body), key=ctx.tree.index):
        if type(node) is cst.Subscript and node.slice and step in mentions(node.slice[0]):
            name = dotted(node.value)
            if name is not None and ctx.devices.on_device(node.value, node):
                if name != store:
                    return name
                found = name
    return found


def _launches(body: cst.BaseSuite, step: str) -> int:
    """The arithmetic operations a timestep runs (each a kernel on device tensors), and its stores;
    an ``if``/``else`` counts its costlier branch. Index arithmetic (``t + 1``) is not counted."""
    total = 0
    for line in getattr(body, "body", ()):
        if type(line) is cst.If:
            total += max(_launches(line.body, step), _launches(line.orelse.body, step) if line.orelse is not None else 0)  # type: ignore[union-attr]
        elif type(line) is cst.SimpleStatementLine:
            for statement in line.body:
                total += sum(1 for node in _walk(statement) if isinstance(node, _ARITHMETIC) and not _in_index(node, statement))
                if type(statement) is cst.Assign:
                    total += sum(1 for t in statement.targets if type(t.target) is cst.Subscript)  # a copy into the buffer
    return max(total, 1)


def _in_index(node: cst.CSTNode, root: cst.CSTNode) -> bool:
    """Is ``node`` inside an index under ``root`` (``values[t + 1]``)?"""
    for sub in _walk(root):
        if type(sub) is cst.Subscript and any(node is n for element in sub.slice for n in _walk(element)):
            return True
    return False


def _walk(root: cst.CSTNode) -> list[cst.CSTNode]:
    """``root`` and every node under it."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(children(node))
    return found
