"""FileContext: the shared analysis of one file, built lazily from one walk."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from torchlint.analysis import frameworks
from torchlint.analysis.bindings import Bindings
from torchlint.analysis.constants import Constants
from torchlint.analysis.devices import Devices
from torchlint.analysis.flops import LinearFlops
from torchlint.analysis.frozen import TrainedModules
from torchlint.analysis.functions import LocalFunctions
from torchlint.analysis.grad import GradContext
from torchlint.analysis.test_paths import test_suite_path
from torchlint.analysis.guards import Guards
from torchlint.analysis.layers import Layers
from torchlint.analysis.loops import Loops
from torchlint.analysis.places import Places
from torchlint.analysis.names import Imports, canonical, dotted
from torchlint.analysis.syncs import HiddenSyncs
from torchlint.analysis.uploads import Uploads
from torchlint.analysis.device_makeable import DeviceMakeable
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import Tree
from torchlint.analysis.values import ValueKinds


_UNASKED = object()  # (None is an answer: no qualified name)


@dataclass(frozen=True, slots=True)
class Options:
    """The rule options a check may read (from config)."""

    tensor_core_multiple: int = 8
    min_dimension: int = 32
    target_torch: tuple[int, int] = (2, 4)


class FileContext:
    """Everything the checks may ask about one parsed file.

    Each analysis is computed on first use and shared by every check, so a check
    never re-derives qualified names, loops, grad state or value kinds itself.
    """

    def __init__(self, module: cst.Module, path: str, options: Options | None = None) -> None:
        self.module = module
        self.path = path
        self.options = options or Options()
        self.tree = Tree(module)
        self.imports = Imports(self.tree)
        self._qnames: dict[int, str | None] = {}  # id of an expression asked -> its qualified name
        # every expression asked, kept alive with the context: no other node can take its id
        self._asked: list[cst.BaseExpression | None] = []

    def close(self) -> None:
        """Drop the tree and every analysis: they point back at this context, so without
        this the file's tree (millions of objects) would wait for Python's cyclic
        collector, which the engine keeps paused while a file is checked."""
        self.__dict__.clear()

    # --- the analyses ------------------------------------------------------------
    @cached_property
    def bindings(self) -> Bindings:
        return Bindings(self.tree)

    @cached_property
    def functions(self) -> LocalFunctions:
        return LocalFunctions(self.tree)

    @cached_property
    def values(self) -> ValueKinds:
        return ValueKinds(self)

    @cached_property
    def loops(self) -> Loops:
        return Loops(self)

    @cached_property
    def places(self) -> Places:
        return Places(self)

    @cached_property
    def grad(self) -> GradContext:
        return GradContext(self)

    @cached_property
    def guards(self) -> Guards:
        return Guards(self)

    @cached_property
    def devices(self) -> Devices:
        return Devices(self)

    @cached_property
    def syncs(self) -> HiddenSyncs:
        return HiddenSyncs(self)

    @cached_property
    def uploads(self) -> Uploads:
        return Uploads(self)

    @cached_property
    def device_makeable(self) -> DeviceMakeable:
        return DeviceMakeable(self)

    @cached_property
    def constants(self) -> Constants:
        return Constants(self)

    @cached_property
    def layers(self) -> Layers:
        return Layers(self)

    @cached_property
    def flops(self) -> LinearFlops:
        return LinearFlops(self)

    @cached_property
    def trained(self) -> TrainedModules:
        return TrainedModules(self)

    # --- names -----------------------------------------------------------------
    def qname(self, expr: cst.BaseExpression | None) -> str | None:
        """Canonical qualified name of ``expr`` (``nn.Conv2d`` → ``torch.nn.Conv2d``)."""
        # Most checks ask it of the same calls (some 30 of them, of every call): remembered per
        # node, by id alone, the cheapest hit; the node is kept alive beside it (`_asked`), so a
        # later node can never reuse a freed node's id and be taken for it.
        name = self._qnames.get(id(expr), _UNASKED)
        if name is not _UNASKED:
            return name  # type: ignore[return-value]
        name = canonical(self.imports.qualify(expr))
        self._qnames[id(expr)] = name
        self._asked.append(expr)
        return name

    def call_name(self, call: cst.Call) -> str | None:
        return self.qname(call.func)

    def aliased_qname(self, call: cst.Call) -> str | None:
        """The qualified name ``call`` runs: its function's, or for a plain name bound to one
        (``synchronize = torch.cuda.synchronize if device_type == "cuda" else lambda: None``),
        the one function every binding that may reach the call names (a ``lambda`` or ``None``
        branch is a no-op: not another function)."""
        qualified = self.qname(call.func)
        if qualified is not None or type(call.func) is not cst.Name:
            return qualified
        names = set()
        for binding in self.bindings.reaching_each(call.func.value, call):
            if binding.kind != "assign" or binding.element is not None or binding.value is None:
                return None
            value = binding.value
            for branch in (value.body, value.orelse) if type(value) is cst.IfExp else (value,):
                if type(branch) is cst.Lambda or type(branch) is cst.Name and branch.value == "None":
                    continue
                names.add(self.qname(branch) if type(branch) in (cst.Attribute, cst.Name) else None)
        return names.pop() if len(names) == 1 else None

    def imports_torch(self) -> bool:
        return self.imports.imports_torch()

    @cached_property
    def is_test_file(self) -> bool:
        """``tests/…``, ``test_x.py``, ``x_test.py``, ``conftest.py``: a test suite's file."""
        return test_suite_path(self.path)

    def in_tests(self, node: cst.CSTNode) -> bool:
        """Is ``node`` test code: in a test suite's file, or in a unittest ``Test…`` class?
        A loader, a ``DataParallel`` or a layer built there exercises a library, not a
        training run. (A ``def test_…`` elsewhere is not pytest's: a tutorial's
        ``test_model(...)`` evaluates on the test set.)"""
        if self.is_test_file:
            return True
        owner = self.tree.enclosing_class(node)
        return owner is not None and owner.name.value.startswith("Test")

    def imports_pandas(self) -> bool:
        return any(m.split(".")[0] == "pandas" for m in self.imports.modules)

    @cached_property
    def _calls_by_method(self) -> dict[str, list[cst.Call]]:
        index: dict[str, list[cst.Call]] = defaultdict(list)
        for call in self.tree.nodes(cst.Call):
            if isinstance(call.func, cst.Attribute):
                index[call.func.attr.value].append(call)
        return index

    @cached_property
    def _calls_by_name(self) -> dict[str, list[cst.Call]]:
        index: dict[str, list[cst.Call]] = defaultdict(list)
        for call in self.tree.nodes(cst.Call):
            if type(call.func) is cst.Name:
                index[call.func.value].append(call)
        return index

    def name_calls(self, name: str) -> list[cst.Call]:
        """Calls ``name(...)`` of a plain name, in source order (one index of the file's calls,
        not a scan of them all per question). Do not change the list."""
        return self._calls_by_name.get(name, [])

    def method_calls(self, methods: Iterable[str]) -> list[cst.Call]:
        """Calls ``x.<method>(...)`` for any of ``methods``, in source order."""
        index = self._calls_by_method
        wanted = [methods] if isinstance(methods, str) else list(methods)
        found = [call for m in wanted for call in index.get(m, ())]
        if len(wanted) > 1:
            found.sort(key=self.tree.index)  # each list is in source order; merged ones are not
        return found

    def calls_named(self, *qualified: str) -> list[cst.Call]:
        """Calls whose callee resolves to one of ``qualified`` names."""
        wanted = set(qualified)
        return [c for c in self.tree.nodes(cst.Call) if self.qname(c.func) in wanted]

    def references(self, *qualified: str, prefix: bool = False) -> list[cst.BaseExpression]:
        """Names and attribute chains (outermost only) that resolve to one of ``qualified``
        (or, with ``prefix``, to something under one of them), in source order. Import
        statements are not references."""
        found = []
        for node in (*self.tree.nodes(cst.Name), *self.tree.nodes(cst.Attribute)):
            parent = self.tree.parent(node)
            if type(parent) is cst.Attribute and parent.value is node:
                continue  # part of a longer chain: the chain is the reference
            if type(node) is cst.Name and type(parent) is cst.Attribute:
                continue  # the `.attr` name of an attribute
            name = self.qname(node)
            if name is None:
                continue
            if name in qualified or prefix and any(name.startswith(q + ".") for q in qualified):
                if not any(type(a) in (cst.Import, cst.ImportFrom) for a in self.tree.ancestors(node)):
                    found.append(node)
        found.sort(key=self.tree.index)
        return found

    @cached_property
    def _local_module_classes(self) -> set[str]:
        classes = {c.name.value: c for c in self.tree.nodes(cst.ClassDef)}
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in classes.items():
                if name in found:
                    continue
                for base in cls.bases:
                    qualified = self.qname(base.value) or ""
                    if frameworks.module_base(qualified) or dotted(base.value) in found:
                        found.add(name)
                        changed = True
                        break
        return found

    def local_module_class(self, func: cst.BaseExpression) -> bool:
        """Is ``func`` a class defined in this file that subclasses ``nn.Module``?"""
        return isinstance(func, cst.Name) and func.value in self._local_module_classes

    def is_module_class(self, name: str) -> bool:
        return name in self._local_module_classes

    def tree_children(self, node: cst.CSTNode) -> Iterable[cst.CSTNode]:
        return self.tree.children(node)

    # --- small helpers used by several checks --------------------------------------
    @staticmethod
    def keyword(call: cst.Call, name: str) -> cst.Arg | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    @staticmethod
    def has_star_kwargs(call: cst.Call) -> bool:
        return any(arg.star == "**" for arg in call.args)

    @staticmethod
    def argument(call: cst.Call, position: int, name: str | None = None) -> cst.Arg | None:
        """The argument at ``position`` or passed as ``name=``."""
        if name is not None:
            arg = FileContext.keyword(call, name)
            if arg is not None:
                return arg
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if any(a.star == "*" for a in call.args):
            return None  # *args hides the positions
        return positional[position] if position < len(positional) else None

    @staticmethod
    def method_name(call: cst.Call) -> str | None:
        return call.func.attr.value if type(call.func) is cst.Attribute else None  # type: ignore[attr-defined]  # not isinstance: see names.dotted


