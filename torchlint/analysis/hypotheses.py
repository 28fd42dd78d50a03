"""A beam search's hypotheses as records, and the records it makes for its next pass.

``for hyp in hyps: ys = hyp['yseq']; ...; new_hyp['yseq'] = torch.cat([hyp['yseq'], tok]);
kept.append(new_hyp)``, then ``hyps = sorted(kept)[:beam]``: each field of the next pass's
hypothesis is written from what this pass has, and read back as the same field of ``hyp``.
Records are dicts (``hyp['yseq']``), objects (``hyp.yseq``, ``Hyp(yseq=...)``) or tuples
(``for seq, score in beams:``, ``kept.append((seq2, s))``). TL407 (analysis/prefix.py) asks
which of them grow by a token the model made, and which carry a cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import derived, targets
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import children

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# (einops' `pack([seq, tok], 'b *')` joins along the starred axis and returns the packed shapes too:
# `seq, _ = pack([seq, tok], 'b *')`, PaLM-rlhf-pytorch's `generate`)
CONCATENATIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.hstack", "torch.column_stack", "einops.pack"})

# Each field of a record by one name: `hyp['yseq']`, `hyp.yseq`, `hyp[0]`, or the name a tuple
# target binds (`for seq, score in beams:`).
Field = str | int


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record a beam search makes for the next pass (``new_hyp``, appended to the list that
    becomes ``hyps``), as the fields of ``for hyp in hyps:`` it stands for."""

    current: dict[Field, frozenset[str]]  # each field, by the names the current record reads it by
    parts: dict[Field, list[tuple[cst.CSTNode, cst.BaseExpression]]]  # each field: what is written into it, where
    name: str  # the new record's name ("" for a literal appended whole)


def new_records(nodes: list[cst.CSTNode], ordered: list[cst.CSTNode]) -> list[NewRecord]:
    """The records a beam search's body makes for its next pass: for ``for hyp in hyps:`` over
    what the body rebinds, each value appended to a list that becomes ``hyps`` (``kept.append(new_hyp)``,
    ``hyps = sorted(kept)[:beam]``)."""
    rebound = {name for n in ordered if type(n) is cst.Assign for name in targets(n, items=False)}
    searches = [n for n in nodes if type(n) is cst.For and dotted(n.iter) in rebound]
    if not searches:
        return []
    appends = [n for n in nodes if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "append" and len(n.args) == 1]
    found: list[NewRecord] = []
    for search in searches:
        hyps = dotted(search.iter)
        for append in appends:
            kept = dotted(append.func.value)  # type: ignore[attr-defined]
            if kept is None or hyps not in derived(ordered, {kept}):
                continue
            new = append.args[0].value
            parts = _record_parts(nodes, new, append)
            current = {key: names for key in parts if (names := _current_field(search.target, key))}
            if current:
                found.append(NewRecord(current, parts, dotted(new) if type(new) is cst.Name else ""))
    return found


def _record_parts(nodes: list[cst.CSTNode], new: cst.BaseExpression, at: cst.CSTNode) -> dict[Field, list[tuple[cst.CSTNode, cst.BaseExpression]]]:
    """What each field of record ``new`` is written from: ``new['yseq'] = v`` (also into a slice
    of it, ``new['yseq'][:, :n] = v``), ``new.yseq = v``, a literal ``{'yseq': v}``, ``Hyp(yseq=v)``,
    ``(v, score)`` (by position)."""
    parts: dict[Field, list[tuple[cst.CSTNode, cst.BaseExpression]]] = {}
    literals: list[tuple[cst.CSTNode, cst.BaseExpression]] = [(at, new)]
    name = new.value if type(new) is cst.Name else None
    for node in nodes if name is not None else ():
        if type(node) is not cst.Assign:
            continue
        for target in node.targets:
            if dotted(target.target) == name:
                literals.append((node, node.value))  # `new_hyp = {'score': s, 'yseq': seq}`
            elif (key := _field_key(target.target, name)) is not None:
                parts.setdefault(key, []).append((node, node.value))
    for statement, literal in literals:
        if type(literal) is cst.Dict:
            for element in literal.elements:
                if type(element) is cst.DictElement and (key := _literal_key(element.key)) is not None:
                    parts.setdefault(key, []).append((statement, element.value))
        elif type(literal) is cst.Call:
            for arg in literal.args:
                if arg.keyword is not None:
                    parts.setdefault(arg.keyword.value, []).append((statement, arg.value))
        elif type(literal) in (cst.Tuple, cst.List):
            for position, element in enumerate(literal.elements):  # type: ignore[attr-defined]
                parts.setdefault(position, []).append((statement, element.value))
    return parts


def _field_key(target: cst.BaseExpression, record: str) -> Field | None:
    """The field of ``record`` an assignment target writes: ``new['yseq']``, ``new['yseq'][:, n]``, ``new.yseq``."""
    node = target
    while type(node) in (cst.Subscript, cst.Attribute):
        inner = node.value  # type: ignore[attr-defined]
        if type(inner) is cst.Name and inner.value == record:
            if type(node) is cst.Attribute:
                return node.attr.value  # type: ignore[attr-defined]
            return index_key(node)  # type: ignore[arg-type]
        node = inner
    return None


def index_key(expr: cst.Subscript) -> Field | None:
    index = expr.slice[0].slice if len(expr.slice) == 1 else None
    return _literal_key(index.value) if type(index) is cst.Index else None


def _literal_key(expr: cst.BaseExpression | None) -> Field | None:
    if type(expr) in (cst.SimpleString, cst.Integer):
        value = expr.evaluated_value  # type: ignore[union-attr]
        return value if isinstance(value, (str, int)) else None
    return None


def field_name(expr: cst.BaseExpression) -> str | None:
    """``hyp['yseq']`` or ``hyp[0]`` as one name (``hyp.yseq`` is ``dotted``'s)."""
    base = dotted(expr.value) if type(expr) is cst.Subscript else None
    key = index_key(expr) if base is not None else None  # type: ignore[arg-type]
    return f"{base}[{key!r}]" if key is not None else None


def _current_field(target: cst.BaseExpression, key: Field) -> frozenset[str]:
    """The names by which ``for <target> in hyps:`` reads field ``key`` of the current record."""
    if type(target) is cst.Name:
        return frozenset({f"{target.value}[{key!r}]", f"{target.value}.{key}"} if isinstance(key, str) else {f"{target.value}[{key!r}]"})
    if type(target) in (cst.Tuple, cst.List) and isinstance(key, int) and key < len(target.elements):  # type: ignore[attr-defined]
        name = dotted(target.elements[key].value)  # type: ignore[attr-defined]
        return frozenset({name}) if name is not None else frozenset()
    return frozenset()


def pieces(ctx: FileContext, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``expr`` and what it puts together: the elements of ``torch.cat([a, b])``, the operands of ``a + [b]``."""
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        found.append(node)
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Add:
            stack.extend((node.left, node.right))
        elif type(node) is cst.Call and node.args and ctx.qname(node.func) in CONCATENATIONS and type(node.args[0].value) in (cst.Tuple, cst.List):
            stack.extend(e.value for e in node.args[0].value.elements)  # type: ignore[attr-defined]
        elif type(node) in (cst.List, cst.Tuple):
            stack.extend(e.value for e in node.elements)  # type: ignore[attr-defined]
    return found



def subscripts(expr: cst.BaseExpression) -> list[cst.Subscript]:
    """The subscripts in ``expr``, itself included (``hyp['cache']`` in ``f(hyp['cache'])``)."""
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.Subscript:
            found.append(node)
        stack.extend(children(node))
    return found
