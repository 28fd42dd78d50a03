"""Value kinds on sight: what a library call returns by its qualified name, methods whose result is
no device tensor, methods that hand back the module they are called on, and names that read as a
loader, an optimizer or a NumPy generator."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.module_tensors import ITSELF, tensors_method
from torchlint.analysis.names import last_segment as _last_segment
from torchlint.analysis.tree import node_types

# torch.* callables that do not return tensors (the one list of them: Python numbers such as
# `torch.seed()`, `torch.initial_seed()`, `torch.get_num_threads()`, objects, contexts, namespaces).
TORCH_NON_TENSOR_PREFIXES = (
    "torch.nn.", "torch.optim.", "torch.utils.", "torch.cuda.", "torch.backends.",
    "torch.distributed.", "torch.device", "torch.dtype", "torch.Size", "torch.manual_seed",
    "torch.set_", "torch.get_", "torch.is_", "torch.no_grad", "torch.enable_grad",
    "torch.inference_mode", "torch.autocast", "torch.amp.", "torch.jit.", "torch.compile",
    "torch.save", "torch.load", "torch.profiler.", "torch.hub.", "torch.multiprocessing.",
    "torch.autograd.grad_mode", "torch.accelerator.", "torch.finfo", "torch.iinfo",
    "torch.use_deterministic", "torch.numel", "torch.typename", "torch.library.",
    "torch.onnx.", "torch.fx.", "torch.export.", "torch.testing.", "torch.random.",
    "torch.serialization.", "torch._dynamo.", "torch.compiler.", "torch.overrides.",
    "torch.futures.", "torch.package.", "torch.mps.", "torch.xpu.", "torch.cpu.", "torch.version",
    "torch.broadcast_shapes", "torch.result_type", "torch.promote_types", "torch.can_cast", "torch.sym_",
    "torch.seed", "torch.initial_seed", "torch.are_deterministic_algorithms_enabled", "torch.Generator",
    "torch.Stream", "torch.Event",
    # out-of-tree device backends register their own namespace (torch_npu's `torch.npu`)
    "torch.npu.", "torch.hpu.", "torch.mlu.", "torch.musa.", "torch.mtia.", "torch.xla.",
)
# A predicate of any torch namespace (`torch.npu.is_available()`, `torch.distributed.is_initialized()`)
# answers with a Python bool.
TORCH_PREDICATE = "is_"
TORCH_TENSOR_IN_NN = ("torch.nn.functional.", "torch.nn.utils.clip_grad_norm_", "torch.nn.init.")
# Tensor methods whose result is not a tensor on the device.
HOST_METHODS = {
    "item", "tolist", "size", "dim", "numel", "element_size", "nelement", "ndimension",
    "data_ptr", "is_contiguous", "__len__", "keys", "items", "values", "get", "stride",
    "get_device", "is_floating_point", "is_complex", "storage_offset", "backward",
}
NUMPY_METHODS = {"numpy"}
# Methods of nn.Module that return the module itself.
# Methods that return the object they are called on (a module stays a module).
MODULE_CHAIN = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16", "requires_grad_", "share_memory"})
# Calls on a name that say the name is an nn.Module.
MODULE_EVIDENCE = {"parameters", "named_parameters", "eval", "train", "modules", "named_modules", "children", "load_state_dict", "apply", "register_forward_hook", "zero_grad"}
# Moves: a name that is moved and also called is a module (a tensor is not callable).
MOVES = frozenset({"to", "cuda", "half", "bfloat16"})
# Class methods that build a model (`AutoModel.from_pretrained(name)`), and the classes
# whose `from_pretrained` builds something else.
PRETRAINED = frozenset({"from_pretrained", "from_config", "load_from_checkpoint"})
NOT_MODELS = ("Tokenizer", "Processor", "Config", "Scheduler", "Extractor", "Vocab", "Dataset", "Generation")


def builds_a_model(receiver: str | None, method: str) -> bool:
    """``AutoModelForCausalLM.from_pretrained(...)``, ``LitNet.load_from_checkpoint(...)``:
    a model, even when its source is never read (not a tokenizer's or a config's)."""
    last = (receiver or "").rsplit(".", 1)[-1]
    return method in PRETRAINED and last[:1].isupper() and not any(word in last for word in NOT_MODELS)


# What `_expr_kind` calls a Python value on sight: literals, displays, comprehensions.
HOST_LITERALS = node_types(cst.Integer, cst.Float, cst.Imaginary, cst.BaseString, cst.List, cst.Dict, cst.Set,
                            cst.ListComp, cst.DictComp, cst.SetComp, cst.Tuple)
NUMBERS_AND_STRINGS = node_types(cst.Integer, cst.Float, cst.BaseString)


# ONNX Runtime's sessions: `session.run(outputs, feeds)` returns a list of NumPy arrays (never
# tensors, whatever device the session's provider runs on).
ONNX_SESSIONS = frozenset({"onnxruntime.InferenceSession", "onnxruntime.capi.onnxruntime_inference_collection.InferenceSession"})
ONNX_RUNS = frozenset({"run"})


def looks_like_loader(name: str) -> bool:
    """``train_loader``, ``self.val_dataloader``, ``loader``: named as a DataLoader
    (``dataloaders``, a collection of them, is not one)."""
    last = _last_segment(name).lower()
    return "loader" in last and not last.endswith("loaders")


def looks_like_numpy_generator(name: str | None) -> bool:
    """``rng``, ``self.np_rng``, ``random_state``: named as a NumPy ``Generator``/``RandomState``."""
    last = _last_segment(name or "").lower()
    return last in ("rng", "random_state", "prng") or last.endswith("_rng") or last.startswith("rng_")


def looks_like_optimizer(name: str) -> bool:
    last = _last_segment(name).lower()
    return "optim" in last or last in {"opt", "opt_g", "opt_d", "optimizer_g", "optimizer_d"}


def library_call_kind(qualified: str) -> Kind:
    """The kind of value a call of the library function ``qualified`` returns (UNKNOWN where no rule says)."""
    if qualified.startswith(("numpy.", "pandas.", "scipy.")):
        return Kind.UNKNOWN if qualified.startswith("pandas.") else Kind.NUMPY  # (scipy computes on NumPy arrays)
    if qualified == "torch.utils.data.DataLoader":
        return Kind.LOADER
    if qualified.startswith("torch.optim.") and qualified.count(".") == 2:
        return Kind.OPTIMIZER
    if qualified.startswith(TORCH_TENSOR_IN_NN):
        return Kind.TENSOR
    if qualified in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer"):
        return Kind.TENSOR  # a tensor, on the device once its module is moved
    if qualified.startswith("torch.nn.parallel.") or qualified == "torch.nn.DataParallel":
        return Kind.MODULE
    if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.rsplit(".", 1)[-1][:1].isupper():
        return Kind.MODULE
    if qualified == "torch.compile" or qualified.startswith("torch.distributed.fsdp.Fully"):
        return Kind.MODULE
    receiver, _, method = qualified.rpartition(".")
    if builds_a_model(receiver, method):
        return Kind.MODULE
    if qualified.startswith(("torchvision.models.", "timm.create_model")):
        return Kind.MODULE
    if qualified.startswith("torch.") and not qualified.startswith(TORCH_NON_TENSOR_PREFIXES) \
            and not method.startswith(TORCH_PREDICATE):
        return Kind.TENSOR
    return Kind.UNKNOWN


def annotated_python_value(function: cst.FunctionDef) -> bool:
    """Is the function annotated to return a plain Python number, flag or string?"""
    returns = function.returns
    return returns is not None and isinstance(returns.annotation, cst.Name) and returns.annotation.value in ("int", "float", "bool", "str")


def optimizer_setting(expr: cst.Subscript) -> bool:
    """``opt.param_groups[i][key]``: one setting of one parameter group."""
    inner = expr.value
    return (isinstance(inner, cst.Subscript) and isinstance(inner.value, cst.Attribute)
            and inner.value.attr.value == "param_groups")


def binds_a_parameter(iterable: cst.BaseExpression, element: int | None) -> bool:
    """Does a loop over ``iterable`` bind a module's parameter: ``m.parameters()``, or
    position 1 of ``m.named_parameters()``? (The module's kind is the caller's question.)"""
    method = tensors_method(iterable, views=ITSELF, wrappers=ITSELF)  # (what the loop binds is known of the call itself only)
    return method == "parameters" and element is None or method == "named_parameters" and element == 1


def binds_a_count(iterable: cst.BaseExpression, element: int | None) -> bool:
    """Does a loop over ``iterable`` bind a Python int: ``range(n)``, or position 0 of
    ``enumerate(...)``?"""
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Name):
        return False
    if iterable.func.value == "range":
        return element is None
    return iterable.func.value == "enumerate" and element == 0
