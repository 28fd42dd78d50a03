"""Device knowledge: does the module use an accelerator, and which values stay on the host.

``Devices`` is made of parts: loader batches (``batches.py``), moved modules (``module_moves.py``),
what is computed from device tensors (``device_reach.py``), values on the host (``host_values.py``);
``device_names.py`` holds devices and dtypes by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.batches import BatchPlacement
from torchlint.analysis.device_names import (
    ACCELERATOR_WORDS, DEFAULT_SETTERS, DEVICE_FRAMEWORKS, DEVICE_TYPE_FIRST, PLACING_CLASSES, is_cpu_device, is_cuda_string, is_device_type,
    host_tensor_class, is_dtype, looks_like_device_name, sets_accelerator_default, string_value,
)
from torchlint.analysis.device_reach import DeviceReach
from torchlint.analysis.host_devices import on_the_host
from torchlint.analysis.host_values import HostValues
from torchlint.analysis.module_moves import ModuleMoves
from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import HOSTED

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

class Devices(HostValues, BatchPlacement, ModuleMoves, DeviceReach):
    """Where values live; loader batches (batches.py), moved modules (module_moves.py), what is
    computed from device tensors (device_reach.py) and values on the host (host_values.py) are its parts."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._uses_accelerator: bool | None = None
        self._host_only: bool | None = None

    # --- moves -----------------------------------------------------------------------
    def device_value(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str | None:
        """Where a device argument points: "host" (``"cpu"``, ``torch.device("cpu")``),
        "device" (``"cuda:0"``, ``0``, ``local_rank``, ``device``, ``x.device``), or None
        (a dtype, a tensor, or something unknown)."""
        ctx = self.ctx
        if depth > 4:
            return None
        if is_cpu_device(expr, ctx):
            return "host"
        text = string_value(expr)
        if text is not None:
            return "device" if text.split(":")[0].lower() in ACCELERATOR_WORDS else None
        if type(expr) is cst.Integer:
            return "device"  # a CUDA ordinal
        if type(expr) is cst.Call:
            if ctx.qname(expr.func) == "torch.device":
                return "device"  # not the host (checked above): a device, maybe chosen at run time
            return None
        if type(expr) is cst.IfExp:
            a, b = self.device_value(expr.body, at, depth + 1), self.device_value(expr.orelse, at, depth + 1)
            if "device" in (a, b) and None not in (a, b):
                return "device"  # `"cuda" if ok else "cpu"`: the host only as a fallback
            return a if a == b else None
        if type(expr) is cst.Attribute and expr.attr.value == "device":
            # `G.device` of a tensor every path of this file builds on the host (a helper's CPU default): the CPU
            return "host" if on_the_host(ctx, expr.value, at) else "device"
        if type(expr) in (cst.Name, cst.Attribute):
            if is_dtype(expr, ctx) or ctx.qname(expr) is not None:
                return None
            name = dotted(expr)
            if name is None:
                return None
            # A parameter's default (`device="cpu"`) is only a default: the caller chooses.
            bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None and b.element is None]
            kinds = {self.device_value(b.value, b.node, depth + 1) for b in bound}  # type: ignore[arg-type]
            if kinds == {"host"}:
                return "host"
            if looks_like_device_name(name):
                return "device"
            if kinds and kinds <= {"device", "host"}:
                return "device"
        return None

    def move(self, call: cst.Call) -> str | None:
        """Is ``call`` a move between host and device: "host" for ``.cpu()`` / ``.to("cpu")``,
        "device" for ``.cuda()`` / ``.to(device)`` / ``.to(local_rank)``, None otherwise
        (``.to(torch.float16)``, ``.to(other_tensor)``, any other call)."""
        func = call.func
        if type(func) is not cst.Attribute:
            return None
        method = func.attr.value
        if method == "cpu":
            return "host"
        if method == "cuda":
            return "device"
        if method == "type":  # `x.type(torch.cuda.FloatTensor)`, `x.type(Tensor)` with `Tensor` one: a copy to the device
            target = call.args[0].value if call.args and call.args[0].keyword is None else None
            if target is not None and host_tensor_class(self.ctx.qname(target)):
                # `x.type(torch.FloatTensor)`: the CPU class, whatever the default device: a copy of a device
                # tensor (of one known on the host, `torch.from_numpy(a).type(...)`, a cast where it is)
                return None if self.moved_to_host(func.value, call) else "host"
            return "device" if target is not None and self.ctx.device_makeable.typed_device_class(target) is not None else None
        if method != "to":
            return None
        target = self.ctx.keyword(call, "device")
        if target is None:
            positional = [a for a in call.args if a.keyword is None and not a.star]
            target = positional[0] if positional else None
        if target is None:
            return None
        return self.device_value(target.value, call)

    def blocking_move(self, call: cst.Call) -> bool:
        """A move to the device that makes the host wait for its copy: no ``non_blocking=`` (or
        ``non_blocking=False``), by keyword or position (``.cuda(d, nb)``, ``.to(d, dtype, nb)``,
        ``.type(T, nb)``), no ``**kwargs`` that may carry it."""
        ctx = self.ctx
        if self.move(call) != "device" or ctx.has_star_kwargs(call):
            return False
        flag = ctx.keyword(call, "non_blocking")
        if flag is not None and not (isinstance(flag.value, cst.Name) and flag.value.value == "False"):
            return False  # `non_blocking=True`, or the user's choice at run time
        positional = len([a for a in call.args if a.keyword is None])
        return positional <= {"to": 2, "cuda": 1, "type": 1}.get(call.func.attr.value, 1)  # type: ignore[attr-defined]

    def overlapped_move(self, call: cst.Call) -> bool:
        """A move to the device asked not to block: a literal ``non_blocking=True`` (by keyword)."""
        flag = self.ctx.keyword(call, "non_blocking")
        return flag is not None and isinstance(flag.value, cst.Name) and flag.value.value == "True" and self.move(call) == "device"

    def constructor_parameter(self, expr: cst.BaseExpression) -> str | None:
        """``Cls.__init__:out_dim`` for ``self.out_dim`` where every binding of it in its class
        is ``self.out_dim = out_dim`` in ``__init__``, a parameter there: it holds what the
        constructions pass (the join knows whether every one passes a host value)."""
        if type(expr) is not cst.Attribute or type(expr.value) is not cst.Name or expr.value.value != "self":
            return None
        bound = self.ctx.bindings.lookup(f"self.{expr.attr.value}", expr)
        params: set[str] = set()
        init = None
        for binding in bound:
            function = self.ctx.tree.enclosing_function(binding.node)
            value = binding.value
            if binding.element is not None and type(value) is cst.Tuple and binding.element < len(value.elements) \
                    and not any(type(e) is cst.StarredElement for e in value.elements):
                value = value.elements[binding.element].value  # `self.hyp, self.autobalance = h, autobalance` (yolov5's ComputeLoss)
            elif binding.element is not None:
                return None
            if binding.kind != "assign" or function is None or function.name.value != "__init__" \
                    or type(value) is not cst.Name or not any(p.name.value == value.value for p in (*function.params.params, *function.params.kwonly_params)):
                return None
            init, params = function, params | {value.value}
        if init is None or len(params) != 1:
            return None
        return f"{dotted_function_name(self.ctx.tree, init)}:{params.pop()}"

    def host_parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str:
        """``audio_write:hosted:wav`` for ``wav.isfinite()`` in ``audio_write(stem, wav)``: ``expr`` is on the
        host where that one parameter of the function around ``at`` holds a host value (the join
        knows whether every call in the project passes one: ``join_params.host_call_params``); ""
        where it is anything else, or needs more than one parameter."""
        params = self.host_if(expr, at)  # type: ignore[attr-defined]
        if params is None or len(params) != 1:
            return ""
        return f"{dotted_function_name(self.ctx.tree, self.ctx.tree.enclosing_function(at))}:{HOSTED}{params[0]}"  # type: ignore[arg-type]

    def dtype_only_to(self, call: cst.Call) -> bool:
        """``x.to(torch.float16)``, ``x.to(dtype=...)``, ``x.to(y.dtype)``: a conversion, no move."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "to" or not call.args:
            return False
        for arg in call.args:
            if arg.star:
                return False
            if arg.keyword is not None:
                if arg.keyword.value not in ("dtype", "non_blocking", "copy", "memory_format"):
                    return False
                continue
            value = arg.value
            name = dotted(value) or ""
            if not (is_dtype(value, self.ctx) or name.endswith("dtype") or isinstance(value, (cst.Name, cst.Attribute)) and "dtype" in name.rsplit(".", 1)[-1].lower()):
                return False
        return True

    def default_device_set(self) -> bool:
        """Does this file make factories build on an accelerator without ``device=``:
        ``torch.set_default_device("cuda")``, ``torch.set_default_tensor_type(torch.cuda.FloatTensor)``,
        ``with torch.device("cuda"):``, or a legacy CUDA type (``Tensor = torch.cuda.FloatTensor``)?"""
        if "_default_device" not in self.__dict__:
            ctx = self.ctx
            found = any(DEFAULT_SETTERS.get(ctx.qname(call.func) or "", lambda c: False)(call) for call in ctx.tree.nodes(cst.Call))
            found = found or any(type(item.item) is cst.Call and ctx.qname(item.item.func) == "torch.device" and sets_accelerator_default(item.item)
                                 for item in ctx.tree.nodes(cst.WithItem))  # `with torch.device("cuda"):`
            found = found or any((ctx.qname(node) or "").startswith("torch.cuda.") and (ctx.qname(node) or "").endswith("Tensor")
                                 and not self._called_in_place(node) for node in ctx.tree.nodes(cst.Attribute))
            self.__dict__["_default_device"] = found
        return self.__dict__["_default_device"]

    def _called_in_place(self, legacy_type: cst.Attribute) -> bool:
        """``torch.cuda.FloatTensor(self.mean)`` builds that one tensor on the device: no
        default for the file's other factories, as ``Tensor = torch.cuda.FloatTensor`` (a
        file written for the device throughout) is taken to be (dino's ``utils.py``)."""
        parent = self.ctx.tree.parent(legacy_type)
        call = self.ctx.tree.parent(parent) if type(parent) is cst.Arg else None
        if type(call) is cst.Call and self.ctx.method_name(call) == "type":
            return True  # `x.type(torch.cuda.FloatTensor)`: that one tensor converted, no default
        return type(parent) is cst.Call and parent.func is legacy_type

    def host_only(self, node: cst.CSTNode | None = None) -> bool:
        """Does the module never touch a device: no accelerator, no ``.to(...)``/``.cuda()``,
        no ``device`` anywhere, no DataParallel? Then every tensor lives on the host and
        reading one is not a host/device sync. For ``node`` in a function whose step the
        project-wide join decides, the answer is the step's: False here (the join drops the
        finding when every step that reaches it is in a host-only file)."""
        if node is not None and self.ctx.loops.step_condition(node) is not None:
            return False
        if self._host_only is None:
            self._host_only = not self.names_device() and self._builds_its_own_model_or_data()
        return self._host_only

    def names_device(self) -> bool:
        """Does the module place (or may it place) anything on a device: an accelerator named,
        ``.to(...)``/``.cuda()``, a ``device`` anywhere, a CUDA ``map_location``, a framework that
        moves models itself? The join asks it of every file a step calls into: a model file that
        moves itself puts the step's tensors on the device. (A whole model loaded with no
        ``map_location`` may come back on a GPU, but a file that moves nothing could only feed
        it host tensors, which raises: it is not counted.)"""
        if "_names_device" not in self.__dict__:
            self.__dict__["_names_device"] = self.uses_accelerator() or self._mentions_devices()
        return self.__dict__["_names_device"]

    def _builds_its_own_model_or_data(self) -> bool:
        """Tensors that come from elsewhere (a parameter, a name the file never binds) may
        be on a device; a file that builds its model or its loader itself placed them. A
        module's own layers (``nn.Linear`` in ``Net.__init__``) are its definition, not a
        build: the code that builds ``Net`` places it, in this file or another."""
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            cls = ctx.tree.enclosing_class(call)
            if cls is not None and ctx.is_module_class(cls.name.value):
                continue
            if ctx.local_module_class(call.func):
                return True
            qualified = ctx.qname(call.func) or ""
            if qualified == "torch.utils.data.DataLoader" or qualified.startswith("torchvision.models."):
                return True
            if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.rsplit(".", 1)[-1][:1].isupper():
                return True
            if self._constructs_a_default_class(call):
                return True
        return False

    def _constructs_a_default_class(self, call: cst.Call) -> bool:
        """``ac = actor_critic(obs_space, act_space)`` on ``def sac(env_fn, actor_critic=core.MLPActorCritic)``:
        the model is built here, from the class the caller picks (by default, one the file names),
        so it sits where this file puts it."""
        if type(call.func) is not cst.Name:
            return False
        for binding in self.ctx.bindings.lookup(call.func.value, call):
            default = getattr(binding.node, "default", None) if binding.kind == "param" else None
            name = dotted(default) if default is not None else None
            if name is not None and name.rsplit(".", 1)[-1][:1].isupper():
                return True
        return False

    def _mentions_devices(self) -> bool:
        if "_mentions" not in self.__dict__:
            self.__dict__["_mentions"] = self._find_device_mentions()
        return self.__dict__["_mentions"]

    def _find_device_mentions(self) -> bool:
        ctx = self.ctx
        if ctx.method_calls({"to", "cuda", "to_device", "type_as", "pin_memory"}):
            return True
        if any(m.split(".")[0] in DEVICE_FRAMEWORKS for m in ctx.imports.modules):
            return True  # the framework moves models and batches
        if any(full.startswith(PLACING_CLASSES) for full in ctx.imports.aliases.values()) or ctx.references(*PLACING_CLASSES):
            return True  # `Trainer(model=model, ...)` moves the model to the GPU
        for node in ctx.tree.nodes(cst.Name):
            lowered = node.value.lower()
            # (not `rank`: A3C's worker processes have ranks and no device; a rank that picks
            # a GPU is given to `.to()`, `.cuda()` or `set_device`, found above and below)
            if "device" in lowered or "cuda" in lowered or "gpu" in lowered or lowered in ("dataparallel", "distributeddataparallel", "ddp", "accelerator", "fabric"):
                return True
        return False

    def uses_accelerator(self) -> bool:
        if self._uses_accelerator is None:
            self._uses_accelerator = self._find_accelerator()
        return self._uses_accelerator

    def _find_accelerator(self) -> bool:
        ctx = self.ctx
        if ctx.method_calls({"cuda"}):
            return True
        for node in ctx.tree.nodes(cst.Attribute):
            name = ctx.qname(node) or ""
            if name.startswith(("torch.cuda.", "torch.accelerator.")):
                return True
        for kind in (cst.SimpleString, cst.FormattedString):
            for node in ctx.tree.nodes(kind):
                if is_cuda_string(node) and self._in_device_position(node):
                    return True
        return False

    def _in_device_position(self, node: cst.CSTNode) -> bool:
        tree = self.ctx.tree
        child: cst.CSTNode = node
        for ancestor in tree.ancestors(node):
            if isinstance(ancestor, (cst.IfExp, cst.ConcatenatedString)):
                child = ancestor
                continue
            if isinstance(ancestor, cst.Arg):
                if ancestor.keyword is not None and ancestor.keyword.value in ("device", "map_location"):
                    return True
                call = tree.parent(ancestor)
                if isinstance(call, cst.Call) and ancestor.keyword is not None and ancestor.keyword.value == "default":
                    # `parser.add_argument("--device", default="cuda")`: the run's device unless told otherwise (BLIP)
                    return _device_option(call)
                if isinstance(call, cst.Call):
                    qualified = self.ctx.qname(call.func)
                    if qualified == "torch.device" or (qualified in DEVICE_TYPE_FIRST and is_device_type(ancestor, call)):
                        return True
                    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
                return False
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
                return child is ancestor.value
            return False
        return False


def _device_option(call: cst.Call) -> bool:
    """Is ``call`` an ``add_argument`` of a device option (``"--device"``, ``dest="gpu_device"``)?"""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
        return False
    for arg in call.args:
        text = string_value(arg.value) if arg.keyword is None or arg.keyword.value == "dest" else None
        if text is not None and looks_like_device_name(text.lstrip("-").replace("-", "_")):
            return True
    return False
