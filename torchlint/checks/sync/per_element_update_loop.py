"""A device tensor updated one element at a time by a Python loop over host indices, every step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.decoding import may_run_a_model
from torchlint.analysis.impact import Cost
from torchlint.analysis.kinds import Kind
from torchlint.analysis.multiplicity import FEW_ITEMS, Repeat
from torchlint.analysis.names import dotted
from torchlint.analysis.sync_ops import plainly_python
from torchlint.checks.base import Check

# Calls that grow a host collection in place: the loop over it walks more items as the steps go on.
_GROWING = frozenset({"append", "add", "update", "extend", "setdefault", "insert"})


class PerElementUpdateLoop(Check):
    """`for n in occurrence: out[n] -= penalty(n)`, or `t[i].index_add_(...)` per batch row: a kernel or two per element, where one indexed op would do."""

    code = "TL116"
    name = "per-element-update-loop"
    cost = Cost.PER_ELEMENT_LAUNCHES
    message = ("`{head}` updates `{tensor}` one {unit} at a time (`{write}`) in {loop}: a tiny kernel launch or two per "
               "{unit} of `{items}`{grows}")
    per_step = True
    quiet_every_n = True  # (a loop every N steps costs its launches every N steps: noise)
    device_bound = True
    fix_hint = ("Update all the elements with one indexed op: gather the indices and values on the host once "
                "(`idx = torch.tensor(list(occurrence), device=out.device)`, `pen = torch.tensor([a + f * c for c in "
                "occurrence.values()], device=out.device)`), then `out[idx] -= pen` (or `out.index_add_(0, idx, -pen)`, "
                "`out.scatter_`); or keep the counts in a device tensor the size of the vocabulary and subtract it whole")

    def visit_For(self, node: cst.For) -> None:
        ctx = self.ctx
        if type(node.target) is not cst.Name or _few_literal_items(ctx, node.iter):
            return  # a loop over a few fixed items (`for i in (0, 1)`): a few launches, nothing to batch
        index = node.target.value
        write = _element_write(node, index)
        if write is None:
            self._row_updates(node, index)
            return  # no `t[n] op= value` at the loop's item
        target = write.target if type(write) is cst.AugAssign else write.targets[0].target
        tensor = target.value  # type: ignore[union-attr]
        hot = ctx.loops.hot_loop(node)
        if hot is None or hot is node or ctx.guards.rare(node, stop=hot):
            return  # not per step, or only every N steps
        if ctx.values.kind(node.iter, node) in (Kind.TENSOR, Kind.NUMPY) or ctx.syncs.tensorish(node.iter, node):
            return  # the items of a tensor or an array: 0-d tensors (TL105's reads), not host indices
        if ctx.values.kind(tensor, write) in (Kind.HOST, Kind.NUMPY) or ctx.devices.moved_to_host(tensor, write):
            return  # an array or a Python list (an element write costs well under a microsecond), or a host tensor
        if not ctx.syncs.device_tensor(tensor, write) and not _decoder_output(ctx, tensor, write, hot):
            return  # not known to be a tensor on the device
        if not _scalar_of(ctx, write.value, dotted(tensor), index, write):
            return  # a tensor value per element (a row copied in): another pattern, not a scalar update
        items = node.iter
        grows = _grown_in(ctx, items, hot, node)
        if not grows and not _many_items(ctx, items):
            return  # a setting's list (`args.token_ban`): as long as the user makes it, often one item
        head = "for " + index + " in " + short_code(ctx.module, items, limit=40)
        self.report(node, tensor=short_code(ctx.module, tensor, limit=30), write=short_code(ctx.module, write, limit=50),
                    head=head, items=short_code(ctx.module, items, limit=30),
                    grows=", which grows as the steps go on" if grows else "", unit="element", itself=Repeat("element"))


    def _row_updates(self, node: cst.For, index: str) -> None:
        """`for i in range(target_pmfs.size(0)): target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])`: a device tensor
        updated in place one row at a time over the rows of a batch (cleanrl's C51 projection), where one op over
        the flattened rows would do."""
        ctx = self.ctx
        update = _row_update(node, index)
        if update is None or ctx.places.repeat_of(node).kind != "batch row":
            return  # no in-place update of a row at the loop's item, or not a loop over a batch's rows
        tensor = update.func.value.value  # type: ignore[attr-defined]
        hot = ctx.loops.hot_loop(node)
        if hot is None or hot is node or ctx.guards.rare(node, stop=hot):
            return  # not per step, or only every N steps
        if not ctx.syncs.device_tensor(tensor, update):
            return  # not known to be a tensor on the device (a host tensor's row update launches nothing)
        items = short_code(ctx.module, node.iter, limit=40)
        self.report(node, tensor=short_code(ctx.module, tensor, limit=30), write=short_code(ctx.module, update, limit=60),
                    head=f"for {index} in {items}", items=items, grows="", unit="row", hint=_ROWS_HINT, itself=Repeat("batch row"))


_ROWS_HINT = ("Update every row with one op over the flattened tensor: offset each row's indices by its position "
              "(`offset = torch.arange(b, device=x.device)[:, None] * n`), then `x.view(-1).index_add_(0, (idx + offset).view(-1), "
              "src.view(-1))` (or `scatter_add_` along the row dimension)")
# In-place updates of a row that launch a kernel each (an index or a value of the row taken per call).
_ROW_UPDATES = frozenset({"index_add_", "scatter_add_", "scatter_", "index_copy_", "index_fill_", "index_put_", "masked_fill_",
                          "masked_scatter_", "add_", "copy_", "mul_", "sub_", "div_"})


def _row_update(loop: cst.For, index: str) -> cst.Call | None:
    """The loop body's first ``t[index].<in-place>(...)`` (``index_add_``, ``scatter_add_``, ``copy_``...) whose arguments
    take the same row of other tensors (``d_m_l[i]``): one kernel or more per row."""
    for line in loop.body.body if type(loop.body) is cst.IndentedBlock else ():
        for statement in line.body if type(line) is cst.SimpleStatementLine else ():
            call = statement.value if type(statement) is cst.Expr else None
            if type(call) is not cst.Call or type(call.func) is not cst.Attribute or call.func.attr.value not in _ROW_UPDATES:
                continue
            row = call.func.value
            if type(row) is cst.Subscript and len(row.slice) == 1 and type(row.slice[0].slice) is cst.Index \
                    and type(row.slice[0].slice.value) is cst.Name and row.slice[0].slice.value.value == index \
                    and any(_reads_row(arg.value, index) for arg in call.args):
                return call
    return None


def _reads_row(value: cst.BaseExpression, index: str) -> bool:
    """Does ``value`` take row ``index`` of something (``d_m_l[i]``, ``l[i].long()``)?"""
    nodes = [value]
    while nodes:
        node = nodes.pop()
        if type(node) is cst.Subscript and len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index \
                and type(node.slice[0].slice.value) is cst.Name and node.slice[0].slice.value.value == index:
            return True
        nodes.extend(child for child in node.children if isinstance(child, cst.BaseExpression))
    return False


def _element_write(loop: cst.For, index: str) -> cst.Assign | cst.AugAssign | None:
    """The loop body's first ``t[index] op= value`` or ``t[index] = value`` (its only index the item)."""
    for line in loop.body.body if type(loop.body) is cst.IndentedBlock else ():
        for statement in line.body if type(line) is cst.SimpleStatementLine else ():
            if type(statement) is cst.AugAssign:
                target = statement.target
            elif type(statement) is cst.Assign and len(statement.targets) == 1:
                target = statement.targets[0].target
            else:
                continue
            if type(target) is cst.Subscript and len(target.slice) == 1 and type(target.slice[0].slice) is cst.Index \
                    and type(target.slice[0].slice.value) is cst.Name and target.slice[0].slice.value.value == index:
                return statement
    return None


def _few_literal_items(ctx, items: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """A literal of a few items, or ``range(k)`` with a small constant ``k``."""
    if type(items) in (cst.List, cst.Tuple, cst.Set):
        return len(items.elements) <= FEW_ITEMS  # type: ignore[attr-defined]
    if type(items) is cst.Call and dotted(items.func) == "range" and len(items.args) == 1:
        count = ctx.constants.int_value(items.args[0].value, items)
        return count is not None and count <= FEW_ITEMS
    return False


def _many_items(ctx, items: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """A literal of more than a few items, or ``range(k)`` with a larger constant ``k``."""
    if type(items) in (cst.List, cst.Tuple, cst.Set):
        return len(items.elements) > FEW_ITEMS  # type: ignore[attr-defined]
    if type(items) is cst.Call and dotted(items.func) == "range" and len(items.args) == 1:
        count = ctx.constants.int_value(items.args[0].value, items)
        return count is not None and count > FEW_ITEMS
    return False


def _grown_in(ctx, items: cst.BaseExpression, hot: cst.CSTNode, loop: cst.For) -> bool:  # type: ignore[no-untyped-def]
    """Does the step loop ``hot`` grow the collection ``items`` names (``occurrence[token] = 1``,
    ``seen.append(token)``, ``seen.add(token)``), outside a loop over the collection itself
    (``for k in occurrence: occurrence[k] *= decay`` changes values, adds no key)?"""
    name = dotted(items)
    if name is None or type(hot) not in (cst.For, cst.While):
        return False
    tree = ctx.tree
    for node in tree.descendants(hot):
        node_type = type(node)
        if node_type is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _GROWING:
            grown = dotted(node.func.value) == name
        elif node_type in (cst.Assign, cst.AugAssign):
            targets = [t.target for t in node.targets] if node_type is cst.Assign else [node.target]
            grown = any(type(t) is cst.Subscript and dotted(t.value) == name and not plainly_python(t.slice[0].slice.value)
                        if type(t) is cst.Subscript and type(t.slice[0].slice) is cst.Index else False for t in targets)
            grown = grown and not _inside_loop_over(ctx, node, name)
        else:
            continue
        if grown and not tree.is_inside(node, loop):
            return True
    return False


def _inside_loop_over(ctx, node: cst.CSTNode, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Is ``node`` in a loop over the collection ``name`` (its keys written, none added)?"""
    return any(type(loop) is cst.For and dotted(loop.iter) == name for loop in ctx.loops.enclosing_loops(node))


def _decoder_output(ctx, tensor: cst.BaseExpression, at: cst.CSTNode, hot: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """In a decode loop, is ``tensor`` what a model call of that loop returned (``out, state =
    self.model.forward(tokens, state)``, ``out = run_rnn([token])``): the logits, where the model is?"""
    if type(tensor) is not cst.Name or not ctx.loops.decodes(hot):
        return False
    bound = ctx.bindings.lookup(tensor.value, at)
    inside = [b for b in bound if ctx.tree.is_inside(b.node, hot)]
    if not inside:
        return False
    for binding in inside:
        value = binding.value
        if binding.kind != "assign" or type(value) is not cst.Call or not may_run_a_model(ctx, value):
            return False  # bound in the loop to something else as well
    return True


def _scalar_of(ctx, value: cst.BaseExpression, tensor: str | None, index: str, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Is ``value`` a number computed on the host, give or take the element itself (``logits[t] /
    penalty``): arithmetic of Python values and ``tensor[index]``?"""
    value_type = type(value)
    if value_type is cst.BinaryOperation:
        return _scalar_of(ctx, value.left, tensor, index, at) and _scalar_of(ctx, value.right, tensor, index, at)
    if value_type is cst.UnaryOperation:
        return _scalar_of(ctx, value.expression, tensor, index, at)
    if value_type is cst.Subscript and tensor is not None and dotted(value.value) == tensor and len(value.slice) == 1 \
            and type(value.slice[0].slice) is cst.Index and type(value.slice[0].slice.value) is cst.Name \
            and value.slice[0].slice.value.value == index:
        return True  # the element being updated
    return not ctx.syncs.tensorish(value, at)
