"""A tensor built on the host by a factory and then moved to the device."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.cache_hits import NEVER_HIT_WORDS
from torchlint.analysis.context import short_code
from torchlint.analysis.device_names import is_cpu_device, legacy_dtype
from torchlint.analysis.edits import with_keyword
from torchlint.analysis.host_tensors import FACTORIES, FROM_DATA
from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.analysis.output_sizes import vocabulary_sized
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

_FACTORIES = FACTORIES
# Drawn from a random generator: on the device, from the device's generator.
_RANDOM = {"torch.rand", "torch.randn", "torch.randint", "torch.randperm"}
# Legacy typed constructors take no `device=`: reported, never fixed.
_LEGACY = {
    "torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor",
    "torch.BFloat16Tensor", "torch.ByteTensor", "torch.CharTensor", "torch.ShortTensor",
    "torch.IntTensor", "torch.LongTensor", "torch.BoolTensor",
}

# Libraries' functions: no helper of the project, whatever they return (the join would find none).
_LIBRARIES = frozenset({"torch", "numpy", "math", "random", "builtins", "torchvision", "torchaudio", "transformers", "einops", "scipy", "PIL", "cv2"})

# Arguments that fix the result's device or storage: adding `device=` would fight them.
_PLACES_STORAGE = ("out", "pin_memory", "layout")


class CreateThenMove(Check):
    """A tensor factory whose result is moved with `.cuda()`/`.to(device)` right away."""

    code = "TL110"
    name = "create-then-move"
    cost = Cost.UPLOAD
    message = "`{factory}` builds the tensor on the host and then copies it to the device with `{move}`{why}"
    fix_hint = "Create it where it is used: pass `device=` (and `dtype=`) to the factory, e.g. `torch.zeros(n, device=device)`"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qualified = ctx.qname(node.func)
        if self._made_data_moved(node, qualified):
            return
        if qualified in _FACTORIES or qualified in _LEGACY:
            if qualified in _LEGACY and not _given_sizes(ctx, node):
                return  # built from data (or maybe): copied over either way; TL204 names the data's fix
            device = ctx.keyword(node, "device")
            if device is not None and not is_cpu_device(device.value, ctx):
                return  # already built on a device (or one chosen at run time)
            if _no_elements(node, qualified):
                return  # `torch.empty(0)`: nothing to copy, and a copy of nothing never waits
            hint = _legacy_hint(ctx, node, qualified) if qualified in _LEGACY else ""
            self._check_made(node, fixable=qualified in _FACTORIES, hint=hint, random=qualified in _RANDOM)
            return
        distribution = ctx.device_makeable.host_distribution(node)
        if distribution is not None:  # `self.mask_dist.sample(shape).to(device)`: drawn on the host from numbers
            hint = (f"Draw it on the device: build the `{distribution}` from tensors on the device, or use a factory "
                    "with `device=` (`torch.bernoulli(torch.full(shape, p, device=...))`, `torch.rand(shape, device=...) < p`); "
                    "a seeded run draws other values")
            self._check_made(node, fixable=False, hint=hint, random=True)
            return
        # A helper's result moved on: it is read as `helper(...).to(d)`, `helper(...) * k` or assigned.
        parent = ctx.tree.parent(node)
        if type(parent) not in (cst.Attribute, cst.Assign, cst.BinaryOperation, cst.UnaryOperation):
            return
        if qualified is not None:
            if qualified.partition(".")[0] not in _LIBRARIES:  # another file's helper, `subsequent_mask(i).to(device)`: the join knows what it builds
                name = qualified.rpartition(".")[2]
                hint = f"Build it on the device: give `{name}()` the device for its factory (`device=`), no host copy to wait for"
                self._check_made(node, fixable=False, hint=hint, elsewhere=True)
            return
        factory = ctx.uploads.host_helper(node)
        if factory is not None:  # `noise_like(shape).to(device)`: the helper builds on the host
            function = ctx.functions.called(node, None)
            device = ctx.keyword(factory, "device")
            if device is not None:  # its `device` parameter, CPU by default, that this call leaves out
                hint = f"Pass the device to `{function.name.value}()` (`{short_code(ctx.module, device.value)}=`): it builds the tensor there, with no copy"  # type: ignore[union-attr]
            else:
                hint = f"Give `{function.name.value}()` the device and pass it to `{short_code(ctx.module, factory)}` (`device=`)"  # type: ignore[union-attr]
            self._check_made(node, fixable=False, hint=hint)

    def _made_data_moved(self, node: cst.Call, qualified: str | None) -> bool:
        """``torch.tensor([i] * n, device=d)``, ``Tensor(np.random.normal(0, 1, (n, k)))``
        with ``Tensor`` a ``torch.cuda`` class: host data that a factory could make on the
        device itself (a fill, a range, a random draw), copied there. Reported when it is."""
        ctx = self.ctx
        uploads, makeable = ctx.uploads, ctx.device_makeable
        on_device = makeable.typed_device_class(node.func)
        if qualified not in FROM_DATA and on_device is None:
            return False
        if not node.args or node.args[0].keyword is not None or node.args[0].star:
            return False
        data = node.args[0].value
        factory = makeable.factory_for(data, node)
        if factory is None:
            return False  # data of its own (a batch, an observation, a list of values): the copy is needed
        device = ctx.keyword(node, "device")
        if device is not None:
            if is_cpu_device(device.value, ctx):
                return False  # it stays on the host
            move = f"device={short_code(ctx.module, device.value)}"
        elif on_device is not None:
            move = on_device
        else:
            top, _ = uploads.host_chain(node)
            moved = uploads.move_of(top) or uploads.moved_later(top)
            if moved is None:
                return False  # used on the host
            move = _move_text(ctx.module, moved)
        self.report(node, hint=_made_hint(ctx, data, factory), factory=short_code(ctx.module, node, limit=60), move=move,
                    why=self._never_cached(node))
        return True

    def _check_made(self, made: cst.Call, fixable: bool, hint: str, random: bool = False, elsewhere: bool = False) -> None:
        """Report ``made`` when what is computed from it on the host is moved to the device:
        in the same expression (through views, arithmetic and torch functions), or a few
        statements later. ``elsewhere``: a call of another file's function, held where the join
        finds that it builds its result on the host."""
        uploads = self.ctx.uploads
        top, alone = uploads.host_chain(made)
        move = uploads.move_of(top)
        fix = None
        if move is None:
            move = uploads.moved_later(top)
            if move is None:
                return
            if uploads.filled_from_device(top) is not None:
                return  # filled from a device tensor before the move: a round trip, TL112's
        elif fixable and alone:
            fix = self._fix(made, move)
        # A random draw made on the device comes from the device's generator: a seeded run
        # draws other values, so that fix is offered as unsafe only.
        safety = FixSafety.UNSAFE if random else None
        # A few bytes: the copy's wait for the queue is the cost, tiered like a read's; a vocabulary's worth
        # per row: the host's fill and the copy of its bytes are, drained queue or not.
        cost = Cost.SMALL_UPLOAD if _small(self.ctx, made) else Cost.LARGE_UPLOAD if _large(self.ctx, made) else None
        # (the copy runs where the chain's top is moved: once per `torch.cat([torch.arange(b) for _ in range(n)])`, not per part;
        # elsewhere the factory's own place, which orders two factories of one chain, the second right after the first's wait)
        loops = self.ctx.loops
        placed = top if len(loops.enclosing_loops(made)) > len(loops.enclosing_loops(top)) else None
        self.report(
            made, fix=fix, hint=hint, fix_safety=safety, cost=cost, host_helper=made if elsewhere else None, placed_as=placed,
            fix_description="draw it on the device (a seeded run draws other values)" if safety else "",
            factory=short_code(self.ctx.module, made), move=_move_text(self.ctx.module, move), why=self._never_cached(made),
        )

    def _never_cached(self, node: cst.CSTNode) -> str:
        """The words for a copy under a cache's test that never finds the key it stores (hifi-gan's
        ``if fmax not in mel_basis:``): meant once per key, it runs on every call."""
        keys = self.ctx.guards.never_hit(node)
        if keys is None:
            return ""
        tested, stored = (short_code(self.ctx.module, k, limit=40) for k in keys)
        return f", on every call: {NEVER_HIT_WORDS.format(tested=tested, stored=stored)}"

    # --- the fix ---------------------------------------------------------------------------
    def _fix(self, factory: cst.Call, move: cst.Call) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        ctx = self.ctx
        if ctx.keyword(factory, "device") is not None or ctx.has_star_kwargs(factory):
            return None
        if ctx.keyword(factory, "requires_grad") is not None:
            return None  # moving a `requires_grad` leaf makes a non-leaf: the fix would change autograd
        if ctx.keyword(factory, "generator") is not None:
            return None  # a generator draws on its own device: `device="cuda"` with a CPU one raises
        if any(ctx.keyword(factory, name) is not None for name in _PLACES_STORAGE):
            return None  # `out=` (or pinned or sparse storage) already decides where the result lives
        target = _device_argument(move) if ctx.devices.move(move) == "device" else None
        if target is None:  # `.type_as(enc)`: a dtype too, which `device=` alone would not give
            return None
        receiver = move.func.value  # type: ignore[attr-defined]
        new_factory = with_keyword(factory, "device", target)
        new = new_factory if receiver is factory else receiver.deep_replace(factory, new_factory)
        if move.lpar and not new.lpar:  # `(torch.zeros(3)\n .cuda())`: the parentheses stay
            new = new.with_changes(lpar=move.lpar, rpar=move.rpar)
        return move, new


def _device_argument(move: cst.Call) -> cst.BaseExpression | None:
    """The device of ``.to(device)`` / ``.cuda()`` / ``.cuda(n)`` when that is its only argument."""
    args = move.args
    method = move.func.attr.value  # type: ignore[attr-defined]
    if method == "cuda" and not args:
        return cst.SimpleString('"cuda"')
    if len(args) != 1 or args[0].star:
        return None
    arg = args[0]
    if arg.keyword is not None and arg.keyword.value != "device":
        return None
    return arg.value


def _made_hint(ctx, data: cst.BaseExpression, factory: str) -> str:  # type: ignore[no-untyped-def]
    """What makes ``data`` on the device: a fill for ``[v] * n``, else the NumPy call's factory."""
    if factory == "torch.full" and type(data) is cst.BinaryOperation and cst.List in (type(data.left), type(data.right)):
        listed, count = (data.left, data.right) if type(data.left) is cst.List else (data.right, data.left)
        value = short_code(ctx.module, listed.elements[0].value)  # type: ignore[attr-defined]
        return f"Fill it on the device, with no host copy: `torch.full(({short_code(ctx.module, count)},), {value}, device=...)`"
    if factory == "torch.full":  # (`[0] * 4 * 2`: the repetition repeated)
        return "Fill it on the device, with no host copy: `torch.full((size,), value, device=...)`"
    if factory in ("torch.randn", "torch.rand", "torch.randint"):
        return f"Draw it on the device: `{factory}(..., device=...)` makes no host array and no copy (a seeded run draws other values)"
    return f"Make it on the device: `{factory}(..., device=...)` makes no host array and no copy"


