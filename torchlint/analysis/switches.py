"""Process-wide switches a file turns, as plain data for its summary: a call made once (at
start-up, in any module) that changes what every later call does, in every file.
``torch.distributions.Distribution.set_default_validate_args(False)`` turns off the
argument checks every distribution built afterwards would run on the device (TL107). So does
a module that runs in reduced precision or chooses float32's matmul precision, for a training
step of another module it runs (TL501, TL506). The join gathers them over the project
(engine/settle.py drops the findings they make moot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

DISTRIBUTION_VALIDATION_OFF = "distribution-validation-off"
#: The file chooses a reduced precision: autocast, a half dtype, a framework's precision (TL501).
MIXED_PRECISION = "mixed-precision"
#: The file chooses how float32 matmuls run (TF32 allowed), or runs them reduced anyway (TL506).
MATMUL_PRECISION_CHOSEN = "matmul-precision-chosen"

_SET_VALIDATION = "set_default_validate_args"
# Anything that says the script handles precision itself.
_PRECISION_APIS = ("torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp", "apex.amp", "torch.float16", "torch.half", "torch.bfloat16")
# What allows TF32 (or says the precision was chosen): the setting, its backend flags, and
# the newer per-backend `fp32_precision` knobs.
_TF32_SETTINGS = ("torch.set_float32_matmul_precision", "torch.backends.cuda.matmul.allow_tf32",
                  "torch.backends.cudnn.allow_tf32", "torch.backends.fp32_precision",
                  "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.fp32_precision")
# Mixed precision makes the matmuls half precision anyway (TL501 covers its absence).
_REDUCED = ("torch.autocast", "torch.amp", "torch.cuda.amp", "torch.float16", "torch.half", "torch.bfloat16")


def turned_switches(ctx: FileContext) -> tuple[str, ...]:
    """The switches this file turns (``DISTRIBUTION_VALIDATION_OFF``, ``MIXED_PRECISION``,
    ``MATMUL_PRECISION_CHOSEN``): a training step in another module runs under them."""
    found = tuple(name for name, turned in ((MIXED_PRECISION, handles_precision), (MATMUL_PRECISION_CHOSEN, chooses_matmul_precision))
                  if turned(ctx))
    return (*_validation_off(ctx), *found)


# The names one of those spellings needs (a set lookup per file; `references` resolves every name).
_PRECISION_WORDS = frozenset({"autocast", "amp", "float16", "half", "bfloat16", "Accelerator", "precision", "mixed_precision"})
_MATMUL_WORDS = _PRECISION_WORDS | {"set_float32_matmul_precision", "allow_tf32", "fp32_precision"}


def _mentions(ctx: FileContext, words: frozenset[str]) -> bool:
    """Does any name of the module (an attribute's, a keyword's too) spell one of ``words``?"""
    return any(n.value in words for n in ctx.tree.nodes(cst.Name))


def _refers(ctx: FileContext, apis: tuple[str, ...], words: frozenset[str]) -> bool:
    """Does the module refer to one of ``apis`` or to something under one (``torch.cuda.amp.autocast``)
    outside its imports? What ``ctx.references(*apis)`` and its ``prefix`` form answer, asking
    only the chains that spell one of ``words`` or a name imported from one of ``apis`` (every
    file's summary asks: resolving each of its names would cost a tenth of the parse)."""
    def under(name: str) -> bool:
        return any(name == api or name.startswith(api + ".") for api in apis)

    imported = {alias for alias, target in ctx.imports.aliases.items() if under(target)}
    tree = ctx.tree
    for name in tree.nodes(cst.Name):
        if name.value not in words and name.value not in imported:
            continue
        chain: cst.CSTNode = name
        while type(parent := tree.parent(chain)) is cst.Attribute:
            chain = parent  # `torch.cuda.amp.autocast`: the whole chain names the API
        qualified = ctx.qname(chain) if isinstance(chain, (cst.Name, cst.Attribute)) else None
        if qualified is not None and under(qualified) and not any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in tree.ancestors(chain)):
            if _chooses_nothing(tree.parent(chain), chain):
                continue  # `autocast(enabled=False)` around a softmax, or a checkpoint re-entering the caller's state
            return True
    return False


def _chooses_nothing(call: cst.CSTNode | None, func: cst.CSTNode) -> bool:
    """Is ``call`` an autocast that turns reduced precision off (``enabled=False``), or one that
    only re-enters a state saved elsewhere (``autocast(**saved_kwargs)``)?"""
    if type(call) is not cst.Call or call.func is not func or not call.args:
        return False
    if all(arg.star == "**" for arg in call.args):
        return True
    return any(arg.keyword is not None and arg.keyword.value == "enabled" and type(arg.value) is cst.Name and arg.value.value == "False"
               for arg in call.args)


