"""The keywords a call passes through ``**d`` where the caller builds ``d`` with known string keys
(x-transformers' ``TransformerWrapper(**enc_transformer_kwargs, ...)``, ``enc_transformer_kwargs =
pick_and_pop(['num_tokens', 'max_seq_len'], enc_kwargs)`` then ``enc_transformer_kwargs['emb_dropout'] = ...``):
a switch none of those keys names is left at its default there (``CallSite.given``). A file that never mentions torch
is summarised without libcst (``light.py``), where such a call keeps ``given`` None: any keyword may be passed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.compiled_roots import given_arguments
from torchlint.analysis.device_names import string_value

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# what a dict with known keys may be used for without gaining keys unseen
_READS = frozenset({"get", "pop", "items", "keys", "values", "copy"})


def given_with_splats(ctx: FileContext, call: cst.Call) -> tuple[int, tuple[str, ...]] | None:
    """``given_arguments(call)``, where its only ``*``/``**`` arguments are ``**d`` of local dicts whose keys
    this file shows (``splat_keys``): those keys among the keywords; None where any may hold more."""
    plain = given_arguments(call)
    if plain is not None or any(a.star == "*" for a in call.args):
        return plain
    keys: list[str] = []
    for arg in call.args:
        if arg.star == "**":
            found = splat_keys(ctx, arg.value, call)
            if found is None:
                return None
            keys.extend(found)
    rest = given_arguments(call.with_changes(args=[a for a in call.args if not a.star]))
    return (rest[0], (*rest[1], *keys)) if rest is not None else None


def splat_keys(ctx: FileContext, value: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, ...] | None:
    """The keys of the local dict ``value`` names at ``at``: bound once in its function, to a dict display with
    string keys, ``dict(a=...)`` or a call of a helper of the file returning ``dict(zip(keys, ...))`` given a list of
    strings, and otherwise only given string-keyed items (``d["k"] = v``), read, or splatted. None otherwise."""
    if type(value) is not cst.Name:
        return None
    function = ctx.tree.enclosing_function(at)
    bound = ctx.bindings.lookup(value.value, at)
    if function is None or len(bound) != 1 or bound[0].kind != "assign" or bound[0].element is not None \
            or ctx.tree.enclosing_function(bound[0].node) is not function:
        return None  # (a parameter, or bound twice: keys its callers or another branch choose)
    keys = _built_keys(ctx, bound[0].value)
    if keys is None:
        return None
    for use in ctx.tree.names_valued(value.value):
        if ctx.tree.enclosing_function(use) is not function or use is value:
            continue
        added = _use_keys(ctx, use)
        if added is None:
            return None
        keys.extend(added)
    return tuple(dict.fromkeys(keys))


def _built_keys(ctx: FileContext, value: cst.BaseExpression | None) -> list[str] | None:
    if type(value) is cst.Dict:
        keys = [string_value(e.key) if type(e) is cst.DictElement else None for e in value.elements]
        return keys if None not in keys else None  # type: ignore[return-value]
    if type(value) is not cst.Call:
        return None
    if type(value.func) is cst.Name and value.func.value == "dict" and all(a.keyword is not None and not a.star for a in value.args):
        return [a.keyword.value for a in value.args]  # type: ignore[union-attr]
    helper = ctx.functions.called(value, ctx.qname(value.func)) if type(value.func) is cst.Name else None
    first = value.args[0].value if value.args and value.args[0].keyword is None and not value.args[0].star else None
    if helper is None or type(first) not in (cst.List, cst.Tuple) or not _zips_first_parameter(ctx, helper):
        return None
    keys = [string_value(e.value) if type(e) is cst.Element else None for e in first.elements]  # type: ignore[union-attr]
    return keys if None not in keys else None  # type: ignore[return-value]


def _zips_first_parameter(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Does ``function`` end with its one ``return dict(zip(keys, ...))``, ``keys`` its first parameter, never bound again?"""
    params = function.params.params
    body = function.body.body if type(function.body) is cst.IndentedBlock else ()
    last = body[-1] if body else None
    returned = last.body[0].value if type(last) is cst.SimpleStatementLine and len(last.body) == 1 and type(last.body[0]) is cst.Return else None
    if not params or type(returned) is not cst.Call or type(returned.func) is not cst.Name or returned.func.value != "dict" \
            or len(returned.args) != 1 or type(zipped := returned.args[0].value) is not cst.Call or type(zipped.func) is not cst.Name \
            or zipped.func.value != "zip" or not zipped.args or type(keys := zipped.args[0].value) is not cst.Name:
        return False
    name = params[0].name.value
    returns = sum(1 for s in body if type(s) is cst.SimpleStatementLine and any(type(small) is cst.Return for small in s.body))
    return keys.value == name and returns == 1 and all(b.kind == "param" for b in ctx.bindings.lookup(name, returned))


def _use_keys(ctx: FileContext, use: cst.Name) -> list[str] | None:
    """The keys one use of the dict adds: ``d["k"] = v`` adds "k"; a read, ``d.get(...)``, ``**d`` none; None for any other use."""
    parent = ctx.tree.parent(use)
    if type(parent) is cst.AssignTarget:
        return []  # (its one binding, the dict built)
    if type(parent) is cst.Arg and parent.star == "**":
        return []
    if type(parent) is cst.Attribute and parent.value is use and parent.attr.value in _READS:
        return []
    if type(parent) is cst.Subscript and parent.value is use and len(parent.slice) == 1 and type(parent.slice[0].slice) is cst.Index:
        key = string_value(parent.slice[0].slice.value)
        target = ctx.tree.parent(parent)
        if type(target) is cst.AssignTarget:
            return [key] if key is not None else None
        return [] if type(target) is not cst.Del else None  # (a read of one item)
    return None
