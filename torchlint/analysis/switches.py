"""Process-wide switches a file turns, as plain data for its summary: a call made once (at
start-up, in any module) that changes what every later call does, in every file.
``torch.distributions.Distribution.set_default_validate_args(False)`` turns off the
argument checks every distribution built afterwards would run on the device (TL107). The
join gathers them over the project (engine/settle.py drops the findings they make moot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

DISTRIBUTION_VALIDATION_OFF = "distribution-validation-off"

_SET_VALIDATION = "set_default_validate_args"


def turned_switches(ctx: FileContext) -> tuple[str, ...]:
    """The switches this file turns: ``Distribution.set_default_validate_args(False)`` (through
    any import of ``Distribution``, or a distribution class: the setting is the base class's)."""
    for call in ctx.method_calls({_SET_VALIDATION}):
        owner = ctx.qname(call.func.value) or dotted(call.func.value) or ""  # type: ignore[attr-defined]
        if not owner.startswith("torch.distributions") and owner.rsplit(".", 1)[-1] != "Distribution":
            continue  # a method of the project's own of that name
        value = call.args[0].value if call.args and call.args[0].keyword is None else ctx.keyword(call, "value")
        value = value.value if isinstance(value, cst.Arg) else value
        if isinstance(value, cst.Name) and value.value == "False":
            return (DISTRIBUTION_VALIDATION_OFF,)
    return ()
