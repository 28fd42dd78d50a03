"""Legacy typed tensor classes (`torch.FloatTensor`...) and `torch.autograd.Variable`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.values import Kind
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16", "LongTensor": "int64", "IntTensor": "int32",
    "ShortTensor": "int16", "CharTensor": "int8", "ByteTensor": "uint8", "BoolTensor": "bool",
}
LEGACY_CLASSES = {f"torch.{name}": (dtype, False) for name, dtype in _TYPES.items()} | {
    f"torch.cuda.{name}": (dtype, True) for name, dtype in _TYPES.items()
}
_VARIABLE = "torch.autograd.Variable"
_DATA = (cst.List, cst.Tuple, cst.ListComp)


class LegacyTensorConstructor(Check):
    """`torch.FloatTensor(...)`, `torch.cuda.FloatTensor`, `torch.Tensor([...])`, `Variable(...)`."""

    code = "TL204"
    name = "legacy-tensor-constructor"
    message = "`{what}` is a legacy API: {why}"
    fix_hint = "Use `torch.tensor(data, dtype=..., device=...)` (or `torch.empty(size, dtype=...)`); `Variable(x)` is just `x`"
    fix_safety = FixSafety.UNSAFE

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        parent = self.ctx.tree.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return  # `torch.FloatTensor`'s attribute part: the Attribute is the reference
        self._reference(node)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if qualified == _VARIABLE:
            self.report(node, fix=self._unwrap(node), what="Variable(...)", why="since torch 0.4 every tensor tracks gradients itself")
        elif qualified == "torch.Tensor" and self._data_argument(node) is not None:
            data = self._data_argument(node)
            self.report(node, fix=self._as_tensor(node, "float32", False), what="torch.Tensor(" + short_code(ctx.module, data, 20) + ")", why="it copies data into an uninitialised-style float tensor; `torch.tensor` infers or takes the dtype and device")

    # --- references to the typed classes -----------------------------------------
    def _reference(self, node: cst.BaseExpression) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node)
        if qualified not in LEGACY_CLASSES or self._exempt(node):
            return
        parent = ctx.tree.parent(node)
        call = parent if isinstance(parent, cst.Call) and parent.func is node else None
        target = call or node
        if self._repeat_in_alias(node):
            return  # `T = torch.cuda.FloatTensor if cuda else torch.FloatTensor`: once per alias
        fix = self._typed_fix(call, qualified) if call is not None else None
        why = "the typed classes predate dtypes and devices as arguments, and cannot place a tensor on a given GPU"
        self.report(target, fix=fix, what=short_code(ctx.module, node) + ("(...)" if call else ""), why=why)

    def _exempt(self, node: cst.CSTNode) -> bool:
        """isinstance/issubclass checks, annotations and imports name the type, they do not build it."""
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, (cst.Annotation, cst.Import, cst.ImportFrom)):
                return True
            if isinstance(ancestor, cst.Call) and self.ctx.qname(ancestor.func) is None:
                name = getattr(ancestor.func, "value", None)
                if name in ("isinstance", "issubclass"):
                    return True
            if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
                return False
        return False

    def _repeat_in_alias(self, node: cst.CSTNode) -> bool:
        statement = self.ctx.tree.statement_of(node)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if isinstance(small, cst.Assign) and self.ctx.tree.is_inside(node, small.value):
                for other in self.ctx.tree.descendants(small.value):
                    if other is node:
                        return False
                    if isinstance(other, (cst.Attribute, cst.Name)) and self.ctx.qname(other) in LEGACY_CLASSES:
                        return True
        return False

    # --- fixes ---------------------------------------------------------------------
    def _data_argument(self, call: cst.Call) -> cst.BaseExpression | None:
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        value = call.args[0].value
        if isinstance(value, _DATA) or self.ctx.values.kind(value, call) is Kind.NUMPY:
            return value
        return None

    def _typed_fix(self, call: cst.Call, qualified: str) -> tuple[cst.Call, cst.Call] | None:
        dtype, cuda = LEGACY_CLASSES[qualified]
        if self._data_argument(call) is not None:
            return self._as_tensor(call, dtype, cuda)
        if call.args and all(isinstance(a.value, cst.Integer) and a.keyword is None and not a.star for a in call.args):
            return self._build(call, "torch.empty", dtype, cuda)  # torch.FloatTensor(3, 4): sizes
        return None

    def _as_tensor(self, call: cst.Call, dtype: str, cuda: bool) -> tuple[cst.Call, cst.Call] | None:
        return self._build(call, "torch.tensor", dtype, cuda)

    def _build(self, call: cst.Call, factory: str, dtype: str, cuda: bool) -> tuple[cst.Call, cst.Call] | None:
        spelling = self.ctx.imports.spelling(factory, via=("torch",))
        if spelling is None:
            return None  # no module-level `import torch` to spell the new call with
        torch_name = spelling.rsplit(".", 1)[0]
        new = call.with_changes(func=cst.parse_expression(spelling))
        new = with_keyword(new, "dtype", cst.parse_expression(f"{torch_name}.{dtype}"))
        if cuda:
            new = with_keyword(new, "device", cst.SimpleString('"cuda"'))
        return call, new

    def _unwrap(self, call: cst.Call) -> tuple[cst.Call, cst.BaseExpression] | None:
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None  # Variable(x, requires_grad=True) needs `x.requires_grad_()`: by hand
        return call, call.args[0].value.with_changes(lpar=call.lpar, rpar=call.rpar) if call.lpar else call.args[0].value