def _legacy_hint(ctx, factory: cst.Call, qualified: str | None) -> str:  # type: ignore[no-untyped-def]
    """Legacy constructors take no ``device=``: name the modern factory that does."""
    dtype = legacy_dtype(qualified) or "float32"
    return f"Legacy constructors take no `device=`: create it on the device with `torch.empty(size, dtype=torch.{dtype}, device=device)`"


def _move_text(module: cst.Module, move: cst.Call) -> str:
    method = move.func.attr.value  # type: ignore[attr-defined]
    arguments = ", ".join(plain_code(module, a).strip().rstrip(",").strip() for a in move.args)
    return f".{method}({arguments})" if len(arguments) <= 40 else f".{method}(...)"


def _given_sizes(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """``torch.FloatTensor(n, 3)``, ``torch.LongTensor(x.size(0))``: a legacy constructor
    given sizes (which `torch.empty(..., device=)` replaces), not data. One argument of
    unknown kind is data as often as not: `torch.empty` would be wrong code for data."""
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    return len(args) != 1 or _size_like(ctx, args[0], call)  # data comes alone: several are sizes


def _size_like(ctx, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    if isinstance(expr, cst.Integer) or ctx.constants.int_value(expr, at) is not None:
        return True
    if isinstance(expr, cst.Tuple):
        return all(_size_like(ctx, e.value, at) for e in expr.elements)
    if isinstance(expr, cst.BinaryOperation):
        return _size_like(ctx, expr.left, at) and _size_like(ctx, expr.right, at)
    if isinstance(expr, cst.Call):  # `len(x)`, `x.size(0)`, `x.numel()`, `int(n)`
        name = dotted(expr.func) or ""
        return name in ("len", "int") or name.rsplit(".", 1)[-1] in ("size", "numel", "dim")
    if isinstance(expr, cst.Subscript):  # `x.shape[0]`, `x.size()[1]`
        return (dotted(expr.value) or "").endswith(".shape") or isinstance(expr.value, cst.Call) and _size_like(ctx, expr.value, at)
    if isinstance(expr, cst.Attribute):
        return expr.attr.value == "shape"  # `x.shape`: a torch.Size
    return False


def _no_elements(call: cst.Call, qualified: str) -> bool:
    """Sizes given as literals, one of them 0 (``torch.empty(0)``, ``torch.zeros(0, 3)``)."""
    if qualified not in _SIZED_BY_ARGUMENTS:
        return False  # `torch.arange(0, n)`, `torch.randint(0, 10, ...)`: a 0 is a value there
    sizes = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if qualified == "torch.full":
        sizes = sizes[:1]
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
        sizes = [element.value for element in sizes[0].elements]
    return any(type(size) is cst.Integer and size.evaluated_value == 0 for size in sizes)


# At most this many elements, given as literal sizes, is a small tensor (32 KiB of float64).
_SMALL_ELEMENTS = 4096
# Factories whose result is one-dimensional whatever their arguments: a vector of a size.
_VECTORS = frozenset({"torch.arange", "torch.linspace", "torch.logspace", "torch.randperm"})


def _small(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """Is the factory's tensor small: a vector (one size: `torch.zeros(b.item() + 1)`,
    `torch.randint(0, n, (bs,))`), a few values per row (one size the code does not spell beside
    literal ones, `torch.ones(f0.shape[0], 1)`), or at most 4,096 elements of literal sizes? Two sizes
    or more that the code does not spell (`torch.randn(b, c, h, w)`) may be megabytes."""
    qualified = ctx.qname(call.func) or ""
    if qualified in _VECTORS:
        return True
    sizes = _sizes(ctx, call)
    if sizes is None:
        return False
    if len(sizes) == 1 and type(sizes[0]) not in (cst.Attribute, cst.Subscript) and not _shape_of(sizes[0]):
        return True  # one size, not a shape passed whole (`x.shape`, `size`)
    if len(sizes) == 1 and _shape_less_features(sizes[0]):
        return True  # a mask or label per row or position (`x.size()[:-1]`): a feature vector's worth less than `x`
    values = [ctx.constants.int_value(size, call) for size in sizes]
    if len(sizes) > 1 and values.count(None) == 1 and _one_dimension(sizes[values.index(None)]) \
            and _product([v for v in values if v is not None]) <= _FEW_COLUMNS:
        return True  # `torch.ones(f0.shape[0], 1)`: a value or a few per row, a vector's worth
    if not sizes or None in values:
        return False
    return _product(values) <= _SMALL_ELEMENTS  # type: ignore[arg-type]


def _sizes(ctx, call: cst.Call) -> list[cst.BaseExpression] | None:  # type: ignore[no-untyped-def]
    """The sizes a factory is given, one per dimension where a tuple spells them (None: not a factory sized by its arguments)."""
    qualified = ctx.qname(call.func) or ""
    size = ctx.keyword(call, "size")
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    if qualified == "torch.randint":
        sizes = [size.value] if size is not None else positional[-1:] if len(positional) >= 2 else []
    elif qualified in _SIZED_BY_ARGUMENTS or qualified in _LEGACY:  # (a legacy constructor here was given sizes: `_given_sizes`)
        sizes = ([size.value] if size is not None else positional[:1]) if qualified == "torch.full" else (positional or ([size.value] if size is not None else []))
    else:
        return None
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
        sizes = [element.value for element in sizes[0].elements]  # type: ignore[union-attr]
    return sizes


def _large(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """Is the factory's tensor large whatever the batch: three dimensions or more, one of them a vocabulary's or
    a class count's, the size of the file's output layer (`torch.zeros(b, max_len, vocab_size)`: tens of megabytes;
    not a `(latent_dim, action_dim)` matrix, a layer's worth)?"""
    sizes = _sizes(ctx, call)
    return sizes is not None and vocabulary_sized(ctx, call, sizes)


# A vector with at most this many columns (literal sizes beside one size of a row count) is small: a value or a box per row.
_FEW_COLUMNS = 4


def _product(values: list[int]) -> int:
    total = 1
    for value in values:
        total *= value
    return total


def _one_dimension(expr: cst.BaseExpression) -> bool:
    """One dimension's size, not a whole shape: a name that is no shape (`b`, `n`), `len(x)`,
    `x.size(0)`, `x.shape[0]`."""
    if type(expr) is cst.Name:
        return not _shape_of(expr)
    if type(expr) is cst.Call:
        name = dotted(expr.func) or ""
        return name == "len" or name.rsplit(".", 1)[-1] == "size" and len(expr.args) == 1
    return type(expr) is cst.Subscript and _shape_less_features(expr) and type(expr.slice[0].slice) is cst.Index


def _shape_less_features(expr: cst.BaseExpression) -> bool:
    """A tensor's shape without its last dimension, or one of its dimensions (``x.size()[:-1]``,
    ``x.shape[:-1]``, ``x.shape[0]``): one value per row or position of ``x`` where ``x`` holds a
    feature vector (an attention mask over a ViT's patches, `bs` labels), not a copy of ``x``'s size."""
    if type(expr) is not cst.Subscript or len(expr.slice) != 1:
        return False
    value = expr.value
    shape = type(value) is cst.Attribute and value.attr.value == "shape" \
        or type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "size" and not value.args
    if not shape:
        return False
    index = expr.slice[0].slice
    if type(index) is cst.Index:
        return type(index.value) is cst.Integer  # `x.shape[0]`: one dimension
    # `[:-1]`: all but the last (the feature) dimension
    upper = index.upper if type(index) is cst.Slice else None
    return index.lower is None and index.step is None and type(upper) is cst.UnaryOperation \
        and type(upper.operator) is cst.Minus and type(upper.expression) is cst.Integer and upper.expression.value == "1"


def _shape_of(expr: cst.BaseExpression) -> bool:
    """A name that may hold a whole shape (`shape`, `size`, `dims`), or `x.size()`."""
    if type(expr) is cst.Name:
        return any(word in expr.value.lower() for word in ("shape", "size", "dims"))
    return type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value == "size" and not expr.args


# Factories whose positional arguments are the sizes (`torch.full`'s first one).
_SIZED_BY_ARGUMENTS = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.full"})
