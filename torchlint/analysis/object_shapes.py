"""The words of the objects analysis: factories, wrappers, preparers and constructors by name,
annotations that name no project class, and the small tests on sight it shares (an annotation's
class name, a call that names a class, a module moved or wrapped, a string key, ``None``)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.kind_names import MODULE_CHAIN
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import Ref

FACTORY_PREFIXES = ("build", "create", "make", "get_model", "load_model", "setup")
# Calls that return the module they are given, wrapped: its forward is what runs.
WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.compile", "torch.jit.script",
    "torch.jit.trace", "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "apex.parallel.DistributedDataParallel",
    "fairscale.nn.FullyShardedDataParallel", "fairscale.nn.data_parallel.FullyShardedDataParallel",
})
# Calls that hand back an engine wrapping the module they are given, first of a tuple, and where the
# module is passed (keyword, position): `engine, optimizer, _, _ = deepspeed.initialize(model=net, ...)`.
ENGINES = {"deepspeed.initialize": ("model", 1)}
# Methods that hand back the objects they are given, in order (`accelerator.prepare(model, opt)`).
PREPARERS = frozenset({"prepare", "prepare_model", "setup"})
# Class methods that build an instance of their class.
CONSTRUCTORS = frozenset({"from_pretrained", "from_config", "load_from_checkpoint", "from_checkpoint"})
# Annotations that never name a project class.
PLAIN_TYPES = frozenset({"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "object", "Any", "None", "Tensor", "Module"})
# Python lists (and tuples) that may hold modules: their elements are a container's members.
LISTS = (cst.List, cst.ListComp, cst.Tuple)
# Calls of the project's functions whose result the join can look up (``Project.class_of``).
RETURNING = frozenset({"local", "import", "method", "super", "object"})


def string_key(expr: cst.Subscript) -> str | None:
    """``"ema"`` of ``state["ema"]``."""
    if len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index or type(expr.slice[0].slice.value) is not cst.SimpleString:
        return None
    key = expr.slice[0].slice.value.evaluated_value
    return key if isinstance(key, str) else None


def dict_entries(value: cst.BaseExpression | None) -> list[tuple[str, cst.BaseExpression]] | None:
    """(key, value) of a dict written with string keys: ``{"ema": ema}``, ``dict(ema=ema)``."""
    if type(value) is cst.Dict:
        return [(e.key.evaluated_value, e.value) for e in value.elements
                if type(e) is cst.DictElement and type(e.key) is cst.SimpleString and isinstance(e.key.evaluated_value, str)]
    if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "dict":
        return [(a.keyword.value, a.value) for a in value.args if a.keyword is not None]
    return None


def single(ref: Ref | None) -> Ref | None:
    """A reference to one class (a container's several members are not one object)."""
    return None if ref is None or ref[0] == "each" else ref


def annotation_name(annotation: cst.BaseExpression) -> str | None:
    """The class an annotation names: ``Net``, ``models.Net``, ``"Net"``, ``Optional[Net]``,
    ``Net | None``; None for plain Python types, unions of classes and anything else."""
    if type(annotation) is cst.SimpleString:
        text = annotation.value.strip("\"'")
        return text if text.replace(".", "").replace("_", "").isalnum() and text.split(".")[-1] not in PLAIN_TYPES else None
    if type(annotation) is cst.Subscript and (dotted(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
        inner = annotation.slice[0].slice if len(annotation.slice) == 1 else None
        return annotation_name(inner.value) if isinstance(inner, cst.Index) else None
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:
        left, right = annotation.left, annotation.right
        if type(right) is cst.Name and right.value == "None":
            return annotation_name(left)
        if type(left) is cst.Name and left.value == "None":
            return annotation_name(right)
        return None
    name = dotted(annotation)
    if name is None or name.rsplit(".", 1)[-1] in PLAIN_TYPES or not name.rsplit(".", 1)[-1][:1].isupper():
        return None
    return name


def names_a_class(name: str) -> bool:
    """``Net``, ``_WrappedModel`` (a private class): a name written as a class's."""
    return name.lstrip("_")[:1].isupper()


def unwrap_moves(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``Net(...).cuda().eval()`` → ``Net(...)``: moves and modes keep the object."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    return value


def positional(function: cst.FunctionDef) -> tuple[str, ...]:
    params = function.params
    return tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def self_key(expr: cst.BaseExpression) -> tuple[str, str] | None:
    """(attribute, key) for ``self.<attribute>.<key>`` and ``self.<attribute>["<key>"]``."""
    if type(expr) is cst.Attribute:
        owner, key = expr.value, expr.attr.value
    elif type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Index \
            and type(expr.slice[0].slice.value) is cst.SimpleString:
        owner, key = expr.value, expr.slice[0].slice.value.evaluated_value
    else:
        return None
    if type(owner) is cst.Attribute and type(owner.value) is cst.Name and owner.value.value == "self":
        return owner.attr.value, key
    return None


def is_none(value: cst.BaseExpression | None) -> bool:
    return type(value) is cst.Name and value.value == "None"
