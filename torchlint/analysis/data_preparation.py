"""Where a line prepares training data: a dataset's sample method (or a helper it calls),
a function given to ``dataset.map(...)``, the top level of a script; and whether the file
runs the training those samples feed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.dataset_work import is_dataset_class
from torchlint.analysis.names import dotted
from torchlint.analysis.training import runs_a_trainer, trains

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 3  # plain helpers followed up from a dataset's method to the line


def prepares_data(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """Why ``node`` prepares samples ("in `SupervisedDataset.__getitem__()`", "in a function
    given to `.map()`"), or None where it does not (a model's method, a generation helper)."""
    if _inside_map_argument(ctx, node):
        return "in a function given to `.map()`"
    function = ctx.tree.enclosing_function(node)
    if function is None:
        return "at the top level of the script"
    if trains(ctx, function):
        return f"in `{function.name.value}()`, which trains"  # the data tokenized where the run is
    owner = ctx.tree.enclosing_class(function)
    if owner is not None and is_dataset_class(owner):
        return f"in `{owner.name.value}.{function.name.value}()`"
    if owner is None:
        return _called_from_data(ctx, function, depth=0)
    return None


def _called_from_data(ctx: FileContext, function: cst.FunctionDef, depth: int) -> str | None:
    """Why a plain function of the file prepares samples: given to ``.map()``, or called
    (through at most ``_DEPTH`` plain helpers) from a dataset's method (FastChat's
    ``tokenize_conversations``, called by ``preprocess``, called by ``__getitem__``)."""
    name = function.name.value
    if _given_to_map(ctx, name):
        return f"in `{name}()`, given to `.map()`"
    for call in ctx.name_calls(name):
        caller = ctx.tree.enclosing_function(call)
        if caller is None or caller is function:
            continue  # called at the top level (decided there) or recursively
        cls = ctx.tree.enclosing_class(caller)
        if cls is not None and is_dataset_class(cls):
            return f"in `{name}()`, called from `{cls.name.value}.{caller.name.value}()`"
        if cls is None and depth < _DEPTH and _called_from_data(ctx, caller, depth + 1) is not None:
            return f"in `{name}()`, called from `{caller.name.value}()`, which prepares samples"
    return None


def file_trains(ctx: FileContext) -> bool:
    """Does this file run training: a training loop, a ``.backward()``, or a trainer's
    ``train()``/``fit()`` (transformers, Lightning)?"""
    if ctx.loops.training_loops():
        return True
    return any(runs_a_trainer(ctx, call) or ctx.method_name(call) == "backward" for call in ctx.tree.nodes(cst.Call))


def _inside_map_argument(ctx: FileContext, node: cst.CSTNode) -> bool:
    """``dataset.map(lambda ex: tokenizer(ex["text"], ...))``: the node is in a ``.map()`` call's arguments."""
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.Arg:
            call = ctx.tree.parent(ancestor)
            if type(call) is cst.Call and ctx.method_name(call) == "map":
                return True
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
    return False


def _given_to_map(ctx: FileContext, name: str) -> bool:
    """Is the function ``name`` passed to a ``.map()`` of this file, itself or through
    ``functools.partial(name, ...)``?"""
    for call in ctx.method_calls({"map"}):
        for arg in call.args:
            value = arg.value
            if type(value) is cst.Call and (dotted(value.func) or "").rsplit(".", 1)[-1] == "partial" and value.args:
                value = value.args[0].value
            if type(value) is cst.Name and value.value == name:
                return True
    return False


__all__ = ["file_trains", "prepares_data"]
