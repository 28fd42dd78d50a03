"""A convolution with a bias whose output goes straight into BatchNorm."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.edits import with_keyword
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_CONVS = {f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for d in (1, 2, 3)}
_BATCH_NORMS = {f"torch.nn.{kind}{d}d" for kind in ("BatchNorm", "LazyBatchNorm") for d in (1, 2, 3)} | {"torch.nn.SyncBatchNorm"}
# Position of `bias` among the positional parameters (Lazy variants have no in_channels).
_BIAS_POSITION = {"Conv": 7, "ConvTranspose": 7, "LazyConv": 6, "LazyConvTranspose": 6}


class ConvBiasBeforeBatchnorm(Check):
    """Conv layer with `bias=True` (the default) feeding straight into BatchNorm."""

    code = "TL401"
    name = "conv-bias-before-batchnorm"
    cost = Cost.SMALL_WORK
    message = "`{conv}` adds a bias that the following `{norm}` subtracts again with the batch mean"
    fix_hint = "Pass `bias=False` to the convolution: BatchNorm's own shift replaces the bias"
    fix_safety = FixSafety.UNSAFE  # the checkpoint loses the conv's `bias` key

    def finish(self) -> None:
        ctx = self.ctx
        if not _names_a_batch_norm(ctx):
            return  # finding the layer links costs more than this look at the file's names
        reported: set[int] = set()
        for conv, norm in ctx.layers.feeds:
            conv_name = ctx.qname(conv.func)
            norm_name = ctx.qname(norm.func)
            if conv_name not in _CONVS or norm_name not in _BATCH_NORMS or id(conv) in reported:
                continue
            if ctx.has_star_kwargs(conv) or any(a.star == "*" for a in conv.args):
                continue  # the splat may carry bias=False
            position = _BIAS_POSITION[conv_name.rsplit(".", 1)[-1][:-2]]
            bias = ctx.argument(conv, position, "bias")
            if bias is not None and not (isinstance(bias.value, cst.Name) and bias.value.value == "True"):
                continue  # bias=False, or a value only known at run time
            reported.add(id(conv))
            value = self._bias_value(conv, norm)
            fix = None
            if value is not None:
                if bias is None or bias.keyword is not None:
                    fixed = with_keyword(conv, "bias", value)
                else:  # a positional True
                    fixed = conv.with_changes(args=tuple(a.with_changes(value=value) if a is bias else a for a in conv.args))
                fix = (conv, fixed)
            self.report(
                conv,
                where=Where.TRAIN,  # every forward and backward of the model pays it
                fix=fix,
                hint=self._conditional_hint(conv, norm, value),
                related=(norm,),
                conv=(dotted(conv.func) or conv_name) + "(...)",
                norm=(dotted(norm.func) or norm_name) + "(...)",
            )

    def _bias_value(self, conv: cst.Call, norm: cst.Call) -> cst.BaseExpression | None:
        """``False``; ``not batch_norm`` when the BatchNorm follows only under
        ``if batch_norm:`` (the conv keeps its bias without it); None when the condition
        cannot be written at the conv."""
        guards = self.ctx.layers.link_guards(conv, norm)
        if not guards:
            return cst.Name("False")
        if len(guards) != 1 or not self._visible_at(guards[0][0].test, conv, guards[0][0]):
            return None  # nested or elif conditions, or a test the conv's line cannot see
        test, in_body = guards[0][0].test, guards[0][1]
        if in_body:
            return _negated(test)
        return test if _is_bool(test) else cst.Call(func=cst.Name("bool"), args=[cst.Arg(test)])

    def _conditional_hint(self, conv: cst.Call, norm: cst.Call, value: cst.BaseExpression | None) -> str:
        if not self.ctx.layers.link_guards(conv, norm):
            return ""
        spelled = f"`bias={plain_code(self.ctx.module, value)}`" if value is not None else "`bias=` the opposite of the condition"
        return f"The BatchNorm follows only under a condition: pass {spelled} so the convolution keeps its bias without it"

    def _visible_at(self, test: cst.BaseExpression, conv: cst.Call, branch: cst.If) -> bool:
        """A test made of names (no calls) that mean the same at the conv as at the ``if``:
        in the same function, or ``self.x`` attributes the conv's method (``__init__``)
        sets once, before the conv, when the ``if`` is in another method (``forward``)."""
        ctx = self.ctx
        tree = ctx.tree
        same_scope = tree.scope_of(conv) is tree.scope_of(branch)
        if same_scope and tree.index(conv) > tree.index(branch):
            return False
        for node in (test, *tree.descendants(test)):
            if isinstance(node, (cst.Call, cst.Lambda, cst.NamedExpr, cst.Await)):
                return False
            if isinstance(node, (cst.Name, cst.Attribute)) and not _is_attribute_name(tree, node):
                name = dotted(node)
                if name is None:
                    return False
                if same_scope and ctx.bindings.reaching(name, conv) is not ctx.bindings.reaching(name, branch):
                    return False
                if not same_scope and not self._set_once_before(name, conv, branch):
                    return False
        return True

    def _set_once_before(self, name: str, conv: cst.Call, branch: cst.If) -> bool:
        """``self.batchnorm = batchnorm`` once in the class, in the conv's method, before it."""
        tree = self.ctx.tree
        if not name.startswith("self.") or name.count(".") != 1 or tree.enclosing_class(conv) is not tree.enclosing_class(branch):
            return False
        bindings = self.ctx.bindings.lookup(name, conv)
        return (
            len(bindings) == 1
            and tree.scope_of(bindings[0].node) is tree.scope_of(conv)
            and tree.index(bindings[0].node) < tree.index(conv)
        )


def _names_a_batch_norm(ctx) -> bool:  # type: ignore[no-untyped-def]
    """Could any call resolve to a BatchNorm? A qualified name ends with a name written in
    the file (the call's own, or the one its import brought in), so a file with no name
    containing ``BatchNorm`` has no BatchNorm call, and no finding."""
    return any("BatchNorm" in name.value for name in ctx.tree.nodes(cst.Name))


def _is_attribute_name(tree, node: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """The ``b`` of ``a.b``, or an ``a.b`` inside a longer ``a.b.c``: checked as part of it."""
    parent = tree.parent(node)
    return isinstance(parent, cst.Attribute) and (parent.attr is node or parent.value is node and dotted(parent) is not None)


def _is_bool(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Comparison) or (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not))


def _negated(test: cst.BaseExpression) -> cst.BaseExpression:
    """``not test``, parenthesised where ``not`` would bind tighter than the test."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        return inner if _is_bool(inner) else cst.Call(func=cst.Name("bool"), args=[cst.Arg(inner)])
    if isinstance(test, (cst.BooleanOperation, cst.IfExp)) and not test.lpar:
        test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(operator=cst.Not(), expression=test)
