"""What a branch's test says by its shape alone: a step counter's modulo or first steps
(``if step % 100 == 0:``, ``if i == 0:``), a flag, a device or version test, ``__main__``.
The :class:`~torchlint.analysis.guards.Guards` of a file put them to use."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.cache_hits import returns_on_a_cache_hit
from torchlint.analysis.constants import is_setting
from torchlint.analysis.guard_ranks import main_process_test
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.tree import Tree

# `== 0`, `== 3`: one particular step. `== "train"` and `== 1.0` pick a mode or a setting
# that holds on every step, so they are not rare.
_STEP_NUMBERS = (cst.Integer,)
# Names of step and batch counters: `if step < warmup:` and `if i == len(loader) - 1:` hold
# on a few steps only.
_COUNTER = re.compile(r"(?:i|j|it|itr|iters?|iteration|steps?|idx|index|count|counter|n_iter|n_steps|i_batch|ibatch|batch_i|batch_id|batch_idx|batch_index|batch_num|batch_nb)$|.*_(?:step|steps|idx|iter|iteration|count|done)$")


def is_rare_test(test: cst.BaseExpression, tree_nodes, is_host=None, period=None) -> bool:  # type: ignore[no-untyped-def]
    """A test with a modulo (``step % N == 0``, also inside and/or; not when N is known to
    be small: ``period`` gives N's value where known, else only a literal counts),
    ``== integer``, a step counter matched (``step == len(loader) - 1``) or bounded by a
    fixed number (``i < 3``, ``step < warmup_steps``, ``len(buffer) < MAX``). ``is_host``
    tells a Python number (``ni = i + nb * epoch``) from a tensor for derived counters."""
    for node in (test, *tree_nodes(test)):
        node_type = type(node)  # exact types: libcst's ABCs make a failing isinstance slow
        if node_type is cst.BinaryOperation and type(node.operator) is cst.Modulo:
            if not isinstance(node.left, cst.BaseString) and not _frequent(node.right, period):  # "%s" % x is formatting
                return True
        if (node_type is cst.Name or node_type is cst.Attribute) and _PERIODIC_FLAG.match(dotted(node) or ""):
            return True  # `if self.control.should_save:`: a flag the trainer raises every N steps
        if node_type is cst.Comparison:
            if type(node.left) is cst.BinaryOperation and type(node.left.operator) is cst.Modulo and _frequent(node.left.right, period):
                continue  # `step % 2 == 0`: every other step
            if main_process_test(node):
                continue  # `rank == 0`: every step, on the main process
            for target in node.comparisons:
                operator, bound = target.operator, target.comparator
                if type(operator) is cst.In and is_counter(node.left):
                    return True  # `if step in save_steps:` a few chosen steps
                if isinstance(operator, cst.Equal) and (isinstance(bound, _STEP_NUMBERS) or isinstance(node.left, _STEP_NUMBERS)) \
                        and not (is_setting(node.left) or is_setting(bound) or shape_read(node.left) or shape_read(bound)):
                    # (`args.augment_p == 0` is a setting, `len(labels.shape) == 1` a shape: each holds on every step or on none)
                    return True
                if isinstance(operator, cst.Equal) and is_counter(node.left):
                    return True
                if isinstance(operator, (cst.LessThan, cst.LessThanEqual)):
                    if _is_len(node.left):
                        return True  # `len(buffer) < size`: filling up, then never again
                    # A counter under a fixed bound is a warm-up; `j < x.shape[0]` or `i < n`
                    # is a bounds check, true on every step.
                    if _fixed_bound(bound) and (is_counter(node.left) or (is_host is not None and isinstance(bound, cst.Integer) and isinstance(node.left, cst.Name) and is_host(node.left))):
                        return True
    return False


# What reads a tensor's shape or rank, a Python int that is the same on every step of a run:
# `x.dim()`, `x.size(0)`, `x.ndimension()`; `x.ndim`; `x.shape[1]`; `len(x.shape)`, `len(x.size())`.
_SHAPE_METHODS = frozenset({"dim", "ndimension", "size"})
_SHAPE_ATTRIBUTES = frozenset({"ndim", "shape"})


def shape_read(expr: cst.BaseExpression) -> bool:
    """Does ``expr`` read a tensor's shape or rank (``len(labels.shape)``, ``x.dim()``,
    ``x.shape[0]``)? A test of it against a number picks a kind of input, not a step."""
    if type(expr) is cst.Subscript:
        expr = expr.value  # `x.shape[0]`
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "len" and len(expr.args) == 1:
        expr = expr.args[0].value  # `len(x.shape)`, `len(x.size())`
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        return expr.func.attr.value in _SHAPE_METHODS
    return type(expr) is cst.Attribute and expr.attr.value in _SHAPE_ATTRIBUTES


# An every-N guard with N this small runs on a half or a third of the steps: as good as every step.
_FREQUENT_PERIOD = 3


def _frequent(divisor: cst.BaseExpression, period) -> bool:  # type: ignore[no-untyped-def]
    """Is ``step % divisor`` known to cycle within a few steps (``% 2``, or
    ``% self.policy_freq`` with ``policy_freq=2`` its default)?"""
    if type(divisor) is cst.Integer:
        value: int | None = int(divisor.evaluated_value) if divisor.value.isdigit() else None
    else:
        value = period(divisor) if period is not None else None
    return value is not None and 0 < value <= _FREQUENT_PERIOD


def frequent_modulo(test: cst.BaseExpression, tree_nodes, period) -> tuple[cst.BinaryOperation, int] | None:  # type: ignore[no-untyped-def]
    """The modulo of ``test`` that is no rare guard because its N is known to be small, 2 or
    3 (``timer % policy_delay == 0`` with ``policy_delay=2``), and that N; None where there is none."""
    for node in (test, *tree_nodes(test)):
        if type(node) is cst.Comparison and type(node.left) is cst.BinaryOperation and type(node.left.operator) is cst.Modulo \
                and _frequent(node.left.right, period):
            divisor = node.left.right
            value = int(divisor.evaluated_value) if type(divisor) is cst.Integer else period(divisor)
            if value > 1:  # (`% 1` holds on every step)
                return node.left, value
    return None


#: How often a wall-clock timer's branch runs (impact reasons).
TIMER_WORDS = "at most once every few seconds (a branch a wall-clock timer opens, not every step)"
# Wall-clock readings: a guard comparing one with a bound runs at most once per interval.
CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns",
                     "time.monotonic_ns", "time.process_time", "timeit.default_timer", "datetime.datetime.now"})
# A timer object's reading (`timer.elapsed()`) and what starts it again (`timer.reset()`).
TIMER_READS = frozenset({"elapsed", "elapsed_time", "elapsed_seconds", "seconds_elapsed"})
TIMER_RESTARTS = frozenset({"reset", "restart", "start", "tic"})
# Helpers handed the optimizer to store or report it, not to step it.
KEEPS_OPTIMIZER = ("save", "checkpoint", "ckpt", "log", "eval", "state", "load", "print", "report")
# Flags a trainer sets on the steps that log, save or evaluate (`control.should_save`).
_PERIODIC_FLAG = re.compile(r"(?:.*\.)?_?(?:should|time_to)_\w+$")  # (`self._should_log(step)`: dreamerv3's `tools.Every`)


def _fixed_bound(bound: cst.BaseExpression) -> bool:
    """A number fixed for the run: a literal, a warm-up setting, an UPPER_CASE constant."""
    if isinstance(bound, cst.Integer):
        return True
    name = dotted(bound)
    last = name.rsplit(".", 1)[-1] if name else ""
    return "warm" in last.lower() or (last.isupper() and len(last) > 1)


# What a loop goes over (analysis/places.py) when it surely repeats inside one step.
WITHIN_A_STEP = frozenset({"batch row", "beam", "candidate", "parameter", "block", "layer", "head", "member", "element"})


_STEP_COUNTER = re.compile(r"(?:.*_)?(?:epochs?|steps?|it|itr|iters?|iterations?|updates?)(?:_.*)?$", re.IGNORECASE)


def counts_steps(loop: cst.For) -> bool:
    """``for epoch in ...``, ``for step in range(init_step, max_steps)``, ``for it, x in ...``:
    a loop whose counter is named for epochs, steps or iterations."""
    target = loop.target
    names = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
    return any(isinstance(n, cst.Name) and _STEP_COUNTER.match(n.value) is not None for n in names)


def _is_len(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len"


def is_counter(expr: cst.BaseExpression) -> bool:
    """A step counter (``step``, ``batch_idx``, ``self.global_step``) or a fill level
    (``len(buffer)``)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len":
        return not shape_read(expr)  # (`len(x.shape)`: a rank, the same on every step, no fill level)
    name = dotted(expr)
    return name is not None and _COUNTER.match(name.rsplit(".", 1)[-1]) is not None


