"""Legacy typed tensor classes (`torch.FloatTensor`, `torch.cuda.LongTensor`...) and `Variable`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.device_names import LEGACY_DTYPES, legacy_dtype
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.names import dotted
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

# torch.FloatTensor -> (dtype, on the device?); sparse classes are reported, never fixed.
_TYPED: dict[str, tuple[str | None, bool]] = {}
for _prefix, _dtype in LEGACY_DTYPES.items():
    _TYPED[f"torch.{_prefix}Tensor"] = (_dtype, False)
    _TYPED[f"torch.cuda.{_prefix}Tensor"] = (_dtype, True)
    _TYPED[f"torch.sparse.{_prefix}Tensor"] = (None, False)
    _TYPED[f"torch.cuda.sparse.{_prefix}Tensor"] = (None, True)
_VARIABLE = "torch.autograd.Variable"
_LEGACY_NAMES = {q.rsplit(".", 1)[-1] for q in _TYPED} | {"Variable"}
_TYPE_CHECKS = {"isinstance", "issubclass"}
_SET_DEFAULT = "torch.set_default_tensor_type"


class LegacyTensorConstructor(Check):
    """`torch.FloatTensor(...)`, `torch.cuda.LongTensor`, `torch.Tensor([...])` or `Variable(...)`."""

    code = "TL204"
    name = "legacy-tensor-constructor"
    cost = Cost.API_AGE
    message = "`{ref}` {why}"
    fix_hint = "Use `torch.tensor(data, dtype=..., device=...)` (or `torch.empty(size, dtype=...)`); `Variable(x)` is `x.detach()` (just `x` when it tracks no gradient)"
    fix_safety = FixSafety.UNSAFE

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._aliases_reported: set[int] = set()

    # --- references to the legacy classes ----------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _LEGACY_NAMES:
            self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        if self.ctx.imports.aliases.get(node.value) is None:
            return  # not an imported name (most names: asked first, as it is cheapest)
        parent = self.ctx.tree.parent(node)
        if type(parent) is cst.Attribute and parent.attr is node:  # type: ignore[union-attr]
            return  # `torch.FloatTensor`'s `FloatTensor`: the Attribute is the reference
        if self._names_legacy(node):
            self._reference(node)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qname(node.func) == _SET_DEFAULT:
            self._set_default(node)
            return
        # torch.Tensor is also the tensor type; only building one from data is legacy.
        if ctx.qname(node.func) != "torch.Tensor" or len(node.args) != 1 or node.args[0].keyword or node.args[0].star:
            return
        data = node.args[0].value
        if not (ctx.values.is_sequence_literal(data, node) or ctx.values.is_numpy_array(data, node)):
            return  # torch.Tensor(3, 4), torch.Tensor(size): sizes (or unknown)
        self.report(
            node,
            fix=self._typed_fix(node, "float32", False),
            ref=short_code(ctx.module, node.func) + "(...)",
            why="is a legacy API: building from data always copies into the default float type; use `torch.tensor(data, dtype=..., device=...)`",
        )

    def _set_default(self, call: cst.Call) -> None:
        """``torch.set_default_tensor_type(torch.cuda.FloatTensor)`` (or its string): its
        replacements are ``torch.set_default_dtype`` and ``torch.set_default_device``."""
        ctx = self.ctx
        arg = call.args[0].value if call.args else None
        named = ctx.qname(arg) if arg is not None else None
        if isinstance(arg, cst.SimpleString) and isinstance(arg.evaluated_value, str):
            named = arg.evaluated_value
        dtype = legacy_dtype(named) if named in _TYPED else None
        instead = f"`torch.set_default_dtype(torch.{dtype or '...'})`"
        if named is not None and named.startswith("torch.cuda."):
            instead += ' and `torch.set_default_device("cuda")`'
        self.report(call, ref=short_code(ctx.module, call, 60), hint=f"Use {instead}",
                    why=f"is deprecated (torch 2.1): the default dtype and device are set apart; use {instead}")

    def _names_legacy(self, node: cst.BaseExpression) -> bool:
        qualified = self.ctx.qname(node)
        return qualified in _TYPED or qualified == _VARIABLE

    def _reference(self, node: cst.BaseExpression) -> None:
        ctx = self.ctx
        if not self._names_legacy(node) or not self._counts(node):
            return
        qualified = ctx.qname(node)
        assert qualified is not None
        alias = self._alias_value(node)
        if alias is not None:
            if id(alias) in self._aliases_reported:
                return  # `T = torch.cuda.FloatTensor if cuda else torch.FloatTensor`: once
            self._aliases_reported.add(id(alias))
            self.report(alias, ref=short_code(ctx.module, alias, 60), why=_why(qualified, alias=True))
            return
        parent = ctx.tree.parent(node)
        if isinstance(parent, cst.Arg) and ctx.qname(ctx.tree.parent(parent).func) == _SET_DEFAULT:  # type: ignore[union-attr]
            return  # the call is reported, with its own replacements (visit_Call)
        if isinstance(parent, cst.Call) and parent.func is node:
            self.report(parent, fix=self._fix(parent, qualified), ref=short_code(ctx.module, node) + "(...)", why=_why(qualified))
        else:
            self.report(node, ref=short_code(ctx.module, node), why=_why(qualified))

    def _counts(self, node: cst.CSTNode) -> bool:
        """Not a type check, an annotation, a base class, an import or a binding target."""
        tree = self.ctx.tree
        parent = tree.parent(node)
        called = isinstance(parent, cst.Call) and parent.func is node
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return False  # `Variable._execution_engine.queue_callback(...)`: the class's attribute, nothing built
        child = node
        for ancestor in tree.ancestors(node):
            if isinstance(ancestor, (cst.Annotation, cst.Import, cst.ImportFrom)):
                return False
            if isinstance(ancestor, cst.Comparison) and not called:
                return False  # `x.type() == torch.FloatTensor`; `y == torch.FloatTensor([0])` builds one
            if isinstance(ancestor, cst.Call) and child is not ancestor.func and dotted(ancestor.func) in _TYPE_CHECKS:
                return False
            if isinstance(ancestor, cst.ClassDef) and any(child is base for base in ancestor.bases):
                return False
            if isinstance(ancestor, (cst.AssignTarget, cst.Param)) and child is getattr(ancestor, "target", getattr(ancestor, "name", None)):
                return False
            if isinstance(ancestor, (cst.BaseStatement, cst.Lambda)):
                return True
            child = ancestor
        return True

    def _alias_value(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The value of ``X = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` (the
        class itself, not a call of it) when ``node`` is in it."""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            if isinstance(ancestor, (cst.IfExp, cst.BooleanOperation)):
                child = ancestor
                continue
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign)) and ancestor.value is child:
                return child  # type: ignore[return-value]
            return None
        return None

    # --- fixes -------------------------------------------------------------------------
    def _fix(self, call: cst.Call, qualified: str) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        if qualified == _VARIABLE:
            return self._variable_fix(call)
        dtype, on_device = _TYPED[qualified]
        return self._typed_fix(call, dtype, on_device) if dtype is not None else None

    def _typed_fix(self, call: cst.Call, dtype: str, on_device: bool) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        ctx = self.ctx
        torch = ctx.imports.spelling("torch", via=("torch",))
        if torch is None or any(a.keyword is not None or a.star for a in call.args):
            return None
        original, args = call, call.args
        if len(args) == 1:
            data = args[0].value
            if ctx.values.is_numpy_array(data, call):
                factory = "as_tensor"  # what TL203 asks for: no copy of the array
            elif ctx.values.is_sequence_literal(data, call):
                factory = "tensor"
            elif isinstance(data, cst.Integer):
                factory = "empty"
            else:
                return None  # a name: data or a size, cannot tell
        elif args:
            if any(isinstance(a.value, (cst.List, cst.Tuple, cst.ListComp)) for a in args):
                return None
            factory = "empty"  # several positional arguments are always sizes
        else:
            factory = "empty"
            call = call.with_changes(args=(cst.Arg(cst.Integer("0")),))
        new = call.with_changes(func=cst.parse_expression(f"{torch}.{factory}"))
        new = with_keyword(new, "dtype", cst.parse_expression(f"{torch}.{dtype}"))
        if on_device:
            new = with_keyword(new, "device", cst.SimpleString('"cuda"'))
        return original, new

    def _variable_fix(self, call: cst.Call) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        ctx = self.ctx
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if len(positional) != 1 or positional[0].star or set(keywords) - {"requires_grad"}:
            return None
        value = positional[0].value
        flag = keywords.get("requires_grad")
        if flag is not None and not (isinstance(flag, cst.Name) and flag.value in ("True", "False")):
            return None
        parent = ctx.tree.parent(call)
        if isinstance(value, cst.Call) and (ctx.qname(value.func) or "").startswith("torch.") and isinstance(parent, cst.Attribute):
            return None  # Variable(torch.zeros(n)).cuda() would become a create-then-move
        if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if flag is not None and flag.value == "True":
            detached = cst.Call(func=cst.Attribute(value=value, attr=cst.Name("detach")))
            value = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("requires_grad_")))
        elif not _builds_a_fresh_tensor(ctx, value):
            # `Variable(w)` is a detached alias of `w`: plain `w` would carry `w`'s gradient on.
            value = cst.Call(func=cst.Attribute(value=value, attr=cst.Name("detach")))
        return call, value


