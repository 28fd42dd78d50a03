"""Whether a query or key of an attention is made of a few positions (a class token's, a
learned query's, a pooled one): its score matrix is then a thin slice, not one quadratic in the
sequence length (``few_positions``); whether the attention is a window's (``window_attention``:
Swin's, over a window's few dozen positions); and whether the file runs the module once, a
script's analysis or visualisation (``run_once_here``). TL405 weighs a hand-written attention
no step is seen to run by them. What the attention attends with and over (``attention_kind``):
queries that are a Perceiver's learned latents, keys from another input than the queries
(cross-attention), or a convolutional network's feature map (an attention block between its
blocks): a smaller share of a step than a transformer's self-attention, wherever it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


# Reductions that pool the positions into one (a pooled query: CLIP's `x.mean(dim=0, keepdim=True)`).
_POOLS = frozenset({"mean", "sum", "amax", "max", "logsumexp"})
_FEW = 16  # at most this many positions, written as an index or a slice, are a few


def few_positions(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, one: bool = False) -> bool:
    """Is ``expr`` (a query or key of the scores) made of a few positions: a learned parameter of
    the module (``self.cls_token``, ``self.slots``), one index or a short slice along the
    sequence (``x[:, 0]``, ``x[:, :1]``), or a pooled one (``x.mean(1, keepdim=True)``)?
    Followed through the names bound once, reshapes, methods and a submodule's projection.
    With ``one``: of one position only (``x[:, 0]``, ``x[:, 2:3]``, a pool, a parameter made
    ``torch.zeros(1, 1, dim)``), not a slice bounded by a name (``x[:, :self.num_classes]``)."""
    if depth > 8:
        return False
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return False
        # (`q, k, v = qkv.unbind(0)`: the tensor it is a part of)
        return few_positions(ctx, binding.value, binding.node, depth + 1, one)
    if type(expr) is cst.Subscript:
        # `x[:, 0]`, `x[:, :1]`: positions of a (batch, sequence, ...) tensor; `qkv[0]`, `qkv[:, :, 0]`
        # pick the query out of a stacked projection, all positions kept
        elements = expr.slice
        if len(elements) >= 2 and type(elements[0].slice) is cst.Slice and _full(elements[0].slice) and _few_index(elements[1].slice, one) \
                and not (one and "qkv" in (dotted(expr.value) or "").lower()):  # (`qkv[:, 0]`: the stacked projection's queries, all of them)
            return True
        return few_positions(ctx, expr.value, at, depth + 1, one)
    if type(expr) is cst.Attribute and dotted(expr.value) == "self":
        return _learned(ctx, expr, at, one)
    if type(expr) is cst.Attribute:
        return few_positions(ctx, expr.value, at, depth + 1, one)  # `k.mT`
    if type(expr) is cst.BinaryOperation:  # `q * self.scale`: the tensor, not its scale (a learned one too)
        sides = [side for side in (expr.left, expr.right) if not (type(side) is cst.Attribute and dotted(side.value) == "self")]
        return any(few_positions(ctx, side, at, depth + 1, one) for side in sides)
    if type(expr) is cst.Call:
        func = expr.func
        if type(func) is cst.Attribute and func.attr.value in _POOLS:
            return True
        if type(func) is cst.Attribute and ctx.qname(func) is None:  # `x.reshape(...)`, `self.to_q(x)`: its input
            if (dotted(func) or "").startswith("self."):
                # a submodule's projection of its input (`self.q(x[:, 0])`)
                return bool(expr.args) and expr.args[0].keyword is None and few_positions(ctx, expr.args[0].value, at, depth + 1, one)
            return few_positions(ctx, func.value, at, depth + 1, one)
        if expr.args and expr.args[0].keyword is None:  # `torch.cat([cls, x])` is not few; `rearrange(q, ...)` is q's
            first = expr.args[0].value
            return type(first) is not cst.List and few_positions(ctx, first, at, depth + 1, one)
    return False


def _full(index: cst.Slice) -> bool:
    return index.lower is None and index.upper is None and index.step is None


def _few_index(index: cst.BaseSlice, one: bool = False) -> bool:
    """``0`` or ``:1`` / ``0:4``: one position or a short literal run of them (``one``: one position)."""
    if type(index) is cst.Index:
        return type(index.value) is cst.Integer
    if type(index) is cst.Slice and index.step is None and type(index.upper) is cst.Integer:
        lower = int(index.lower.value) if type(index.lower) is cst.Integer else 0 if index.lower is None else None
        return lower is not None and 0 < int(index.upper.value) - lower <= (1 if one else _FEW)
    if one:
        return False  # (`x[:, :self.num_classes]`: a few by its name, how many the constructor's caller says)
    if type(index) is cst.Slice and index.lower is None and index.step is None and index.upper is not None:
        # `x[:, :self.num_classes]`, `x[:, :num_prefix_tokens]`: the class or prefix tokens, a few
        bound = (dotted(index.upper) or "").lower()
        return any(word in bound.rsplit(".", 1)[-1] for word in _FEW_NAMES)
    return False


_FEW_NAMES = ("cls", "class", "prefix", "slot", "query", "queries")


def _learned(ctx: FileContext, attribute: cst.Attribute, at: cst.CSTNode, one: bool = False) -> bool:
    """``self.query`` bound to an ``nn.Parameter`` in its class: learned positions, a few (``one``:
    made of a factory whose every size but the last is a literal 1, ``torch.zeros(1, 1, dim)``)."""
    cls = ctx.tree.enclosing_class(at)
    if cls is None:
        return False
    bound = ctx.bindings.self_attrs.get(id(cls), {}).get(dotted(attribute) or "", [])
    return any(b.kind == "assign" and type(b.value) is cst.Call and ctx.qname(b.value.func) in _PARAMETERS
               and (not one or _one_row(b.value)) for b in bound)


def _one_row(parameter: cst.Call) -> bool:
    """``nn.Parameter(torch.zeros(1, 1, dim))``: sizes of 1 but the last, one position."""
    made = parameter.args[0].value if parameter.args and parameter.args[0].keyword is None else None
    if type(made) is not cst.Call:
        return False
    sizes = [arg.value for arg in made.args if arg.keyword is None and not arg.star]
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):  # `torch.zeros((1, 1, dim))`
        sizes = [element.value for element in sizes[0].elements]
    return len(sizes) >= 2 and all(type(size) is cst.Integer and size.value == "1" for size in sizes[:-1])


_PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


_WINDOW_WORDS = ("window", "win_size")
_LOOPS = (cst.For, cst.While, cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)


def window_attention(ctx: FileContext, class_name: str) -> bool:
    """Is class ``class_name`` of this file a window's attention (Swin's ``WindowAttention``):
    named for windows, or keeping a window size (``self.window_size``, a ``window_size``
    parameter of its ``__init__``)? Its scores are a window's positions squared (49 for a 7x7
    window), per window, not the sequence length squared."""
    if "window" in class_name.lower():
        return True
    cls = next(iter(ctx.tree.classes_named(class_name)), None)
    if cls is None:
        return False
    return any(any(word in name.lower() for word in _WINDOW_WORDS) for name in ctx.bindings.self_attrs.get(id(cls), {}))


def run_once_here(ctx: FileContext, class_name: str, depth: int = 0) -> bool:
    """Does this file build ``class_name`` (itself, or a module class of the file that builds it
    in ``__init__``) only where it then calls the module a few times outside any loop and hands it
    nowhere (``model = ViT(); model.load_state_dict(...); cam = model(image)`` in a script that
    visualises one image)? What runs it once is in sight, and no step of the project runs it."""
    if depth > 4:
        return False
    tree = ctx.tree
    built = [c for c in tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == class_name]
    if not built:
        return False
    for call in built:
        function = tree.enclosing_function(call)
        cls = tree.enclosing_class(function) if function is not None else None
        if function is not None and function.name.value == "__init__" and cls is not None and ctx.is_module_class(cls.name.value):
            if not run_once_here(ctx, cls.name.value, depth + 1):
                return False
        elif not _called_once(ctx, call):
            return False
    return True


def _called_once(ctx: FileContext, call: cst.Call) -> bool:
    """``m = Cls(...)`` (or ``Cls(...).eval()``, ``.to(device)``) outside any loop, its scope
    calling ``m(...)`` outside loops too, never returning ``m`` nor passing it to a call."""
    tree = ctx.tree
    statement = tree.statement_of(call)
    if type(statement) is not cst.SimpleStatementLine or type(statement.body[0]) is not cst.Assign:
        return False
    targets = statement.body[0].targets
    if len(targets) != 1 or type(targets[0].target) is not cst.Name:
        return False
    name, scope = targets[0].target.value, tree.scope_of(call)
    if _in_a_loop(tree, call):
        return False  # built again and again
    runs = False
    for use in (n for n in tree.nodes(cst.Name) if n.value == name and tree.scope_of(n) is scope and not tree.is_inside(n, statement)):
        parent = tree.parents.get(id(use))
        if type(parent) is cst.Return or type(parent) is cst.Yield:
            return False  # a factory's: whoever gets it may run it on every step
        called = type(parent) is cst.Call and parent.func is use
        handed = type(parent) is cst.Arg  # (`cam = GradCAM(model)`, `show(model, image)`: run where it is handed, once)
        if called or handed:
            if _in_a_loop(tree, parent):
                return False  # run in a loop: a step, or one image after another
            runs = True
    return runs


def _in_a_loop(tree, node: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    return any(type(a) in _LOOPS for a in tree.ancestors(node))


LATENTS = "latents"  # the queries are a Perceiver's learned latents, handed in by the resampler that keeps them
CROSS = "cross"  # the keys come from another input than the queries (a text's, an encoder's, media's)
FEATURE_MAP = "feature map"  # over the pixels of a conv net's feature map, `b, c, h, w = x.shape`
CACHED = "cached keys"  # the keys are read from a cache the module fills call by call (`self.cache_k[:b, pos:pos + n] = xk`)

# Names of a generic attention's inputs: an attention taking `(query, key, value)` is usually
# called with one tensor three times (self-attention), so keys under these names say nothing.
_GENERIC_INPUTS = frozenset({"q", "k", "v", "query", "key", "value", "queries", "keys", "values", "qkv", "kv", "x", "h",
                             "hidden", "hidden_states", "input", "inputs", "tensor"})
# The channels' name second in an unpacked shape: a channels-first feature map (`b, c, h, w`; openai's
# `bs, width, length = qkv.shape`), the layout of a convolutional network, not a transformer's `b, n, d`.
_CHANNELS = frozenset({"c", "ch", "chs", "chans", "channel", "channels", "width", "n_channels", "num_channels"})


def attention_kind(ctx: FileContext, query: cst.BaseExpression, key: cst.BaseExpression, at: cst.CSTNode) -> str | None:
    """What an attention attends with and over, where that makes it a smaller share of a step
    than a transformer's self-attention over its sequence: ``LATENTS`` (the queries made only of
    a parameter named for latents, a Perceiver's: 32-64 learned queries over the tokens),
    ``CROSS`` (queries and keys made of different parameters of the function, the keys' not a
    generic attention input name and not defaulted to the queries' input: `context = default(context,
    x)` is self-attention when no context is passed), ``FEATURE_MAP`` (its function unpacks a
    channels-first shape, `B, C, H, W = x.shape`: an attention block of a conv U-Net, at one
    resolution between convolutions that do most of the work), ``CACHED`` (the keys read from an
    attribute the same function writes through a slice, LLaMA's `self.cache_k[:bsz, start_pos : start_pos
    + seqlen] = xk` then `keys = self.cache_k[:bsz, : start_pos + seqlen]`: a decoder's KV cache, whose
    calls after the prompt's bring one query per decoded token). None: self-attention."""
    queries = _inputs(ctx, query, at)
    if queries and all("latent" in name.lower() for name in queries):
        return LATENTS
    kept: set[str] = set()
    keys = _inputs(ctx, key, at, kept=kept)
    function = ctx.tree.enclosing_function(at)
    if kept and function is not None and kept & _filled_by_slice(ctx, function):
        return CACHED
    if queries and keys and not queries & keys and not keys & _GENERIC_INPUTS:
        return CROSS
    if function is not None and _unpacks_channels_first(ctx, function):
        return FEATURE_MAP
    return None


def _inputs(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, kept: set[str] | None = None) -> frozenset[str]:
    """The parameters of the enclosing function that ``expr`` is made of, through the names bound
    on the way (one element of a tuple target: `q, k, v = (self.to_q(x), *kv)`, `q, k = map(l2norm,
    (q, k))`, `rearrange_many((q, k, v), ...)`), calls' arguments and methods' objects; the
    module's own attributes (`self.null_kv`, a learned tensor) are no input: their names go to ``kept``."""
    if depth > 16:
        return frozenset()
    if type(expr) is cst.Name:
        binding = ctx.bindings.reaching(expr.value, at)
        if binding is None:
            return frozenset()
        if binding.kind == "param":
            return frozenset({expr.value})
        if binding.kind not in ("assign", "augassign") or binding.value is None:
            return frozenset()
        value = _element(binding.value, binding.element)
        return _inputs(ctx, value, binding.node, depth + 1, kept)
    if type(expr) is cst.Attribute:
        if dotted(expr.value) == "self":
            if kept is not None:
                kept.add(expr.attr.value)
            return frozenset()
        return _inputs(ctx, expr.value, at, depth + 1, kept)
    parts: list[cst.BaseExpression] = []
    if type(expr) is cst.Call:
        if type(expr.func) is cst.Attribute and dotted(expr.func.value) != "self":
            parts.append(expr.func.value)  # `x.reshape(...)`: the tensor
        parts.extend(arg.value for arg in expr.args if type(arg.value) is not cst.Lambda)
    elif type(expr) in (cst.Subscript, cst.StarredElement):
        parts.append(expr.value)  # type: ignore[attr-defined]
    elif type(expr) is cst.BinaryOperation:
        parts.extend((expr.left, expr.right))  # type: ignore[attr-defined]
    elif type(expr) in (cst.Tuple, cst.List):
        parts.extend(element.value for element in expr.elements)  # type: ignore[attr-defined]
    elif type(expr) is cst.IfExp:
        parts.extend((expr.body, expr.orelse))  # type: ignore[attr-defined]
    return frozenset().union(*(_inputs(ctx, part, at, depth + 1, kept) for part in parts))


def _filled_by_slice(ctx: FileContext, function: cst.FunctionDef) -> set[str]:
    """The attributes of ``self`` that ``function`` writes through a subscript (`self.cache_k[:bsz, a:b] = xk`)
    in its own body, on every call: a buffer it fills in place, call by call, and reads back whole. (Not under
    a test: llm.c's `if self.use_kv and not self.training:` fills its cache only when sampling, and its
    training steps attend over their own sequence.)"""
    filled = set()
    for assign in ctx.tree.nodes(cst.Assign):
        if ctx.tree.enclosing_function(assign) is not function or ctx.tree.parent(ctx.tree.parent(assign)) is not function.body:
            continue
        for target in assign.targets:
            written = target.target
            if type(written) is cst.Subscript and type(written.value) is cst.Attribute and dotted(written.value.value) == "self":
                filled.add(written.value.attr.value)
    return filled


def _element(value: cst.BaseExpression, element: int | None) -> cst.BaseExpression:
    """The part of ``value`` a tuple target's ``element`` takes, where the code shows it: the
    element of a tuple written out (before any starred one), or of the first tuple handed to a call
    (`map(f, (q, k))`, `rearrange_many((q, k, v), pattern)`); else the whole value."""
    if element is None:
        return value
    written = value if type(value) in (cst.Tuple, cst.List) else next(
        (arg.value for arg in value.args if type(arg.value) in (cst.Tuple, cst.List)), None) if type(value) is cst.Call else None
    if written is None:
        return value
    elements = written.elements  # type: ignore[attr-defined]
    starred = [index for index, each in enumerate(elements) if type(each) is cst.StarredElement]
    if element < len(elements) and not any(index <= element for index in starred):
        return elements[element].value
    if starred == [len(elements) - 1] and element >= starred[0]:
        return elements[-1].value  # `q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2))`: k and v are the starred one's
    return value


def _unpacks_channels_first(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Does ``function`` unpack a shape of three or four dimensions with the channels' name second
    (`B, C, H, W = x.shape`, `b, c, h, w = q.size()`)?"""
    for assign in ctx.tree.nodes(cst.Assign):
        if ctx.tree.enclosing_function(assign) is not function or len(assign.targets) != 1:
            continue
        target, value = assign.targets[0].target, assign.value
        if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "size" and not value.args:
            value = value.func
        if type(value) is not cst.Attribute or value.attr.value != "shape" or type(target) is not cst.Tuple:
            continue
        names = [element.value.value if type(element.value) is cst.Name else "" for element in target.elements]
        if len(names) in (3, 4) and names[1].lower() in _CHANNELS:
            return True
    return False


__all__ = ["CACHED", "CROSS", "FEATURE_MAP", "LATENTS", "attention_kind", "few_positions", "run_once_here", "window_attention"]
