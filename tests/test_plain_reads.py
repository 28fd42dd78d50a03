"""positions.plain_code's shortcut for plain names and Bindings.reads_in_reach (speed26)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import Tree

_CODE = '''
import torch.nn as nn
(x) = 1
y = nn.functional.relu
z = (nn . functional).gelu
w = (nn.
     functional.silu)
s, n, f, b = "a", 2, 1.5, b"q"
v = (2) + -3 + 1j + f"{x}" + "a" "b"
CONST = 0


def outer(a, k=x):
    global CONST
    CONST = a
    total = a + k
    def inner():
        return total + x
    return inner() + [total for total in range(3)][0]


def other():
    total = 2
    return total + CONST
'''


def test_plain_code_is_libcsts_code_for_every_expression():
    module = cst.parse_module(_CODE)
    tree = Tree(module)
    seen = 0
    for node in tree.preorder:
        if isinstance(node, cst.BaseExpression):
            assert plain_code(module, node) == module.code_for_node(node), module.code_for_node(node)
            seen += 1
    assert seen > 60


def test_every_use_of_a_binding_is_among_its_reads_in_reach():
    tree = Tree(cst.parse_module(_CODE))
    bindings = Bindings(tree)
    checked = 0
    for table in bindings.by_scope.values():
        for found in table.values():
            for binding in found:
                reach = {id(read) for read in bindings.reads_in_reach(binding)}
                for use in bindings.uses(binding):
                    assert id(use) in reach, binding
                    checked += 1
    assert checked >= 8


def test_reads_in_reach_keeps_a_local_to_its_function():
    tree = Tree(cst.parse_module(_CODE))
    bindings = Bindings(tree)
    outer, other = tree.nodes(cst.FunctionDef)[0], tree.nodes(cst.FunctionDef)[2]
    local = next(b for b in bindings.by_scope[id(outer)]["total"] if b.kind == "assign")
    reads = bindings.reads_in_reach(local)
    assert reads and all(tree.is_inside(read, outer) for read in reads)  # not `other`'s `total`
    assert len(bindings.reads("total")) > len(reads)
    # `global CONST` in `outer`: the module's name, read in `other` too
    made_global = next(b for b in bindings.module_bindings("CONST") if tree.is_inside(b.node, outer))
    assert any(tree.is_inside(read, other) for read in bindings.reads_in_reach(made_global))
