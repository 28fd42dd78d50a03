"""Device knowledge: does the module use an accelerator, and which values stay on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.batches import BatchPlacement
from torchlint.analysis.device_reach import DTYPE_CONVERSIONS, DeviceReach, operands  # noqa: F401 - DTYPE_CONVERSIONS, operands re-exported
from torchlint.analysis.device_reach import DEPTH as _DEPTH, HOST_BUILDERS as _HOST_BUILDERS, is_number as _is_number
from torchlint.analysis.kinds import Kind
from torchlint.analysis.module_moves import ModuleMoves
from torchlint.analysis.functions import dotted_function_name
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


# torch dtypes: `.to(torch.float16)` converts, it does not move.
_DTYPES = {
    "float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
    "int32", "int64", "uint8", "long", "short", "bool", "complex64", "complex128", "cfloat", "cdouble",
    "float8_e4m3fn", "float8_e5m2", "chalf", "qint8", "quint8",
}
# Names that hold a device (or a CUDA ordinal): `.to(device)`, `.to(local_rank)`, `.cuda(gpu)`.
_DEVICE_NAMES = {"dev", "device", "devices", "rank", "local_rank", "gpu", "gpu_id", "gpu_ids", "device_id", "cuda_device", "target_device", "local_device"}
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
_DEVICE_TYPE_FIRST = {"torch.amp.autocast", "torch.autocast", "torch.amp.GradScaler", "torch.amp.autocast_mode.autocast"}


def _is_device_type(arg: cst.Arg, call: cst.Call) -> bool:
    if arg.keyword is not None:
        return arg.keyword.value == "device_type"
    return bool(call.args) and call.args[0] is arg


_ACCELERATOR_WORDS = ("cuda", "mps", "xpu", "npu", "hpu", "meta")
# Attributes of a tensor that are the same tensor (its storage, on its device): `loss.data`, `w.T`.
_SAME_TENSOR = frozenset({"data", "T", "mT", "H", "mH"})


def _host_tensor_class(qualified: str | None) -> bool:
    """``torch.LongTensor``, ``torch.FloatTensor`` (not ``torch.cuda.FloatTensor``, nor the
    generic ``torch.Tensor``): a legacy typed class that builds CPU tensors only."""
    return qualified is not None and qualified.count(".") == 1 and qualified != "torch.Tensor" and legacy_dtype(qualified) is not None


# Tensor methods whose result is a Python value (or a NumPy array): on the host, whatever they read.
_READS_TO_HOST = frozenset({"item", "tolist", "numpy"})


def _sets_accelerator_default(call: cst.Call) -> bool:
    """``torch.set_default_device("cuda")`` (not ``"cpu"``); any ``set_default_tensor_type`` to a CUDA type."""
    if not call.args:
        return False
    value = call.args[0].value
    text = string_value(value)
    if text is not None:
        return "cuda" in text or text.split(":")[0].lower() in _ACCELERATOR_WORDS
    return "cpu" not in (dotted(value) or "").lower()


_DEFAULT_SETTERS = {
    "torch.set_default_device": _sets_accelerator_default,
    "torch.set_default_tensor_type": _sets_accelerator_default,
}
# Frameworks that move models and batches themselves (stable-baselines3, sentence-transformers
# and ultralytics pick a GPU when one is there, with no `device` named).
_DEVICE_FRAMEWORKS = {"pytorch_lightning", "lightning", "accelerate", "deepspeed", "ignite", "fairscale", "apex", "timm", "detectron2", "mmcv", "mmengine",
                      "stable_baselines3", "sentence_transformers", "ultralytics", "trl"}
# transformers' trainers and pipelines place the model on a GPU themselves.
_PLACING_CLASSES = ("transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.pipeline", "transformers.trainer.", "transformers.pipelines")


def is_dtype(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """``torch.float16``, ``torch.long``: a dtype (through imports)."""
    qualified = ctx.qname(expr) or ""
    return qualified.startswith("torch.") and qualified.count(".") == 1 and qualified[len("torch."):] in _DTYPES


def _looks_like_device_name(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return last in _DEVICE_NAMES or last.endswith(("_device", "device")) or last.startswith("device")


class Devices(BatchPlacement, ModuleMoves, DeviceReach):
    """Where values live; loader batches (batches.py), moved modules (module_moves.py) and what is
    computed from device tensors (device_reach.py) are its parts."""

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
            return "device" if text.split(":")[0].lower() in _ACCELERATOR_WORDS else None
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
            return "device"  # x.device
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
            if _looks_like_device_name(name):
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
            if target is not None and _host_tensor_class(self.ctx.qname(target)):
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

    def moved_to_host(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Was ``expr`` already moved to the host: ``x.cpu().detach()``, ``y[0]`` after
        ``y = out.cpu()``, ``torch.from_numpy(a)``?"""
        ctx = self.ctx
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.Attribute and expr.attr.value in _SAME_TENSOR and ctx.qname(expr) is None:
                expr = expr.value  # `loss.data`, `w.T`: the same tensor's storage, where it is
            elif type(expr) is cst.Call and ctx.qname(expr.func) == "torch.autograd.Variable" and expr.args and expr.args[0].keyword is None:
                expr = expr.args[0].value  # `Variable(x)` (pre-0.4) wraps the tensor it is given, on its device
            elif type(expr) is cst.Call and ctx.qname(expr.func) is not None:
                break
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                moved = self.move(expr)
                if moved is not None:
                    return moved == "host"
                if expr.func.attr.value in ("to", "type_as") and not self.dtype_only_to(expr):
                    return False  # `.to(src_tokens)`, `.type_as(x)`: to another tensor's device, wherever that is
                if expr.func.attr.value in _READS_TO_HOST and not expr.args:
                    return True  # `tokens = tokens.tolist()`: a Python value, read already
                expr = expr.func.value
            else:
                break
        if type(expr) in (cst.Name, cst.Attribute, cst.Call) and ctx.values.kind(expr, at) is Kind.NUMPY:
            return True  # a NumPy array (`kmeans(wh / s, n)[0]`, `k.copy()`): host memory, whatever is done to it
        if type(expr) is cst.Call:
            if _returns_host_tensors(expr, ctx):
                return True  # `tokenizer(text, return_tensors="pt")`: tensors built on the host
            if self.module_on_host(expr.func, at):
                return True  # `model_cpu = model.cpu()` moved the module itself: it runs on the host
            if _host_tensor_class(ctx.qname(expr.func)):
                return not self.default_device_set()  # `torch.LongTensor([n])`: a CPU tensor class (its CUDA twin is `torch.cuda.LongTensor`)
            if ctx.qname(expr.func) in _HOST_BUILDERS and self.ctx.keyword(expr, "device") is None:
                if self._copies_a_tensor(expr, at, _depth):
                    return False  # `torch.as_tensor(pred_masks, dtype=torch.uint8)`: the tensor stays where it was
                return not self.default_device_set()  # `torch.set_default_device("cuda")` builds there instead
            if self._torch_op_of_host_values(expr, at, _depth):
                return True
            return self._local_helper_of_host_values(expr, _depth)
        if type(expr) is cst.IfExp and _depth < _DEPTH:
            # `torch.min(torch.as_tensor(g), torch.as_tensor(N)) if g is not None else N`: host on both branches
            return all(self.moved_to_host(branch, at, _depth + 1) or not ctx.syncs.tensorish(branch, at) for branch in (expr.body, expr.orelse))
        if type(expr) in (cst.List, cst.Tuple) or type(expr) is cst.BinaryOperation and _sequence_parts(expr):
            # `[torch.LongTensor([d])] + [torch.LongTensor([h])] * n`: a list whose items are host tensors
            items = [e.value for part in _sequence_parts(expr) for e in part.elements]  # type: ignore[attr-defined]
            return bool(items) and _depth < _DEPTH and all(type(e) is not cst.StarredElement and (_is_number(e) or self.moved_to_host(e, at, _depth + 1))
                                                         for e in items)
        if type(expr) is cst.BinaryOperation:
            # `host_a / host_b`: arithmetic keeps its operands' placement (a device operand
            # would make the result a device value, so both sides must be host or numbers).
            # In a file that names no device at all, one host tensor is enough: the other
            # operands (`scaler.loss_scale`) are Python values or host tensors too, since a
            # host tensor of any size meets a device tensor only by raising.
            sides = operands(expr)
            on_host = [_is_number(side) or self.moved_to_host(side, at, _depth + 1) for side in sides]
            if all(on_host):
                return True
            return any(on_host) and not self.uses_accelerator() and not self._mentions_devices() \
                and not any(self.ctx.syncs.tensorish(side, at) for side, host in zip(sides, on_host) if not host)
        if type(expr) in (cst.ListComp, cst.GeneratorExp) and _depth < _DEPTH:
            return self.moved_to_host(expr.elt, at, _depth + 1)  # a list of host values: its items are on the host
        if type(expr) is cst.IfExp and _depth < _DEPTH:
            # `x.cpu().numpy() if isinstance(x, torch.Tensor) else x`: the other branch is no tensor at all
            tested = ctx.guards.tensor_tested(expr.test)
            return self.moved_to_host(expr.body, at, _depth + 1) and (
                tested is not None and dotted(expr.orelse) == tested or self.moved_to_host(expr.orelse, at, _depth + 1))
        if type(expr) is cst.Comparison and _depth < _DEPTH:  # `best > thr`: the same, for a mask
            sides = [expr.left, *(target.comparator for target in expr.comparisons)]
            return all(_is_number(side) or self.moved_to_host(side, at, _depth + 1) for side in sides)
        return self._every_binding(expr, at, self.moved_to_host, _depth, whole_value_of_tuples=True)

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
            if binding.kind != "assign" or binding.element is not None or function is None or function.name.value != "__init__" \
                    or type(value) is not cst.Name or not any(p.name.value == value.value for p in function.params.params):
                return None
            init, params = function, params | {value.value}
        if init is None or len(params) != 1:
            return None
        return f"{dotted_function_name(self.ctx.tree, init)}:{params.pop()}"

    def _copies_a_tensor(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``torch.tensor(t)`` / ``torch.as_tensor(t)`` of a tensor not known to be on the host:
        the result is on ``t``'s device (a list, a number or an array is host data)."""
        if self.ctx.qname(call.func) not in ("torch.tensor", "torch.as_tensor") or not call.args or call.args[0].keyword is not None:
            return False
        data = call.args[0].value
        if isinstance(data, (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)) or _is_number(data):
            return False
        return self.ctx.syncs.tensorish(data, at) and not self.moved_to_host(data, at, depth + 1)

    def _torch_op_of_host_values(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        """``torch.argmin(host[i:j])``, ``torch.cat([a.cpu(), b.cpu()])``: a torch op whose
        tensor inputs are all on the host (and no ``device=``) computes on the host."""
        qualified = self.ctx.qname(call.func) or ""
        if not qualified.startswith("torch.") or qualified.count(".") != 1 or depth > _DEPTH or not call.args:
            return False
        if self.ctx.keyword(call, "device") is not None or self.ctx.keyword(call, "out") is not None:
            return False
        inputs = []
        for arg in call.args:
            if arg.keyword is not None:
                continue
            value = arg.value
            inputs.extend(e.value for e in value.elements) if isinstance(value, (cst.List, cst.Tuple)) else inputs.append(value)
        return bool(inputs) and all(_is_number(v) or self.moved_to_host(v, at, depth + 1) for v in inputs)

    def _local_helper_of_host_values(self, call: cst.Call, depth: int) -> bool:
        """``xyxy2xywh(torch.tensor(box))``: a function of this file, given only host
        values, that moves nothing to a device, returns host values."""
        if depth > 4 or not call.args:
            return False
        function = self.ctx.functions.called(call, self.ctx.qname(call.func))
        if function is None:
            return False  # a model, a method of an object, or an import: it may move its input
        if any(arg.star or not (_is_number(arg.value) or self.moved_to_host(arg.value, call, depth + 1)) for arg in call.args):
            return False
        # Why the body is read: `def to_device(x): return x.cuda()` takes host values too.
        if any(self.move(inner) == "device" or self.ctx.keyword(inner, "device") is not None
               for inner in self.ctx.tree.descendants(function) if isinstance(inner, cst.Call)):
            return False
        return self._free_values_on_host(function, depth)

    def _free_values_on_host(self, function: cst.FunctionDef, depth: int) -> bool:
        """Are the values a nested function reads from the scope around it (``wh`` of
        ``def fitness(k): return metric(k, wh)``) on the host: a device tensor there makes
        its result one, whatever it is given?"""
        ctx, tree = self.ctx, self.ctx.tree
        outer = tree.scope_of(function)
        if outer is None or type(outer) is cst.Module:
            return True  # a module-level function: its globals are the module's own business
        seen: set[str] = set()
        for node in tree.descendants(function):
            if type(node) is not cst.Name or node.value in seen:
                continue
            bound = ctx.bindings.lookup(node.value, node)
            if not bound or not all(b.kind == "assign" and not tree.is_inside(b.node, function) for b in bound):
                continue  # its own name, a parameter, an import or a function: not a value from outside
            seen.add(node.value)
            if not self.moved_to_host(node, node, depth + 1):
                return False
        return True

    def _every_binding(self, expr: cst.BaseExpression, at: cst.CSTNode, test, depth: int, whole_value_of_tuples: bool) -> bool:  # type: ignore[no-untyped-def]
        """Does ``test`` hold for the value of every assignment that binds the name ``expr``?

        For ``a, b = value`` the matching element is tested; when ``value`` is not a
        literal tuple, ``whole_value_of_tuples`` says whether to test ``value`` itself.
        """
        name = dotted(expr)
        if name is None or depth > _DEPTH or self.ctx.qname(expr) is not None:
            return False
        bound = [b for b in self.ctx.bindings.lookup(name, at) if b.kind != "augassign"]
        tree = self.ctx.tree
        # `k = k[order]`: its own right-hand side sees the earlier bindings, not this one
        bound = [b for b in bound if not (b.kind == "assign" and (at is b.node or tree.is_inside(at, b.node)))
                 and not (b.kind == "comp" and not self._in_comprehension_of(b, at)) and not self._overwritten(b, bound, at)]
        if not bound:
            return False
        for binding in bound:
            value = binding.value
            if binding.kind == "param":
                if self._conditions is not None and test == self.on_device and name not in ("self", "cls") \
                        and self.ctx.tree.enclosing_function(binding.node) is self._condition_scope:
                    self._conditions.add(name)  # a device tensor where the callers pass one (`device_if`)
                    continue
                default = getattr(binding.node, "default", None)
                if test == self.moved_to_host and (isinstance(default, (cst.Integer, cst.Float)) or isinstance(default, cst.Name) and default.value in ("True", "False")):
                    continue  # `thr=4.0`: a number on the host unless a caller says otherwise (a tensor threshold is rare)
                # A nested function's parameter holds what its callers pass: all in this file.
                passed = self.ctx.functions.passed_to(binding)
                if passed is None or not all(test(arg, call, depth + 1) for arg, call in passed):
                    return False
                continue
            if binding.kind in ("for", "comp") and value is not None:
                # `for n in mask.cpu().sum(1)`, `for a, b in zip(x.cpu(), y)`: an item has
                # the placement of what is iterated
                item = _iterated_source(value, binding.element)
                if item is None or not test(item, binding.node, depth + 1):
                    return False
                continue
            if binding.kind != "assign" or value is None:
                return False
            if binding.element is not None:
                if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                    value = value.elements[binding.element].value
                elif isinstance(value, (cst.GeneratorExp, cst.ListComp)):
                    value = value.elt  # `wh, wh0 = (torch.tensor(x) for x in (wh, wh0))`: each element is made alike
                elif not whole_value_of_tuples:
                    return False
            if not test(value, binding.node, depth + 1):
                return False
        return True

    def _in_comprehension_of(self, binding, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
        """Is ``at`` inside the comprehension whose ``for`` made ``binding`` (its variable is
        seen nowhere else)?"""
        tree = self.ctx.tree
        comprehension = next((a for a in tree.ancestors(binding.node) if type(a) is not cst.CompFor), None)
        return comprehension is not None and (at is comprehension or tree.is_inside(at, comprehension))

    def _overwritten(self, binding, bound: list, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
        """Does ``binding`` not reach ``at``: made after it with no loop around both to carry
        it back (``for x in k:`` after ``x, best = metric(k, wh0)`` is read), or assigned over
        on every path, by an assignment after it that stands in a block holding ``at``
        (yolov5's ``with open(...) as f:`` in an early branch, then ``f = anchor_fitness(k)``
        before the loop that reads ``f``)?"""
        tree = self.ctx.tree
        start, end = tree.index(binding.node), tree.index(at)
        if start > end and tree.scope_of(binding.node) is tree.scope_of(at):
            return not any(tree.is_inside(binding.node, loop) for loop in self.ctx.loops.enclosing_loops(at))
        for other in bound:
            if other is binding or other.kind != "assign" or not start < tree.index(other.node) < end:
                continue
            statement = tree.statement_of(other.node)
            block = tree.parent(statement) if statement is not None else None
            if block is not None and not tree.is_inside(at, statement) and tree.is_inside(at, block):
                return True
        return False

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
            found = any(_DEFAULT_SETTERS.get(ctx.qname(call.func) or "", lambda c: False)(call) for call in ctx.tree.nodes(cst.Call))
            found = found or any(type(item.item) is cst.Call and ctx.qname(item.item.func) == "torch.device" and _sets_accelerator_default(item.item)
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
        if any(m.split(".")[0] in _DEVICE_FRAMEWORKS for m in ctx.imports.modules):
            return True  # the framework moves models and batches
        if any(full.startswith(_PLACING_CLASSES) for full in ctx.imports.aliases.values()) or ctx.references(*_PLACING_CLASSES):
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
                if isinstance(call, cst.Call):
                    qualified = self.ctx.qname(call.func)
                    if qualified == "torch.device" or (qualified in _DEVICE_TYPE_FIRST and _is_device_type(ancestor, call)):
                        return True
                    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
                return False
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
                return child is ancestor.value
            return False
        return False




def _sequence_parts(expr: cst.BaseExpression, depth: int = 0) -> list[cst.BaseExpression]:
    """The list or tuple literals a sequence expression is made of (``[a] + [b] * n``: ``[a]``,
    ``[b]``; repetition keeps the items), or [] when it is not one."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        return [expr]
    if not isinstance(expr, cst.BinaryOperation) or depth > 8:
        return []
    if isinstance(expr.operator, cst.Add):
        left, right = _sequence_parts(expr.left, depth + 1), _sequence_parts(expr.right, depth + 1)
        return left + right if left and right else []
    if isinstance(expr.operator, cst.Multiply):
        return _sequence_parts(expr.left, depth + 1) or _sequence_parts(expr.right, depth + 1)
    return []


def _returns_host_tensors(call: cst.Call, ctx: FileContext) -> bool:
    """A tokenizer or processor asked for PyTorch tensors builds them on the host."""
    arg = ctx.keyword(call, "return_tensors")
    return arg is not None and isinstance(arg.value, cst.SimpleString) and arg.value.value.strip("\"'") == "pt"


def _iterated_source(iterable: cst.BaseExpression, element: int | None) -> cst.BaseExpression | None:
    """What a loop target takes its items from: the iterable, or for ``zip(a, b)`` and
    ``enumerate(a)`` the argument at the target's position (None when unknown)."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value in ("zip", "enumerate"):
        positional = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if element is None:
            return None
        if iterable.func.value == "enumerate":
            return positional[0] if element == 1 and positional else None
        return positional[element] if element < len(positional) else None
    return iterable if element is None else None
