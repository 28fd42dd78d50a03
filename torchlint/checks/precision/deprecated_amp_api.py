"""Mixed precision through apex or the deprecated `torch.cuda.amp` entry points."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.edits import keyword_arg, with_first_argument
from torchlint.analysis.names import dotted
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_CUDA_AMP = {"torch.cuda.amp.autocast": "autocast", "torch.cuda.amp.GradScaler": "GradScaler"}
# torch.cuda.amp.autocast(enabled, dtype, cache_enabled): torch.amp.autocast takes the
# device first and then dtype, so positional arguments become keywords.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


class DeprecatedAmpApi(Check):
    """apex AMP, `torch.cuda.amp.autocast(...)` or `torch.cuda.amp.GradScaler(...)`."""

    code = "TL502"
    applies_to_tests = True  # a deprecated API breaks a test suite on a torch upgrade as well
    name = "deprecated-amp-api"
    cost = Cost.API_AGE
    message = "`{call}` is a deprecated mixed-precision API; {instead}"
    fix_hint = 'Use `torch.amp.autocast("cuda", ...)` and `torch.amp.GradScaler("cuda", ...)`; replace apex `amp.initialize`/`amp.scale_loss` with them'
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if qualified in _CUDA_AMP:
            if ctx.guards.version_gated(node):
                return  # the fallback for a torch that lacks the new API, next to the new call
            kind = _CUDA_AMP[qualified]
            self.report(
                node,
                fix=self._fix(node, kind),
                call=f"{dotted(node.func) or qualified}(...)",
                instead=f'use `torch.amp.{kind}("cuda", ...)`',
            )
        elif qualified is not None and qualified.startswith("apex.amp.") and any(node is c for c in self._apex_sites()):
            self.report(
                node,
                call=f"{dotted(node.func) or qualified}(...)",
                instead="apex AMP is unmaintained; native `torch.amp.autocast` with `torch.amp.GradScaler` replaces it",
            )

    def _apex_sites(self) -> list[cst.Call]:
        """Where apex AMP use is reported: each `amp.initialize(...)`, else the first apex.amp call."""
        if not hasattr(self, "_apex_calls"):
            calls = [c for c in self.ctx.tree.nodes(cst.Call) if (self.ctx.qname(c.func) or "").startswith("apex.amp.")]
            inits = [c for c in calls if self.ctx.qname(c.func) == "apex.amp.initialize"]
            self._apex_calls = inits or calls[:1]
        return self._apex_calls

    def _fix(self, node: cst.Call, kind: str) -> tuple[cst.Call, cst.Call] | None:
        ctx = self.ctx
        if kind == "GradScaler" and ctx.options.target_torch < (2, 3):
            return None  # torch.amp.GradScaler appeared in 2.3
        spelling = ctx.imports.spelling(f"torch.amp.{kind}", via=("torch", "torch.amp"))
        if spelling is None:
            return None  # torch is not imported as a module here: no spelling is sure to resolve
        args = list(node.args)
        if kind == "autocast":
            if any(a.star for a in args):
                return None
            positional = [a for a in args if a.keyword is None]
            if len(positional) > len(_AUTOCAST_POSITIONAL):
                return None
            args = [
                keyword_arg(_AUTOCAST_POSITIONAL[i], a.value).with_changes(comma=a.comma) if a.keyword is None else a
                for i, a in enumerate(args)
            ]
        new = with_first_argument(node.with_changes(func=cst.parse_expression(spelling), args=tuple(args)), cst.SimpleString('"cuda"'))
        return node, new
