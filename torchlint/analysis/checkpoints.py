"""Checkpoint saves: a call that writes a model's weights (and often its optimizer's state) to
disk (``torch.save(model.state_dict(), path)``, ``torch.save({"model": m.state_dict(), ...})``,
``accelerator.save_state()``, ``model.save_pretrained()``, ``trainer.save_checkpoint()``), and
the guards that make one rare on purpose (``if val_loss < best:``, ``if is_best:``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.values import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Library methods that write a whole checkpoint: Accelerate's, transformers' and diffusers',
# Lightning's and DeepSpeed's.
# (A library's `save(obj, path)` beside them, `accelerator.save(...)`, `fabric.save(path, state)`,
# `xm.save(...)`, is torch.save's: a checkpoint where an argument holds weights.)
_LIBRARY_SAVES = frozenset({"save_state", "save_pretrained", "save_checkpoint", "save_model"})
# Receivers of `save_pretrained` that hold no weights: a tokenizer's files are a few megabytes of
# vocabulary, a config's a few lines, written in milliseconds.
_LIGHT_RECEIVERS = re.compile(r"token|processor|config|cfg|feature_extractor|scheduler", re.IGNORECASE)
# A function whose name says it saves a checkpoint (`save_checkpoint(state, is_best, filename)`):
# what it is handed to `torch.save` is that checkpoint, whatever its parameter is called.
_SAVER_NAME = re.compile(r"save|checkpoint|ckpt", re.IGNORECASE)
# Names a guard compares with when it saves only on an improvement (`if val_loss < best_loss:`).
_IMPROVEMENT_NAME = re.compile(r"best|lowest|highest|min_|max_|improv", re.IGNORECASE)
_ORDERINGS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def saved_checkpoint(ctx: FileContext, call: cst.Call) -> str | None:
    """What ``call`` writes when it saves a model's weights ("`model`'s state dict", "a
    checkpoint"), or None: no save, or a save of something small (a tensor of metrics, a list of
    losses, a tokenizer's vocabulary)."""
    method = ctx.method_name(call)
    if method in _LIBRARY_SAVES:
        receiver = dotted(call.func.value) or ""  # type: ignore[attr-defined]
        if receiver == "self" or receiver.startswith("self.") and method == "save_checkpoint" or _LIGHT_RECEIVERS.search(receiver):
            return None  # (a project's own `self.save_checkpoint()` is judged at the `torch.save` it makes)
        return f"a checkpoint (`{receiver}.{method}`)" if receiver else None
    if ctx.qname(call.func) == "torch.save":
        saved = ctx.argument(call, 0, "obj")
        return _weights(ctx, saved.value, call) if saved is not None else None
    if method == "save" and dotted(call.func.value) != "self":  # type: ignore[attr-defined]
        # (a parameter is no checkpoint here, whatever its function's name: `np.save(path, features)`)
        held = (_weights(ctx, arg.value, call, params=False) for arg in call.args if arg.keyword is None and not arg.star)
        return next((w for w in held if w is not None), None)
    return None


def _weights(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, params: bool = True) -> str | None:
    """What weights ``value`` holds: a state dict, a dict of them, a whole module, or a name bound
    to one; a parameter of a function named for saving (its callers hand it the checkpoint)."""
    if type(value) is cst.Call and ctx.method_name(value) == "state_dict":
        owner = value.func.value  # type: ignore[attr-defined]
        return f"`{dotted(owner) or plain_code(ctx.module, owner)}`'s state dict"
    if type(value) is cst.Dict:
        held = [w for e in value.elements if type(e) is cst.DictElement and (w := _weights(ctx, e.value, at, depth + 1, params))]
        return "a checkpoint of " + held[0] if held else None
    if type(value) is not cst.Name:
        # `{k: v.cpu() for k, v in model.state_dict().items()}`, `copy.deepcopy(model.state_dict())`
        inner = next((n for n in ctx.tree.descendants(value) if type(n) is cst.Call and ctx.method_name(n) == "state_dict"), None)
        return _weights(ctx, inner, at, depth + 1, params) if inner is not None else None
    if depth > 2:
        return None
    if ctx.values.kind(value, at) is Kind.MODULE:
        return f"the whole module `{value.value}`"
    binding = ctx.bindings.reaching(value.value, at)
    if binding is None:
        return None
    if binding.kind == "param" and params:
        function = ctx.tree.enclosing_function(at)
        return "the checkpoint it is handed" if function is not None and _SAVER_NAME.search(function.name.value) else None
    if binding.kind == "assign" and binding.element is None and binding.value is not None:
        return _weights(ctx, binding.value, binding.node, depth + 1, params)
    return None


def improvement_guard(ctx: FileContext, node: cst.CSTNode, stop: cst.CSTNode | None) -> cst.If | None:
    """The ``if`` between ``node`` and ``stop`` that lets it run only when a metric improves
    (``if val_loss < best:``, ``if acc > max_acc:``, ``if is_best:``), or None."""
    for branch in ctx.guards.conditions(node, stop):
        if ctx.tree.is_inside(node, branch.body) and _improves(branch.test):
            return branch
    return None


def _improves(test: cst.BaseExpression) -> bool:
    if type(test) is cst.BooleanOperation:
        return _improves(test.left) or _improves(test.right)
    if type(test) is cst.Comparison:
        sides = (test.left, *(c.comparator for c in test.comparisons))
        return any(type(c.operator) in _ORDERINGS for c in test.comparisons) and any(_IMPROVEMENT_NAME.search(dotted(s) or "") for s in sides)
    return _IMPROVEMENT_NAME.search(dotted(test) or "") is not None  # `if is_best:`


def called_only_when_rare(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Is every call of ``function`` in this file made on an improvement or under a rare guard
    (``if acc > best_acc: save_model(model, path)``)? The join knows a call's every-N guards, not
    its improvement guards: this file's calls of a saver say how it is used. False where the file
    makes no call of it (another file's calls are the join's)."""
    name = function.name.value
    calls = [*ctx.name_calls(name), *ctx.method_calls(name)]
    return bool(calls) and all(improvement_guard(ctx, call, None) is not None or ctx.guards.rare(call) for call in calls)


# What a loop that saves every step may also do to the files it writes (pyGAT's `glob.glob('*.pkl')`,
# then `os.remove(file)` of the older ones): host work per step that grows with the directory.
_FILE_CHURN = frozenset({"glob.glob", "glob.iglob", "os.listdir", "os.scandir", "os.remove", "os.unlink", "shutil.rmtree"})


def file_churn(ctx: FileContext, loop: cst.CSTNode) -> list[cst.Call]:
    """The calls of ``loop``'s body (nested loops included) that list or remove files on every
    pass: none under a rare guard."""
    found = [call for call in ctx.loops.loop_calls(loop) if ctx.qname(call.func) in _FILE_CHURN and not ctx.guards.rare(call, stop=loop)]
    return sorted(found, key=ctx.tree.index)
