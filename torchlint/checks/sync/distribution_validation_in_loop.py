"""A `torch.distributions` distribution built on every step with its argument checks on."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.library_bases import validating_distribution
from torchlint.analysis.loader_classes import passed_up_off
from torchlint.analysis.local_bases import constructed_class, local_chain, reached_base
from torchlint.analysis.multiplicity import Repeat
from torchlint.analysis.switches import DISTRIBUTION_VALIDATION_OFF
from torchlint.analysis.values import Kind
from torchlint.checks.base import Check

class DistributionValidationInLoop(Check):
    """`Categorical(probs)`, `Normal(mu, std)`... built inside a hot loop without `validate_args=False`."""

    code = "TL107"
    name = "distribution-validation-in-loop"
    cost = Cost.SYNC
    message = ("`{call}`{kind} in {loop} checks its arguments on the device (`validate_args` is on by default): the host waits "
               "for each check, and for the check of each `log_prob` value, on every step")
    per_step = True
    quiet_every_n = True  # (a read every N steps, for a log line, is fine: as under such a guard here)
    device_bound = True
    fix_hint = ("Pass `validate_args=False`, or call `torch.distributions.Distribution.set_default_validate_args(False)` "
                "once at start-up (as `python -O` does), once the model is known to give valid parameters")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func) or ""
        base = qualified if validating_distribution(qualified) else _subclassed(ctx, node)
        elsewhere = base is None and _project_class(ctx, node, qualified)
        if base is None and not elsewhere:
            return  # neither a distribution nor a class of the project deriving from one (`FixedCategorical(Categorical)`)
        if any(arg.star for arg in node.args) or ctx.keyword(node, "validate_args") is not None and not _is_true(ctx.keyword(node, "validate_args")):
            return  # turned off here, or the caller's choice (a value chosen at run time, a splat)
        loop = ctx.loops.hot_loop(node)
        if loop is None or ctx.devices.host_only(node):
            return  # not per step, or a file whose tensors never leave the host: a check on the host waits for nothing
        if ctx.guards.rare(node, stop=loop):
            return  # every N steps: a few checks are cheap
        values = [arg.value for arg in node.args if arg.keyword is None or arg.keyword.value != "validate_args"]
        if values and all(ctx.values.kind(v, node) in (Kind.HOST, Kind.NUMPY) or ctx.devices.moved_to_host(v, node) for v in values):
            return  # parameters known to be on the host: nothing to wait for
        call = short_code(ctx.module, node.func) + "(...)"
        kind = f" (a `{base}`, by its bases)" if base is not None and base != qualified else " (a distribution, by its bases)" if elsewhere else ""
        self.report(node, call=call, kind=kind, unless_switch=DISTRIBUTION_VALIDATION_OFF, subclass_of=(node.func, "distribution") if elsewhere else None,
                    itself=_checks(ctx, node))


def _checks(ctx, call: cst.Call) -> Repeat | None:  # type: ignore[no-untyped-def]
    """The waits one construction makes, where its function also scores a sample with `log_prob` (PPO's
    `probs.log_prob(action)`): the checks of its parameters, one after another (one wait), then the sample's
    check, later in the forward with the policy's other work queued between (a second). None for the first alone."""
    function = ctx.tree.enclosing_function(call)
    scored = function is not None and any(ctx.tree.is_inside(other, function) for other in ctx.method_calls({"log_prob"}))
    return Repeat("argument check", 2) if scored else None


def _subclassed(ctx, call: cst.Call) -> str | None:  # type: ignore[no-untyped-def]
    """The distribution a class of this file derives from (any depth in this file) when ``call``
    builds one: its ``__init__`` is the base's, argument checks and all."""
    cls = constructed_class(ctx, call)
    # (a class on the way that builds its base with `validate_args=False` checks nothing)
    if cls is None or any("validate_args" in passed_up_off(ctx, c) for c in local_chain(ctx, cls)):
        return None
    return reached_base(ctx, cls, validating_distribution)


def _project_class(ctx, call: cst.Call, qualified: str) -> bool:  # type: ignore[no-untyped-def]
    """A class imported from elsewhere (``from .distributions import FixedNormal``), not torch's:
    the join tells whether the project's class derives from a distribution."""
    last = qualified.rsplit(".", 1)[-1]
    return bool(qualified) and last[:1].isupper() and qualified.split(".")[0] not in ("torch", "numpy", "np") \
        and constructed_class(ctx, call) is None


def _is_true(arg: cst.Arg | None) -> bool:
    return arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == "True"
