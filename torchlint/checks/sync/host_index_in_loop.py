"""A device tensor indexed with an index built on the host, inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Position
from torchlint.analysis.summary import LISTED
from torchlint.checks.base import Check, Group


class HostIndexInLoop(Check):
    """`x[idx]` on a device tensor where `idx` is a host tensor, a NumPy array or a list, inside a hot loop."""

    code = "TL114"
    name = "host-index-in-loop"
    cost = Cost.UPLOAD
    message = ("`{expr}` in {loop} indexes a device tensor with an index that lives on the host: the index is copied to the device, "
               "and the host waits, on every step")
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = "Build the index on the device (`torch.arange(n, device=x.device)`, `torch.tensor(ids, device=x.device)` once before the loop)"

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        indexes = [e.slice.value for e in node.slice if type(e.slice) is cst.Index and type(e.slice.value) in _MAY_HOLD_AN_INDEX]
        if not indexes or not ctx.syncs.in_step(node):
            return
        uploads = ctx.uploads
        hosted = [index for index in indexes if uploads.host_index(index, node)]
        if hosted and _into_from_numpy(ctx, node):
            return  # `torch.from_numpy(emb[idx.numpy()])`: what is indexed is a NumPy array, whatever else the name may hold
        if not hosted:
            listed = [index for index in indexes if uploads.listed_parameter(index, node)]
            if listed and ctx.syncs.device_tensor(node.value, node):
                # `kv[source_indices]` with `source_indices` a parameter: held where every call passes a Python list
                self._found.append((node, Cost.SMALL_UPLOAD, "", None, tuple(LISTED + index.value for index in listed)))  # type: ignore[attr-defined]
            return
        if ctx.syncs.device_tensor(node.value, node):
            on_device: tuple[str, ...] = ()
        else:  # `logits[:, self.suppress_tokens]` in `apply(self, logits, tokens)`: held where every call passes a device tensor
            on_device = ctx.syncs.device_parameters(node.value, lambda: ctx.syncs.device_tensor(node.value, node))
            if not on_device:
                return
        # A written list of positions is a few bytes: its copy costs what a read does, its wait for the queue.
        cost = Cost.SMALL_UPLOAD if all(uploads.listed_index(index, node) for index in hosted) else None
        hint = _LOADER_HINT if any(uploads.index_loader_batch(index, node) for index in hosted) else ""
        self._found.append((node, cost, hint, _shared_index(ctx, hosted), on_device))

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        # (the subscript, its cost, its hint, the index it shares with others, the parameters it holds by: Report.if_device)
        self._found: list[tuple[cst.Subscript, Cost | None, str, tuple[int, int, str] | None, tuple[str, ...]]] = []

    def finish(self) -> None:
        ctx = self.ctx
        groups: dict[tuple[int, int, str], list[cst.Subscript]] = {}
        for node, _, _, shared, _ in self._found:
            if shared is not None:
                groups.setdefault(shared, []).append(node)
        for node, cost, hint, shared, if_device in self._found:
            expr = short_code(ctx.module, node, limit=60)
            group = groups.get(shared, []) if shared is not None else []
            if len(group) < 2:
                self.report(node, cost=cost, hint=hint, if_device=if_device, expr=expr)
                continue
            # One index copied K times in the step (cleanrl's `b_obs[mb_inds]`, `b_logprobs[mb_inds]`, ...):
            # one fix removes every copy, so they are one finding (the engine merges the group), placed
            # where the group's costliest wait is (a wait mid-step).
            name = shared[2]  # type: ignore[index]
            words = _GROUP_WORDS.format(name=name)
            self.report(node, cost=cost, hint=hint, placed_as=_costliest(ctx, group), expr=expr, if_device=if_device,
                        group=Group(shared, f"indexing with `{name}`", words, hint or _GROUP_HINT.format(name=name),
                                    adjacent=_an_array(ctx, group[0], name) and _adjacent(ctx, group)))


def _shared_index(ctx, hosted: list[cst.BaseExpression]) -> tuple[int, int, str] | None:  # type: ignore[no-untyped-def]
    """(the step, the index's binding, its name) where the host index is a name bound once
    where it is read (``mb_inds = b_inds[start:end]``): the indexings of one step with it share
    its copy's fix. None for an index written in place (a call, a list)."""
    if len(hosted) != 1 or type(hosted[0]) is not cst.Name:
        return None
    index = hosted[0]
    binding = ctx.bindings.reaching(index.value, index)
    if binding is None:
        return None
    step = ctx.loops.local_hot_loop(index) or ctx.tree.enclosing_function(index)
    return (id(step), id(binding.node), index.value)


def _an_array(ctx, node: cst.Subscript, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Is the shared index a NumPy array drawn where it is bound (``indices = np.random.randint(...)``)?
    A Python list (a `BatchSampler`'s batch) is converted into a tensor again at every indexing: host
    work per indexing besides its copy, which a few adjacent ones do not share."""
    binding = ctx.bindings.reaching(name, node)
    value = binding.value if binding is not None and binding.kind == "assign" else None
    return isinstance(value, cst.Call) and (ctx.qname(value.func) or "").startswith("numpy.")


def _adjacent(ctx, group: list[cst.Subscript]) -> bool:  # type: ignore[no-untyped-def]
    """Do the group's indexings stand in statements that follow one another in one block, each of
    them a plain assignment (``states = self._states[indices]``, then ``actions = ...``), with no
    model run or other device work between them?"""
    statements = [ctx.tree.statement_of(node) for node in group]
    block = ctx.tree.parent(statements[0])
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)) or any(ctx.tree.parent(statement) is not block for statement in statements):
        return False
    positions = sorted({next(i for i, each in enumerate(body) if each is statement) for statement in statements})
    if positions != list(range(positions[0], positions[0] + len(positions))):
        return False  # (something else runs between two of them: a model, a loss)
    return all(type(statement) is cst.SimpleStatementLine and all(type(small) is cst.Assign and type(small.value) is cst.Subscript
                                                                   for small in statement.body) for statement in statements)


def _costliest(ctx, group: list[cst.Subscript]) -> cst.Subscript:  # type: ignore[no-untyped-def]
    """The member of a group whose wait costs most: the first with device work queued before
    it in the step (a wait mid-step), else the last (the first may stand at the step's start)."""
    for node in group:
        loop = ctx.loops.local_hot_loop(node)
        step = ctx.places.update_loop(loop) if loop is not None else ctx.tree.enclosing_function(node)
        if ctx.places.position(node, step) is Position.MID_STEP:
            return node
    return group[-1]


def _into_from_numpy(ctx, node: cst.Subscript) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` the array given to ``torch.from_numpy``, which takes only a NumPy array?"""
    parent = ctx.tree.parent(node)
    parent = ctx.tree.parent(parent) if type(parent) is cst.Arg else None
    return type(parent) is cst.Call and ctx.call_name(parent) == "torch.from_numpy"


# ({count} and {lines} the engine fills in: how many indexings the group holds, where the others are)
_GROUP_WORDS = " ({{count}} indexings with `{name}` in this step{{lines}}, each a copy and a wait: building `{name}` on the device once removes them all)"
_GROUP_HINT = ("Build `{name}` on the device once (`b_inds = torch.randperm(n, device=x.device)` before the loop, slices of it per step; "
               "or `{name} = torch.as_tensor({name}, device=x.device)` once): every indexing with it in the step then stays on the device")
_LOADER_HINT = ("Draw the step's indices on the device: `for perm in torch.randperm(n, device=x.device).split(batch_size):` "
                "(no per-step collation of Python ints on the host, no copy)")
# Index expressions that may be an index array (a number, a slice, a string or `None` never is).
_MAY_HOLD_AN_INDEX = frozenset({cst.Name, cst.Call, cst.List, cst.ListComp, cst.Subscript, cst.Attribute})