def short_code(module: cst.Module, node: cst.CSTNode, limit: int = 40) -> str:
    """The source of ``node`` on one line, shortened for a message: long call arguments
    become ``(...)`` (``F.nll_loss(...).item``) and long subscripts ``[...]``, keeping the
    end of a chain of calls and attributes, which names what runs (``(logits…).float()``);
    what is still too long is cut after a whole token, with one ``…`` (brackets closed)."""
    text = " ".join(plain_code(module, node).split())
    if len(text) <= limit:
        return text
    if isinstance(node, cst.Call):
        tail = "(...)" if node.args else "()"
        return short_code(module, node.func, limit - len(tail)) + tail
    if isinstance(node, cst.Attribute):
        tail = "." + node.attr.value
        return short_code(module, node.value, limit - len(tail)) + tail
    if isinstance(node, cst.Subscript):
        return short_code(module, node.value, limit - 5) + "[...]"
    return cut_at_token(text, limit)


_CLOSING = {"(": ")", "[": "]", "{": "}"}


def cut_at_token(text: str, limit: int) -> str:
    """``text`` cut after its last whole token that leaves room for ``…`` and for the
    brackets still open (``(logits…)``); ``…`` alone when no token fits."""
    import io
    import tokenize

    best = ELLIPSIS
    opened: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER) or token.start[0] > 1:
                break
            if token.type == tokenize.OP and token.string in _CLOSING:
                opened.append(_CLOSING[token.string])
            elif token.type == tokenize.OP and opened and token.string == opened[-1]:
                opened.pop()
            prefix = text[: token.end[1]]
            closers = "".join(reversed(opened))
            if len(prefix) + 1 + len(closers) > limit:
                break
            best = prefix + ELLIPSIS + closers
    except (tokenize.TokenError, SyntaxError):  # a string that spanned lines, joined into one
        return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS
    return best


ELLIPSIS = "\u2026"  # one character: a cut never reads as `....`