def handles_precision(ctx: FileContext) -> bool:
    """Does the module run anything in reduced precision (``torch.autocast``, ``.half()``,
    ``accelerator.autocast()``, ``Trainer(precision="bf16-mixed")``)?"""
    if _refers(ctx, _PRECISION_APIS, _PRECISION_WORDS):
        return True
    if not _mentions(ctx, _PRECISION_WORDS):
        return False  # none of the spellings below either (asked of every file's summary: most name none)
    if any(not _chooses_nothing(call, call.func) for call in ctx.method_calls({"half", "bfloat16", "autocast"})) \
            or _refers(ctx, ("accelerate.Accelerator",), _PRECISION_WORDS):
        return True  # precision handled by hand or by a framework (`accelerator.autocast()`)
    return any(  # a framework told its precision: `Fabric(precision="bf16-mixed")`, `Trainer(precision=...)`
        arg.keyword is not None and arg.keyword.value in ("precision", "mixed_precision") and not _full_precision(arg.value)
        for call in ctx.tree.nodes(cst.Call)
        for arg in call.args
    )


# A framework's precision given as full float32 or float64 (Lightning's `precision=32`,
# `"32-true"`; Accelerate's `mixed_precision="no"`): chosen, but not reduced.
_FULL_PRECISION = frozenset({"32", "64", "32-true", "64-true", "no", "fp32", "float32"})


def _full_precision(value: cst.BaseExpression) -> bool:
    """Is ``value`` a literal that keeps the framework in full precision?"""
    if type(value) is cst.Integer:
        return value.value in _FULL_PRECISION
    if type(value) is cst.SimpleString:
        return value.value.strip("\"'").lower() in _FULL_PRECISION
    return False  # a variable or a reduced spelling: taken as chosen


def chooses_matmul_precision(ctx: FileContext) -> bool:
    """Does the module allow TF32 (or choose float32's matmul precision at all), or run its
    matmuls in reduced precision anyway?"""
    if _refers(ctx, _TF32_SETTINGS, _MATMUL_WORDS):
        return True  # the precision was chosen
    if _refers(ctx, _REDUCED, _PRECISION_WORDS) or ctx.method_calls({"half", "bfloat16"}):
        return True  # the matmuls run in reduced precision already
    return any(a.attr.value in ("allow_tf32", "fp32_precision") for a in ctx.tree.nodes(cst.Attribute))  # through an alias of the backend module


def _validation_off(ctx: FileContext) -> tuple[str, ...]:
    """``Distribution.set_default_validate_args(False)`` (through any import of
    ``Distribution``, or a distribution class: the setting is the base class's)."""
    for call in ctx.method_calls({_SET_VALIDATION}):
        owner = ctx.qname(call.func.value) or dotted(call.func.value) or ""  # type: ignore[attr-defined]
        if not owner.startswith("torch.distributions") and owner.rsplit(".", 1)[-1] != "Distribution":
            continue  # a method of the project's own of that name
        value = call.args[0].value if call.args and call.args[0].keyword is None else ctx.keyword(call, "value")
        value = value.value if isinstance(value, cst.Arg) else value
        if isinstance(value, cst.Name) and value.value == "False":
            return (DISTRIBUTION_VALIDATION_OFF,)
    return ()


# Lightning's trainers, which run the whole training loop at the precision they are given.
_LIGHTNING_TRAINERS = frozenset({
    "pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.trainer.Trainer",
    "lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric",
})


def full_precision_trainers(ctx: FileContext) -> list[cst.Call]:
    """Lightning ``Trainer``/``Fabric`` constructions that train on an accelerator in float32:
    ``precision=32`` (or ``"32-true"``), or no ``precision`` at all (Lightning's default)."""
    found = []
    for call in ctx.tree.nodes(cst.Call):
        if (ctx.qname(call.func) or "") not in _LIGHTNING_TRAINERS:
            continue
        if any(arg.star for arg in call.args):
            continue  # `Trainer(**cfg)`: the precision may be in the splat
        precision = ctx.keyword(call, "precision")
        if precision is not None and not _full_precision(precision.value):
            continue  # reduced, or a variable: chosen elsewhere
        accelerator = ctx.keyword(call, "accelerator")
        on_host = accelerator is not None and type(accelerator.value) is cst.SimpleString and accelerator.value.value.strip("\"'") == "cpu"
        if not on_host:
            found.append(call)
    return found

