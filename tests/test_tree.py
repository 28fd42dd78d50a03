"""The one walk and its fast helpers (analysis/tree.py) answer exactly as the plain
isinstance-based definitions they replace, on every node of real files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.analysis.context import FileContext
from torchlint.analysis.names import dotted
from torchlint.analysis.tree import Tree, children, node_types

# Every rule's fixtures and the cross-file project: nested defs, classes, lambdas,
# comprehensions, loops and branches of many shapes.
FILES = sorted([*FIXTURES.glob("rules/*/*.py"), *FIXTURES.glob("projects/steps/**/*.py")])


def _plain_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Child nodes as the walk's field filter would find them with isinstance."""
    found = []
    for field in dataclasses.fields(node):
        if field.name.startswith(("whitespace", "comma", "lpar", "rpar", "semicolon", "colon", "equal", "dot",
                                  "lbracket", "rbracket", "lbrace", "rbrace", "header", "footer", "leading_lines",
                                  "lines_after_decorators", "trailing_whitespace", "operator", "newline",
                                  "asynchronous", "indent", "lines_after", "star_tok")):
            continue
        value = getattr(node, field.name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    return found


def _plain_enclosing_function(tree: Tree, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The innermost ``def`` whose parameters' defaults do not hold ``node`` (a default runs where its ``def`` runs)."""
    path = [node, *tree.ancestors(node)]
    for below, above in zip(path, path[1:]):
        if isinstance(above, cst.FunctionDef):
            defaults = {id(p.default) for p in (*above.params.posonly_params, *above.params.params, *above.params.kwonly_params)
                        if p.default is not None}
            if not any(id(n) in defaults for n in path[:path.index(above)]):
                return above
    return None


def test_a_default_belongs_to_the_function_around_its_def() -> None:
    module = cst.parse_module("def outer():\n    def inner(x, eps=np.finfo(t).eps.item(), *, k=f(g)):\n        return x.item()\n")
    tree = Tree(module)
    outer, inner = tree.nodes(cst.FunctionDef)
    calls = {cst.Module([]).code_for_node(c): c for c in tree.nodes(cst.Call)}
    assert tree.enclosing_function(calls["np.finfo(t).eps.item()"]) is outer
    assert tree.enclosing_function(calls["np.finfo(t)"]) is outer
    assert tree.enclosing_function(calls["f(g)"]) is outer
    assert tree.enclosing_function(calls["x.item()"]) is inner
    assert tree.enclosing_function(inner.params.params[0].name) is inner


def _plain_statement_of(tree: Tree, node: cst.CSTNode) -> cst.CSTNode | None:
    candidates = (node, *tree.ancestors(node))
    return next((c for c in candidates if isinstance(c, (cst.SimpleStatementLine, cst.BaseCompoundStatement))), None)


def test_fixture_files_are_found() -> None:
    assert len(FILES) > 40


@pytest.mark.parametrize("path", FILES[::3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fast_helpers_agree_with_isinstance(path: Path) -> None:
    module = cst.parse_module(path.read_text())
    tree = Tree(module)
    nodes = [n for nodes in tree.by_type.values() for n in nodes]
    assert len(nodes) == len(tree.order)
    # Asked in two orders (leaves first, then roots first), so remembered answers are used
    # both ways: a memo filled on the way up must agree with a fresh walk.
    for node in sorted(nodes, key=tree.index, reverse=True) + sorted(nodes, key=tree.index):
        assert tree.enclosing_function(node) is _plain_enclosing_function(tree, node)
        assert tree.statement_of(node) is _plain_statement_of(tree, node)
        assert tree.enclosing_class(node) is next((a for a in tree.ancestors(node) if isinstance(a, cst.ClassDef)), None)
    for node in nodes:
        assert list(children(node)) == _plain_children(node)
        kids = _plain_children(node)
        assert all(tree.parent(kid) is node for kid in kids)
    # ``classes_named`` against a scan, on the same parse (a parse is most of a case's time)
    for name in {c.name.value for c in tree.nodes(cst.ClassDef)} | {"Missing"}:
        assert tree.classes_named(name) == [c for c in tree.nodes(cst.ClassDef) if c.name.value == name]


@pytest.mark.parametrize("path", FILES[1::3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_indexed_subtree_questions_agree_with_a_walk(path: Path) -> None:
    """``own_loops``, ``holds`` and ``nodes_under`` answer from the per-type lists what a walk of each
    function's (class's) subtree finds (a nested function's loops are its own, its yields its owner's too),
    ``statements_before`` what a scan of the block finds."""
    tree = Tree(cst.parse_module(path.read_text()))
    for function in tree.nodes(cst.FunctionDef):
        under = list(tree.descendants(function))
        assert tree.own_loops(function) == [n for n in under if type(n) in (cst.For, cst.While)
                                            and tree.enclosing_function(n) is function]
        for kind in (cst.Yield, cst.Await, cst.Return, cst.Lambda, cst.While):
            assert tree.holds(function, kind) == any(type(n) is kind for n in under), (function.name.value, kind)
    # ``nodes_under``: a class's nodes of a type, as a scan of the file's with ``is_inside`` finds them
    for cls in tree.nodes(cst.ClassDef):
        for kind in (cst.Call, cst.Assign, cst.FunctionDef):
            assert tree.nodes_under(cls, kind) == [n for n in tree.nodes(kind) if tree.is_inside(n, cls)], (cls.name.value, kind)
    # ``statements_before``: the earlier statements of a block that a predicate keeps, as a scan
    # from the block's start finds them; a block made after the walk (no index) is scanned
    for block in tree.nodes(cst.IndentedBlock):
        for at, child in enumerate(block.body):
            assert tree.statements_before(block, child, _is_if) == [s for s in block.body[:at] if _is_if(s)]
        copy = block.with_changes(body=[*block.body])
        assert tree.statements_before(copy, copy.body[-1], _is_if) == [s for s in block.body[:-1] if _is_if(s)]


def _is_if(statement: cst.CSTNode) -> bool:
    return type(statement) is cst.If


def test_indexed_subtree_questions_on_nested_functions() -> None:
    tree = Tree(cst.parse_module(
        "def outer(xs):\n    for x in xs:\n        pass\n    def inner():\n        while True:\n            yield 1\n"
        "    return inner\ndef plain():\n    return 2\n"))
    outer, inner, plain = tree.nodes(cst.FunctionDef)
    assert [type(n) for n in tree.own_loops(outer)] == [cst.For] and [type(n) for n in tree.own_loops(inner)] == [cst.While]
    assert tree.holds(outer, cst.Yield) and tree.holds(inner, cst.Yield) and not tree.holds(plain, cst.Yield)
    assert tree.own_loops(plain) == [] and not tree.holds(inner, cst.For)
    # (nested: the outer function's yields include the inner one's; a node made after the walk is scanned)
    assert tree.nodes_under(outer, cst.Yield) == tree.nodes(cst.Yield) and tree.nodes_under(plain, cst.Yield) == []
    assert tree.nodes_under(outer.with_changes(), cst.Yield) == []


def test_classes_by_name_in_source_order() -> None:
    """``classes_named``: every class of that name, nested ones and a name defined twice
    included, in source order; none for a name no class has (a function's, an unknown one)."""
    tree = Tree(cst.parse_module(
        "class A:\n    class B:\n        pass\ndef f():\n    class A(Base):\n        pass\nclass C(A):\n    pass\n"))
    first, nested, second, c = tree.nodes(cst.ClassDef)
    assert tree.classes_named("A") == [first, second] and tree.classes_named("B") == [nested]
    assert tree.classes_named("C") == [c] and tree.classes_named("f") == [] and tree.classes_named("") == []


def test_qualified_names_are_remembered_per_node_and_never_for_another() -> None:
    """A node asked again gets the same answer; a node built after another was asked and
    freed never gets that node's answer (the asked nodes are kept alive with the context)."""
    ctx = FileContext(cst.parse_module("import torch\ntorch.cuda.synchronize()\n"), "m.py")
    call = ctx.tree.nodes(cst.Call)[0]
    assert ctx.qname(call.func) == ctx.qname(call.func) == "torch.cuda.synchronize"
    for _ in range(50):  # temporaries: each asked, then dropped; the next one of the same type would get its id
        assert ctx.qname(cst.Name("torch")) == "torch"
        assert ctx.qname(cst.Name("unbound")) is None
    assert ctx.qname(None) is None


def test_the_walk_reaches_every_node_once_in_pre_order() -> None:
    module = cst.parse_module("def f(x):\n    return [y * 2 for y in x if y]  # c\nclass A:\n    z: int = f(1)\n")
    tree = Tree(module)
    order = sorted(tree.order.items(), key=lambda kv: kv[1])
    assert [index for _, index in order] == list(range(len(order)))
    names = [n.value for n in tree.nodes(cst.Name)]
    assert names == ["f", "x", "y", "y", "x", "y", "A", "z", "int", "f"]


def test_node_types_is_isinstance_for_every_node_class() -> None:
    every = node_types(cst.CSTNode)
    assert cst.Name in every and cst.FunctionDef in every and cst.BaseExpression in every
    bases = [(cst.BaseExpression,), (cst.FunctionDef, cst.ClassDef), (cst.BaseCompoundStatement,), (cst.BaseString,)]
    samples = [cst.Name("x"), cst.Integer("1"), cst.SimpleString("'s'"), cst.parse_expression("f'{x}'"),
               cst.parse_statement("def f(): pass"), cst.parse_statement("class A: pass"),
               cst.parse_statement("if x: pass"), cst.parse_statement("x = 1"), cst.Arg(cst.Name("y"))]
    for base in bases:
        members = node_types(*base)
        for sample in samples:
            assert (type(sample) in members) == isinstance(sample, base), (base, sample)


def test_qualified_names_and_dotted_chains() -> None:
    ctx = FileContext(cst.parse_module("import torch.nn as nn\nfrom torch import cuda\nnn.functional.relu(x)\ncuda.synchronize()\n(a).b\nf().g\n"), "m.py")
    calls = ctx.tree.nodes(cst.Call)
    assert [ctx.qname(c.func) for c in calls] == ["torch.nn.functional.relu", "torch.cuda.synchronize", None]
    attributes = ctx.tree.nodes(cst.Attribute)
    assert [dotted(a) for a in attributes] == ["torch.nn", "nn.functional.relu", "nn.functional", "cuda.synchronize", "a.b", None]
