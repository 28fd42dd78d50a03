"""The names and attribute chains an expression reads: what a decode loop's analysis follows
from statement to statement (``analysis/decoding.py``), kept per node."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.tree import children

# `mentions` of a node, kept with the node (so a later node that reuses a freed id is never
# mistaken for it): every loop of a file asks again of the same statements (`derived` twice
# round, per call that may run a model), which made this analysis the check's costliest.
_MENTIONED: dict[tuple[int, bool], tuple[cst.CSTNode, frozenset[str]]] = {}


def mentions(expr: cst.CSTNode | None, slices: bool = True) -> frozenset[str]:
    """The names and attribute chains ``expr`` reads (without ``slices``: not those only in
    an index, ``xs[t]``)."""
    if expr is None:
        return frozenset()
    key = (id(expr), slices)
    entry = _MENTIONED.get(key)
    if entry is not None and entry[0] is expr:
        return entry[1]
    if len(_MENTIONED) > 20_000:
        _MENTIONED.clear()  # bounded: the entries keep their nodes alive
    found = _MENTIONED[key] = (expr, frozenset(_walk_mentions(expr, slices)))
    return found[1]


def _walk_mentions(expr: cst.CSTNode, slices: bool) -> set[str]:
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) in (cst.Name, cst.Attribute):
            name = dotted(node)
            if name is not None:
                found.add(name)
            if type(node) is cst.Attribute:
                stack.append(node.value)  # `self.model.score`: its attribute's name is no variable
            continue
        if type(node) is cst.Subscript and not slices:
            stack.append(node.value)
            continue
        stack.extend(children(node))  # not libcst's `.children`, which rebuilds the node through a visitor
    return found