def _exits_unless_rare(statement: cst.CSTNode) -> bool:
    """``if step % N != 0: return`` (or ``continue``, also ``if not on or step % N:``):
    what follows runs every N steps. ``with ignore_oom(): return f(x)``: what follows runs
    only when the context manager swallowed an error (detectron2's retry after an OOM)."""
    if type(statement) is cst.With:
        return _ends_in_return(statement.body)  # type: ignore[attr-defined]
    if type(statement) is not cst.If or statement.orelse is not None:  # type: ignore[attr-defined]
        return False  # (an exact type, asked of every statement before a placed call)
    body = statement.body.body if isinstance(statement.body, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    if not isinstance(last, cst.SimpleStatementLine) or not any(isinstance(s, (cst.Return, cst.Continue)) for s in last.body):
        return False
    return _true_unless_rare(statement.test)


def _ends_in_return(block: cst.BaseSuite) -> bool:
    """Does the block's last statement return (or ``continue`` the loop)?"""
    body = block.body if isinstance(block, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, (cst.Return, cst.Continue)) for s in last.body)


def _true_unless_rare(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _true_unless_rare(test.left) or _true_unless_rare(test.right)
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        return True  # `if step % N:` exits unless step is a multiple of N
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator = test.comparisons[0].operator
        modulo = isinstance(test.left, cst.BinaryOperation) and isinstance(test.left.operator, cst.Modulo)
        return modulo and isinstance(operator, (cst.NotEqual, cst.GreaterThan))
    return False


def raises(block: cst.BaseSuite) -> bool:
    """Does the block end by raising or ending the process (``sys.exit(1)``, ``exit()``,
    ``os._exit(1)``): an error path that runs at most once, not a step?"""
    body = block.body if isinstance(block, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    if not isinstance(last, cst.SimpleStatementLine):
        return False
    return any(isinstance(s, cst.Raise) or isinstance(s, cst.Expr) and _ends_process(s.value) for s in last.body)


_PROCESS_ENDS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
def _ends_process(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and dotted(expr.func) in _PROCESS_ENDS


def first_rare_exit(tree: Tree, block: cst.IndentedBlock) -> cst.CSTNode | None:
    """The first statement of ``block`` that exits early unless the step is rare: also a cache's
    early return, before the code that fills the cache (``if key in self._cache: return ...``)."""
    statements = block.body
    return next((statement for index, statement in enumerate(statements)
                 if _exits_unless_rare(statement) or returns_on_a_cache_hit(tree, statement, statements[index + 1:])), None)


def enclosing_tests(tree: Tree, node: cst.CSTNode, stop: cst.CSTNode | None) -> Iterator[tuple[cst.CSTNode, cst.CSTNode, cst.BaseExpression | None, bool]]:
    """``(ancestor, child, test, holds)`` for each ancestor of ``node`` below ``stop``, innermost
    first: ``test`` is what must be true (``holds``) or false for ``child`` to run there: the test
    of an ``if`` or conditional expression whose body (or ``else``) holds it, the left side of an
    ``and`` (an ``or``: false) whose right side it is; None where the ancestor tests nothing for it (a block)."""
    child = node
    for ancestor in tree.ancestors(node):
        if ancestor is stop:
            return
        kind = type(ancestor)
        if kind in (cst.If, cst.IfExp) and child is ancestor.body:  # type: ignore[attr-defined]
            yield ancestor, child, ancestor.test, True  # type: ignore[attr-defined]
        elif (kind is cst.IfExp or kind is cst.If and type(child) is cst.Else) and child is ancestor.orelse:  # type: ignore[attr-defined]
            yield ancestor, child, ancestor.test, False  # type: ignore[attr-defined]
        elif kind is cst.BooleanOperation and child is ancestor.right:  # type: ignore[attr-defined]
            yield ancestor, child, ancestor.left, type(ancestor.operator) is cst.And  # type: ignore[attr-defined]
        else:
            yield ancestor, child, None, True
        child = ancestor


def conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``a and b < 3`` -> ``[a, b < 3]``: each must hold for the branch to run."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return conjuncts(test.left) + conjuncts(test.right)
    return [test]


def counted_or_flagged(test: cst.BaseExpression) -> tuple[str, Callable[[cst.CSTNode], bool]] | None:
    """``shown < 3`` (a counter under a literal bound: the body must add to it), ``not
    printed`` (a flag: the body must set it to ``True``) or ``first`` (the body must set it
    to ``False``); the name, and what moves it."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) in (cst.LessThan, cst.LessThanEqual) \
            and type(test.comparisons[0].comparator) is cst.Integer and dotted(test.left) is not None:
        return dotted(test.left), lambda n: type(n) is cst.AugAssign and type(n.operator) is cst.AddAssign  # type: ignore[return-value]
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and dotted(test.expression) is not None:
        return dotted(test.expression), lambda n: type(n) is cst.Assign and type(n.value) is cst.Name and n.value.value == "True"  # type: ignore[return-value]
    if type(test) in (cst.Name, cst.Attribute) and dotted(test) is not None:  # `if prefill: ...; prefill = False` (litgpt's first token)
        return dotted(test), lambda n: type(n) is cst.Assign and type(n.value) is cst.Name and n.value.value == "False"  # type: ignore[return-value]
    return None


def falsy(value: cst.BaseExpression) -> bool:
    """``False``, ``None``, ``0``, ``0.0``, ``""``: a default that leaves a branch off."""
    if type(value) is cst.Name:
        return value.value in ("False", "None")
    if type(value) in (cst.Integer, cst.Float):
        return value.evaluated_value == 0  # type: ignore[attr-defined]
    return type(value) is cst.SimpleString and value.evaluated_value == ""  # type: ignore[attr-defined]


def constant(value: cst.BaseExpression) -> bool:
    return type(value) is cst.Integer or type(value) is cst.Name and value.value in ("True", "False", "None")


def target_of(node: cst.CSTNode) -> cst.BaseExpression | None:
    if type(node) is cst.AugAssign:
        return node.target
    return node.targets[0].target if type(node) is cst.Assign and len(node.targets) == 1 else None


def assigned_targets(node: cst.CSTNode) -> list[cst.BaseExpression]:
    return [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]


def is_none(expr: cst.CSTNode | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def mentions(expr: cst.CSTNode | None, name: str, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    return expr is not None and any(
        isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == name for n in (expr, *tree_nodes(expr))
    )


def none_tested(test: cst.BaseExpression, negated: bool = False) -> str | None:
    """``preds`` for ``preds is None`` (also ``self.preds is None``; with ``negated``,
    ``preds is not None``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.IsNot if negated else cst.Is) or not is_none(target.comparator):
        return None
    return dotted(test.left)


def mentions_device(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.Name) and any(word in node.value.lower() for word in ("cuda", "gpu", "device")):
            return True
    return False


def only_return(function: cst.FunctionDef) -> cst.BaseExpression | None:
    """The expression of a function whose whole body is ``return expr`` (a docstring aside)."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else (function.body,)
    statements = [s for s in body if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                          and isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value, cst.SimpleString))]
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        return None
    line = statements[0]
    if len(line.body) != 1 or not isinstance(line.body[0], cst.Return):
        return None
    return line.body[0].value


EXPORT_TESTS = frozenset({
    "torch.onnx.is_in_onnx_export", "torch.jit.is_tracing", "torch.jit.is_scripting",
    "torch._C._get_tracing_state",
})


# Tests that hold on the machine the code is written for: the device is there.
AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.backends.cudnn.is_available", "torch.accelerator.is_available",
                           "torch.backends.mps.is_available"})
ON_BY_DEFAULT = frozenset({"torch.backends.cudnn.enabled"})
# A flag that says the run uses the GPU: `use_gpu`, `args.cuda`, `x.is_cuda`, `train_on_gpu`.
DEVICE_FLAG = re.compile(r"(use_|is_|on_|train_on_|with_|has_|using_)?(cuda|gpu|gpus)")
PLATFORM_TESTS = frozenset({"sys.platform", "os.name", "platform.system"})
# The devices a branch may be written for that are not the CUDA GPU the rules price: Apple's
# MPS (demucs moves its complex STFT to the CPU there), the CPU, TPUs, Intel, Habana, Ascend.
OTHER_DEVICES = frozenset({"cpu", "mps", "xla", "xpu", "hpu", "npu", "mlu", "meta", "ipu", "privateuseone"})


# Exceptions an API missing from an older torch raises: their handlers are its fallback.
COMPAT_ERRORS = frozenset({"AttributeError", "TypeError", "ImportError", "ModuleNotFoundError", "NameError"})


def mentions_version(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.Name) and "version" in node.value.lower():
            return True
        if isinstance(node, cst.Name) and node.value.upper().startswith(("TORCH_GREATER", "TORCH_LESS", "_TORCH_GREATER")):
            return True
    return False


def is_main_guard(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"`` (either way round): the script's own entry point."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = {dotted(test.left), dotted(test.comparisons[0].comparator)}
    strings = {getattr(test.left, "value", None), getattr(test.comparisons[0].comparator, "value", None)}
    return "__name__" in sides and bool(strings & {'"__main__"', "'__main__'"})


def off_at_default(test: cst.BaseExpression, body: bool, defaults: dict[str, object]) -> str | None:
    """The parameter whose default leaves this branch off: ``test`` compares a parameter of
    ``defaults`` (name -> its literal default) with ``==``/``!=`` to a literal, and the branch
    (the body, else the ``else``) is the one that default does not take."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    operator, other = type(test.comparisons[0].operator), test.comparisons[0].comparator
    if operator not in (cst.Equal, cst.NotEqual):
        return None
    name, literal = (test.left, other) if type(test.left) is cst.Name else (other, test.left)
    if type(name) is not cst.Name or name.value not in defaults or type(literal) not in (cst.SimpleString, cst.Integer):
        return None
    holds = (defaults[name.value] == literal.evaluated_value) is (operator is cst.Equal)  # type: ignore[attr-defined]
    return name.value if holds is not body else None
