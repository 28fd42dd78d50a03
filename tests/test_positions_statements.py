"""Positions from the codegen of the statements that hold the reported nodes only (the
innermost statement of a function's or class's body, or a top-level one:
analysis/positions.py): the same spans as the whole module's codegen, on the texts where
finding a statement in the text is tricky, and no codegen of the statements in between."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import libcst as cst
import pytest

from torchlint.analysis.positions import compute_spans
from torchlint.analysis.tree import Tree


@contextmanager
def functions_generated() -> Iterator[list[str]]:
    """The names of the functions libcst generates code for while the block runs, in order."""
    generated: list[str] = []
    codegen = cst.FunctionDef._codegen_impl

    def counted(self: cst.FunctionDef, state: object) -> None:
        generated.append(self.name.value)
        codegen(self, state)  # type: ignore[arg-type]

    with mock.patch.object(cst.FunctionDef, "_codegen_impl", counted):
        yield generated

_TEXTS = {
    "repeated prefix": "x = f(1)\nx = f(2)\nfor i in range(3):\n    x = f(i)\n",
    "same statement twice": "import torch\nloss = model(x)\nprint(1)\nloss = model(x)\n",
    "crlf": "import torch\r\n\r\n# c\r\ndef f(x):\r\n    return x.item()\r\n\r\ny = [t.item() for t in xs]\r\n",
    "lone cr": "a = 1\rb = g(a)\rc = [h(v) for v in b]\r",
    "decorated": "# header\n\n@torch.no_grad()\n# between\n@other\ndef f(x):\n    return x.cpu()\n\n\nclass A:\n    @property\n    def p(self):\n        return self.x.item()\n",
    "no trailing newline": "import torch\nx = torch.zeros(3)\ny = x.item()",
    "form feed": "import torch\n\x0c\ndef f(x):\n    return x.item()\n",
    "classes": "class A(nn.Module):\n    x = f(1)\n\n    # a comment\n    def forward(self, x):\n        return self.x.item()\n\n\nclass B(nn.Module):\n    x = f(1)\n\n    # a comment\n    def forward(self, x):\n        return self.x.item()\n",
    "tab-indented class": "class A:\n\tdef m(self):\n\t\treturn g(self)\n\n\t@staticmethod\n\tdef n():\n\t\treturn [h(i) for i in range(2)]\n",
    "one-line class": "class A: x = f(1)\nclass B:\n    pass\n",
    "continuation": "x = f(\\\n    1)\ny = [a for a in \\\n     b if g(a)]\n",
    # statements of function bodies, nested: the same statement in two functions or twice in
    # one, a comment or a decorator before it, a one-line body, a class in a function
    "nested": "def train(model, xs):\n    # step\n    for x in xs:\n        loss = model(x)\n        loss.backward()\n"
              "    def inner(y):\n        loss = model(y)\n        return loss.item()\n    return inner(xs[0]).item()\n\n\n"
              "def evaluate(model, xs):\n    for x in xs:\n        loss = model(x)\n        loss = model(x)\n    def one(): return g()\n"
              "    class Local:\n        def m(self):\n            return self.net(x)\n\n        @property\n        def n(self):\n            return self.net(x)\n"
              "    return loss.item()\n",
    "blocks": "def main(xs):\n    if xs:\n        y = f(xs)\n    else:\n        y = f(xs)\n    while y:\n        y = f(y)\n"
              "    with ctx() as c:\n        try:\n            z = f(c)\n        except E:\n            z = f(c)\n        finally:\n            g(z)\n"
              "    for i in range(3):\n        y = f(y)\n    else:\n        g(y)\n    return y.item()\n",
    "nested tabs and crlf": "class A:\r\n\tdef f(self, x):\r\n\t\tif x:\r\n\t\t\treturn g(x)\r\n\t\treturn g(x)\r\n",
}


@pytest.mark.parametrize("name", sorted(_TEXTS))
def test_statement_spans_match_the_module_codegen(name: str) -> None:
    text = _TEXTS[name]
    module = cst.parse_module(text)
    tree = Tree(module)
    kinds = (cst.Call, cst.CompFor, cst.Name, cst.SimpleStatementLine, cst.FunctionDef, cst.For)
    every = [node for kind in kinds for node in tree.nodes(kind)]
    assert every
    # each node alone (the nearest statement alone generated), the last few, and all of them
    for nodes in [[node] for node in every] + [every[-3:], every]:
        assert compute_spans(module, nodes, tree, text) == compute_spans(module, nodes), (name, [type(n).__name__ for n in nodes])


@pytest.mark.parametrize("indent", ["", "    "])
def test_only_the_statements_holding_targets_are_generated(indent: str) -> None:
    """A statement of a top-level function, or of a method of a top-level class: the 200
    functions before it are skipped, and so is the rest of its own."""
    header = "class Model:\n" if indent else "\n"
    text = header + "".join(f"{indent}def f{i}(x):\n{indent}    return x + {i}\n\n" for i in range(200)) + f"{indent}def last(x):\n{indent}    return x.item()\n"
    module = cst.parse_module(text)
    tree = Tree(module)
    read = tree.nodes(cst.Call)[-1]
    with functions_generated() as generated:
        spans = compute_spans(module, [read], tree, text)
    assert spans == compute_spans(module, [read]) == {id(read): (603, 11 + len(indent), 603, 19 + len(indent))}
    assert generated == []  # not the 200 functions before it, nor `last`: its one statement


def test_statements_found_again_send_their_functions_whole_in_one_pass() -> None:
    """300 helpers with the same statements (`x = torch.zeros(3).to(d)` in each): every one is
    found more than once, so each helper is generated whole, all in one more pass, not one
    helper a pass (which made a 1,500-helper file take minutes)."""
    text = "import torch\n\n" + "".join(f"def h{i}(d):\n    x = torch.zeros(3).to(d)\n    h{i + 1}(d)\n\n" for i in range(300))
    module = cst.parse_module(text)
    tree = Tree(module)
    moves = [call for call in tree.nodes(cst.Call) if type(call.func) is cst.Attribute and call.func.attr.value == "to"]
    with functions_generated() as generated:
        spans = compute_spans(module, moves, tree, text)
    assert spans == compute_spans(module, moves)
    assert len(generated) == 300 == len(set(generated))  # each helper once