def _builds_a_fresh_tensor(ctx, value: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``torch.zeros(n)``, ``torch.from_numpy(a)``: a new tensor with no autograd history,
    which ``Variable`` has nothing to detach from."""
    if not isinstance(value, cst.Call) or ctx.keyword(value, "requires_grad") is not None:
        return False
    qualified = ctx.qname(value.func) or ""
    return qualified.startswith("torch.") and qualified.count(".") == 1 and qualified not in _TYPED and qualified != _VARIABLE


def _why(qualified: str, alias: bool = False) -> str:
    if qualified == _VARIABLE:
        return "is a legacy API: since torch 0.4 every tensor tracks gradients itself"
    dtype = legacy_dtype(qualified)
    where = ', device="cuda"' if qualified.startswith("torch.cuda.") else ""
    spelled = f"`torch.tensor(data, dtype=torch.{dtype}{where})` / `torch.empty(size, dtype=torch.{dtype}{where})`" if dtype else "`torch.sparse_coo_tensor(...)`"
    if alias:
        return f"is a legacy API: it aliases typed tensor classes that predate `dtype=` and `device=` arguments; use {spelled}"
    return f"is a legacy API: the typed tensor classes predate `dtype=` and `device=` arguments and mix data and sizes in one signature; use {spelled}"
