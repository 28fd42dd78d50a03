"""Devices, dtypes and accelerators by name: a string literal's text, ``"cuda"``/``"cpu"`` devices, a
name that holds a device, dtypes (legacy tensor classes too), device-type-first calls, the calls and
frameworks that set or place on an accelerator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def string_value(node: cst.CSTNode) -> str | None:
    """The text of a plain string literal, or the leading text of an f-string."""
    # `type(...) is`, not isinstance: libcst's classes are ABCs, whose failing isinstance is
    # slow, and this is asked of most arguments (no class derives from these three).
    node_type = type(node)
    if node_type is cst.SimpleString:
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd escapes: not a device string anyway
            return None
        return value if isinstance(value, str) else None
    if node_type is cst.FormattedString and node.parts and type(node.parts[0]) is cst.FormattedStringText:  # type: ignore[attr-defined]
        return node.parts[0].value  # type: ignore[attr-defined]
    if node_type is cst.ConcatenatedString:
        return string_value(node.left)  # type: ignore[attr-defined]
    return None


def is_cuda_string(node: cst.CSTNode) -> bool:
    value = string_value(node)
    return value is not None and (value == "cuda" or value.startswith("cuda:") or (isinstance(node, cst.FormattedString) and value.startswith("cuda")))


def is_cpu_device(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if string_value(expr) == "cpu" and not isinstance(expr, cst.FormattedString):
        return True
    if isinstance(expr, cst.Call) and ctx.qname(expr.func) == "torch.device" and expr.args:
        return is_cpu_device(expr.args[0].value, ctx)
    return False


# Calls that read a file into host memory, by their qualified names (dataset_work says what each does
# for a sample; the device analysis, that what they give is on the host until it is moved).
AUDIO_LOADERS = ("torchaudio.load", "librosa.load", "librosa.core.load", "soundfile.read", "scipy.io.wavfile.read", "audioread.audio_open")
VIDEO_DECODERS = ("torchvision.io.read_video", "cv2.VideoCapture", "decord.VideoReader", "av.open")
IMAGE_DECODERS = ("PIL.Image.open", "cv2.imread", "imageio.imread", "imageio.v3.imread", "skimage.io.imread", "torchvision.io.read_image",
                  "torchvision.io.decode_image", "torchvision.io.decode_jpeg", "torchvision.datasets.folder.default_loader",
                  "torchvision.datasets.folder.pil_loader")
_FILE_LOADERS = frozenset((*AUDIO_LOADERS, *VIDEO_DECODERS, *IMAGE_DECODERS, "numpy.load", "numpy.fromfile"))


def loads_to_host(call: cst.Call, ctx: FileContext) -> bool:
    """Does ``call`` read a file into host memory: ``torchaudio.load(p)``, ``librosa.load(p, sr=sr)``,
    ``scipy.io.wavfile.read(p)``, an image decoded, ``torch.load(f, map_location="cpu")``? What it gives
    is on the host until the code moves it."""
    qualified = ctx.qname(call.func)
    if qualified in _FILE_LOADERS:
        return True
    if qualified == "torch.load":
        # Why only with a CPU `map_location`: with none, a checkpoint's tensors come back where they were saved.
        where = ctx.keyword(call, "map_location")
        return where is not None and is_cpu_device(where.value, ctx)
    return False


# torch dtypes: `.to(torch.float16)` converts, it does not move.
DTYPES = {
    "float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
    "int32", "int64", "uint8", "long", "short", "bool", "complex64", "complex128", "cfloat", "cdouble",
    "float8_e4m3fn", "float8_e5m2", "chalf", "qint8", "quint8",
}
# Names that hold a device (or a CUDA ordinal): `.to(device)`, `.to(local_rank)`, `.cuda(gpu)`.
DEVICE_NAMES = {"dev", "device", "devices", "rank", "local_rank", "gpu", "gpu_id", "gpu_ids", "device_id", "cuda_device", "target_device", "local_device"}
# The dtype of each legacy typed tensor class: `torch.LongTensor` holds int64.
LEGACY_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
    "ComplexFloat": "complex64", "ComplexDouble": "complex128",
}


def legacy_dtype(qualified: str | None) -> str | None:
    """``float32`` for ``torch.FloatTensor`` (and ``torch.Tensor``, the default float type)."""
    if qualified == "torch.Tensor":
        return "float32"
    last = (qualified or "").rsplit(".", 1)[-1]
    return LEGACY_DTYPES.get(last[: -len("Tensor")]) if last.endswith("Tensor") else None


# Calls whose first argument (or `device_type=`) names the device: `torch.amp.autocast("cuda")`.
DEVICE_TYPE_FIRST = {"torch.amp.autocast", "torch.autocast", "torch.amp.GradScaler", "torch.amp.autocast_mode.autocast"}


def is_device_type(arg: cst.Arg, call: cst.Call) -> bool:
    if arg.keyword is not None:
        return arg.keyword.value == "device_type"
    return bool(call.args) and call.args[0] is arg


ACCELERATOR_WORDS = ("cuda", "mps", "xpu", "npu", "hpu", "meta")
# Attributes of a tensor that are the same tensor (its storage, on its device): `loss.data`, `w.T`.
SAME_TENSOR = frozenset({"data", "T", "mT", "H", "mH"})


def host_tensor_class(qualified: str | None) -> bool:
    """``torch.LongTensor``, ``torch.FloatTensor`` (not ``torch.cuda.FloatTensor``, nor the
    generic ``torch.Tensor``): a legacy typed class that builds CPU tensors only."""
    return qualified is not None and qualified.count(".") == 1 and qualified != "torch.Tensor" and legacy_dtype(qualified) is not None


# Tensor methods whose result is a Python value (or a NumPy array): on the host, whatever they read.
READS_TO_HOST = frozenset({"item", "tolist", "numpy"})


def sets_accelerator_default(call: cst.Call) -> bool:
    """``torch.set_default_device("cuda")`` (not ``"cpu"``); any ``set_default_tensor_type`` to a CUDA type."""
    if not call.args:
        return False
    value = call.args[0].value
    text = string_value(value)
    if text is not None:
        return "cuda" in text or text.split(":")[0].lower() in ACCELERATOR_WORDS
    return "cpu" not in (dotted(value) or "").lower()


DEFAULT_SETTERS = {
    "torch.set_default_device": sets_accelerator_default,
    "torch.set_default_tensor_type": sets_accelerator_default,
}
# Frameworks that move models and batches themselves (stable-baselines3, sentence-transformers
# and ultralytics pick a GPU when one is there, with no `device` named).
DEVICE_FRAMEWORKS = {"pytorch_lightning", "lightning", "accelerate", "deepspeed", "ignite", "fairscale", "apex", "timm", "detectron2", "mmcv", "mmengine",
                      "stable_baselines3", "sentence_transformers", "ultralytics", "trl"}
# transformers' trainers and pipelines place the model on a GPU themselves.
PLACING_CLASSES = ("transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.pipeline", "transformers.trainer.", "transformers.pipelines")


def is_dtype(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """``torch.float16``, ``torch.long``: a dtype (through imports)."""
    qualified = ctx.qname(expr) or ""
    return qualified.startswith("torch.") and qualified.count(".") == 1 and qualified[len("torch."):] in DTYPES


def looks_like_device_name(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return last in DEVICE_NAMES or last.endswith(("_device", "device")) or last.startswith("device")
