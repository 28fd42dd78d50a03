"""Branches chosen once per run, not per step: by the device (``if torch.cuda.is_available():``,
``if args.cuda:``), the operating system, the torch version (or its ``except AttributeError:``
fallback), an export or a trace, a setting off by default, or a tensor a caller passes
(``if isinstance(v, torch.Tensor): v = v.item()``); and whether code runs whenever its function
is reached (``runs_when_reached``). A mixin of :class:`~torchlint.analysis.guards.Guards`, whose
``ctx`` and ``conditions`` it uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.devices import string_value
from torchlint.analysis.guard_shapes import (
    AVAILABILITY, COMPAT_ERRORS, DEVICE_FLAG, EXPORT_TESTS, ON_BY_DEFAULT, OTHER_DEVICES, PLATFORM_TESTS, conjuncts, is_main_guard, mentions,
    mentions_device, mentions_version,
)
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.tree import FUNCTION_OR_CLASS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ChosenBranches:
    """Branches chosen per run (see the module docstring)."""

    ctx: FileContext

    def tensor_if_passed(self, node: cst.CSTNode) -> bool:
        """``if isinstance(v, torch.Tensor): v = v.item()`` on a parameter (or an item of
        ``**kwargs``): the branch runs only when a caller passes a tensor."""
        ctx = self.ctx
        function = ctx.tree.enclosing_function(node)
        if function is None:
            return False
        params = {p.name.value for p in (*function.params.params, *function.params.posonly_params, *function.params.kwonly_params)}
        for star in (function.params.star_arg, function.params.star_kwarg):
            if isinstance(star, cst.Param):
                params.add(star.name.value)
        for branch in self.conditions(node):
            if not ctx.tree.is_inside(node, branch.body):
                continue
            name = self.tensor_tested(branch.test)
            if name is not None and mentions(node, name, ctx.tree.descendants) and self._from_parameters(name, branch, params):
                return True
        return False

    def no_tensor_here(self, node: cst.CSTNode, name: str) -> bool:
        """Is ``node`` where a test has said ``name`` is no tensor: in the ``else`` of ``if
        isinstance(name, torch.Tensor):`` (demucs' ``ref_size = reference``, a length given as
        a number) or the body of ``if not isinstance(name, torch.Tensor):``?"""
        tree = self.ctx.tree
        for branch in self.conditions(node):
            test, negated = branch.test, False
            if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                test, negated = test.expression, True
            if self.tensor_tested(test) != name:
                continue
            taken = branch.body if negated else branch.orelse
            if taken is not None and tree.is_inside(node, taken):
                return True
        return False

    def sequence_tested(self, node: cst.CSTNode, name: str) -> bool:
        """Is ``node`` in the body of an ``if``/``elif`` whose test says ``name`` is a list or tuple
        (``elif isinstance(v, list):``, also joined by ``and``)? MaskData's ``filter`` picks by type."""
        ctx = self.ctx
        for branch in self.conditions(node):
            if not ctx.tree.is_inside(node, branch.body):
                continue
            tests = [branch.test]
            while tests:
                test = tests.pop()
                if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
                    tests += [test.left, test.right]
                elif type(test) is cst.Call and dotted(test.func) == "isinstance" and ctx.qname(test.func) is None and len(test.args) == 2 \
                        and dotted(test.args[0].value) == name:
                    kinds = test.args[1].value
                    types = [e.value for e in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
                    if types and all(dotted(t) in ("list", "tuple") for t in types):
                        return True
        return False

    def tensor_tested(self, test: cst.BaseExpression) -> str | None:
        """``v`` for ``isinstance(v, torch.Tensor)`` (also in a tuple of types) and ``torch.is_tensor(v)``."""
        if not isinstance(test, cst.Call) or not test.args:
            return None
        func = self.ctx.qname(test.func) or dotted(test.func)
        subject = test.args[0].value
        if func == "torch.is_tensor":
            return dotted(subject)
        if func != "isinstance" or len(test.args) != 2:
            return None
        kinds = test.args[1].value
        types = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if any((self.ctx.qname(t) or "") in ("torch.Tensor", "torch.FloatTensor") for t in types):
            return dotted(subject)
        return None

    def _from_parameters(self, name: str, at: cst.CSTNode, params: set[str]) -> bool:
        """Is every binding of ``name`` a parameter, or a loop over one (``for k, v in kwargs.items()``)?"""
        # `v = v.item()` inside the branch is the conversion itself, not where v comes from
        bound = [b for b in self.ctx.bindings.lookup(name, at) if not self.ctx.tree.is_inside(b.node, at)]
        if name in params and all(b.kind == "param" for b in bound):
            return True
        return bool(bound) and all(
            b.kind in ("for", "comp") and b.value is not None
            and any(isinstance(n, cst.Name) and n.value in params for n in (b.value, *self.ctx.tree.descendants(b.value)))
            for b in bound
        )

    def device_branch(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch (``if``/``else``, ``a if t else b``) chosen by the device:
        ``if train_on_gpu:``, ``... if not use_cuda else ...``, ``if torch.cuda.is_available():``?"""
        return self._in_branch(node, lambda test: mentions_device(test, self.ctx.tree.descendants), stop=stop)

    def device_only(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under ``if`` statements (up to ``stop``) that only test for the device,
        in their bodies: ``if use_gpu:``, ``if args.cuda:``, ``if torch.cuda.is_available():``,
        ``if x.is_cuda:``, ``if device.type == "cuda":``? Such a test holds on every step of a
        run on the GPU: it says nothing of running the code rarely."""
        conditions = self.conditions(node, stop)
        return bool(conditions) and all(self._on_the_device(node, c) for c in conditions)

    def _on_the_device(self, node: cst.CSTNode, branch: cst.If) -> bool:
        """Is ``node`` in the block a CUDA run takes (``cuda_branch``): the body of a device test, or
        the ``else``/``elif`` of a test for another device (``if device == "mps": ... elif device ==
        "cuda":``, llm.c's timing sync)?"""
        taken = self.cuda_branch(branch)
        return taken is not None and self.ctx.tree.is_inside(node, taken)

    def device_test(self, test: cst.BaseExpression, flags: bool = True) -> bool:
        """Does ``test`` only ask whether the run uses the device (``x.is_cuda``, ``use_gpu``,
        ``torch.cuda.is_available()``, ``device.type == "cuda"``)? It holds on every pass of a GPU run.
        Without ``flags``, only what a tensor or the machine says (``x.is_cuda``, ``x.device.type ==
        "cuda"``, ``torch.cuda.is_available()``), not a flag its callers pass (``if on_gpu:``), which
        may be off where the device is there."""
        if type(test) is cst.Call:
            return self.ctx.qname(test.func) in AVAILABILITY
        if type(test) in (cst.Name, cst.Attribute):
            if not flags:
                return type(test) is cst.Attribute and test.attr.value == "is_cuda"
            return DEVICE_FLAG.fullmatch((dotted(test) or "").rsplit(".", 1)[-1].lower()) is not None
        if type(test) is cst.Comparison and len(test.comparisons) == 1:  # `device.type == "cuda"`, `device != "cpu"`
            operator, compared = type(test.comparisons[0].operator), (test.left, test.comparisons[0].comparator)
            wanted = {cst.Equal: "cuda", cst.NotEqual: "cpu"}.get(operator)
            if wanted is None:
                return False  # (`x.device.type in ["cpu", "privateuseone"]`: no string compares equal to None)
            if not flags:  # a tensor's device (`x.device.type`), not a setting (`args.device == "cuda"`)
                return any(string_value(side) == wanted for side in compared) and any((dotted(side) or "").endswith((".device", ".device.type")) for side in compared)
            return any(string_value(side) == wanted for side in compared) and any("device" in (dotted(side) or "") or (dotted(side) or "").endswith(".type") for side in compared)
        return False

    def off_the_device(self, branch: cst.If | cst.IfExp, child: cst.CSTNode) -> str | None:
        """Words for ``child``, a branch of ``branch`` taken only where the tensor (or the run)
        is not on a CUDA device: the body of ``if x.device.type == "mps":`` (also a name bound
        to that test, ``not x.is_cuda``, ``x.is_cpu``, ``if device == "cpu":``, ``not
        torch.cuda.is_available()``), or the ``else`` of a CUDA test (``if x.is_cuda: ...
        else:``). None otherwise: a CUDA-only branch runs on the GPU the rules price."""
        test = self._named_test(branch.test, branch)  # type: ignore[attr-defined]
        if child is branch.body:
            off = [part for part in conjuncts(test) if self._off_cuda_test(part)]
            if not off:
                return None
            shown = off[0]
        elif child is branch.orelse and self._cuda_test(test):
            shown = test  # `if x.is_cuda: ... else: <child>`, `if torch.cuda.is_available(): ... else:`
        else:
            return None
        code = " ".join(plain_code(self.ctx.module, shown).split())
        return f"only where the tensor is not on a CUDA device (`{code}`): never on the GPU"

    def cuda_branch(self, branch: cst.If) -> cst.BaseSuite | None:
        """The block of an ``if``/``elif`` chain that a run on the CUDA GPU takes: the body of
        its first test that holds on CUDA (``elif device == "cuda":``, ``if x.is_cuda:``),
        past tests that hold only off it (``if device == "mps":``). None where a test in between
        asks something else: then which block runs is not known."""
        current: cst.CSTNode | None = branch
        while type(current) is cst.If:
            test = self._named_test(current.test, current)  # type: ignore[attr-defined]
            if self.device_test(test):
                return current.body
            if not self._off_cuda_test(test):
                return None
            current = current.orelse
        return current.body if type(current) is cst.Else else None  # (`if device == "mps": ... else:`)

    def _cuda_test(self, test: cst.BaseExpression) -> bool:
        """Does ``test`` hold only on CUDA: ``x.is_cuda``, ``x.device.type == "cuda"``,
        ``torch.cuda.is_available()`` (not another accelerator's: the ``else`` of ``if
        torch.backends.mps.is_available():`` runs on a CUDA machine)?"""
        if type(test) is cst.Call:
            return self.ctx.qname(test.func) == "torch.cuda.is_available"
        return self.device_test(test, flags=False)

    def _off_cuda_test(self, test: cst.BaseExpression) -> bool:
        """Does ``test`` hold only off CUDA: a device compared equal to another device's name
        (``x.device.type == "mps"``, ``device == "cpu"``) or unequal to ``"cuda"``, ``x.is_cpu``,
        ``x.is_mps``, or ``not`` a CUDA test (``not x.is_cuda``, ``not torch.cuda.is_available()``)?"""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            return self._cuda_test(test.expression)
        if type(test) is cst.BooleanOperation and type(test.operator) is cst.Or:
            return self._off_cuda_test(test.left) and self._off_cuda_test(test.right)
        if type(test) is cst.Attribute:
            return test.attr.value in ("is_cpu", "is_mps", "is_xla", "is_meta")
        if type(test) is not cst.Comparison or len(test.comparisons) != 1:
            return False
        operator, compared = type(test.comparisons[0].operator), (test.left, test.comparisons[0].comparator)
        listed = compared[1]
        if operator is cst.In and type(listed) in (cst.List, cst.Tuple, cst.Set) and listed.elements:  # `x.device.type in ["cpu", "mps"]`
            names = [string_value(e.value) for e in listed.elements]  # type: ignore[attr-defined]
            return "device" in (dotted(test.left) or "").lower() and all(n is not None and n.split(":")[0] in OTHER_DEVICES for n in names)
        names = [string_value(side) for side in compared]
        device = [side for side, name in zip(compared, names) if name is None]
        if len(device) != 1 or "device" not in (dotted(device[0]) or "").lower():
            return False  # (`mode == "cpu"`: not a device; a call: `torch.device("cpu")` is left alone)
        name = next(n for n in names if n is not None).split(":")[0]
        return (operator is cst.Equal and name in OTHER_DEVICES) or (operator is cst.NotEqual and name == "cuda")

    def platform_branch(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in a branch chosen by the operating system (``if sys.platform ==
        "win32":``, ``os.name == "nt"``, ``platform.system()``)? Code there serves a platform
        that lacks what the other branch uses (Windows has no NCCL) on purpose."""
        def by_platform(test: cst.BaseExpression) -> bool:
            return any(self.ctx.qname(n) in PLATFORM_TESTS for n in (test, *self.ctx.tree.descendants(test))
                       if isinstance(n, (cst.Attribute, cst.Name)))

        return self._in_branch(node, by_platform)

    def version_gated(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in a branch chosen by the torch version (``if is_torch_version(">=",
        "2.3"): new() else: old()``, ``torch.__version__``, ``TORCH_GREATER_EQUAL_2_3``)?
        Code there serves both old and new torch on purpose."""
        return self._in_branch(node, lambda test: mentions_version(test, self.ctx.tree.descendants)) or self._compat_fallback(node)

    def _compat_fallback(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in an ``except`` for an API a torch version lacks (``AttributeError``,
        ``TypeError``, ``ImportError``...), the fallback of a ``try`` that uses the new one?"""
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, cst.ExceptHandler) and ancestor.type is not None:
                caught = ancestor.type.elements if isinstance(ancestor.type, cst.Tuple) else [ancestor.type]
                names = {dotted(getattr(e, "value", e)) for e in caught}
                if names & COMPAT_ERRORS:
                    return True
        return False

    def export_only(self, node: cst.CSTNode) -> bool:
        """Is ``node`` in the body of ``if torch.onnx.is_in_onnx_export():`` (or
        ``torch.jit.is_tracing()``/``is_scripting()``)? That code runs while a model is
        exported or traced, once, and is often written for the exporter on purpose."""
        ctx = self.ctx

        def exporting(test: cst.BaseExpression) -> bool:
            calls = (n for n in (test, *ctx.tree.descendants(test)) if isinstance(n, cst.Call))
            return any(ctx.qname(c.func) in EXPORT_TESTS for c in calls)

        return self._in_branch(node, exporting, body_only=True)

    def while_exporting(self, test: cst.BaseExpression) -> bool:
        """Does ``test`` hold only while a model is exported or traced: a conjunct that is
        ``torch.onnx.is_in_onnx_export()`` (or ``torch.jit.is_tracing()``...) itself, not negated
        (``if not torch.jit.is_scripting():`` is the eager path)? Its body runs in no step."""
        return any(type(part) is cst.Call and self.ctx.qname(part.func) in EXPORT_TESTS for part in conjuncts(test))

    def _in_branch(self, node: cst.CSTNode, chosen_by: Callable[[cst.BaseExpression], bool], *,
                   body_only: bool = False, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch of an ``if`` (or ``a if t else b``) of its function whose
        test ``chosen_by`` accepts: either branch, or only the body with ``body_only``?"""
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
                if (not body_only or child is ancestor.body) and chosen_by(ancestor.test):
                    return True
            child = ancestor
        return False

    def setting_off(self, test: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """Is ``test`` a setting that is off unless a caller turns it on: a parameter that
        defaults to False or None (``if ret_usages:``, also negated or in and/or), a flag
        whose default is off (``args.detect_anomaly``, a module constant), or a string
        compared (``if device.type == "xpu":``, a mode one setup picks)?"""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test = test.expression
        if type(test) is cst.BooleanOperation:
            return self.setting_off(test.left, function) or self.setting_off(test.right, function)
        if type(test) is cst.Comparison:
            operands = [test.left, *(c.comparator for c in test.comparisons)]
            return any(type(o) in (cst.SimpleString, cst.ConcatenatedString) for o in operands)
        if type(test) is cst.Name and function is not None:
            param = next((p for p in (*function.params.params, *function.params.kwonly_params) if p.name.value == test.value), None)
            if param is not None:
                default = param.default
                return type(default) is cst.Name and default.value in ("False", "None")
        if type(test) in (cst.Name, cst.Attribute):
            return self.ctx.constants.bool_value(test, test) is False
        return False

    def runs_when_reached(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Does ``node`` run whenever its function (or module, or ``stop``) runs? Under an
        ``if`` or a conditional expression it does not, nor in an ``except`` handler, unless
        the test holds wherever the code is meant to run (``__name__ == "__main__"``, ``if
        torch.cuda.is_available():``, a version test, a setting on by default such as ``if
        args.amp:`` with ``default=True``): a switch behind any other test (``if
        args.debug:``, a parameter) was put there to be chosen."""
        child: cst.CSTNode = node
        for ancestor in self.ctx.tree.ancestors(node):
            kind = type(ancestor)
            if ancestor is stop or kind in FUNCTION_OR_CLASS:
                return True
            if kind in (cst.ExceptHandler, cst.ExceptStarHandler):
                return False
            if kind in (cst.If, cst.IfExp) and child is not ancestor.test:  # type: ignore[attr-defined]
                if child is not ancestor.body or not self._on_by_default(ancestor.test):  # type: ignore[attr-defined]
                    return False
            child = ancestor
        return True

    def _on_by_default(self, test: cst.BaseExpression) -> bool:
        """A test that holds wherever the code is meant to run: the script's entry point, a
        setting known to be on, a check that the GPU or an API is there (``if
        torch.cuda.is_available():``, ``hasattr(torch.backends, "cudnn")``), a version test."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self._on_by_default(test.left), self._on_by_default(test.right)
            return left and right if isinstance(test.operator, cst.And) else left or right
        if is_main_guard(test) or mentions_version(test, self.ctx.tree.descendants):
            return True
        if isinstance(test, cst.Call) and (self.ctx.qname(test.func) in AVAILABILITY or dotted(test.func) == "hasattr"):
            return True
        if isinstance(test, cst.Attribute) and self.ctx.qname(test) in ON_BY_DEFAULT:
            return True  # `if torch.backends.cudnn.enabled:`: torch's own default
        return self.ctx.constants.bool_value(test, test) is True
