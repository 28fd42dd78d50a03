"""Which modules a file trains, and which it freezes (TL308): the modules its optimizers
are given, what switches a module's weight gradients off, and whether a class keeps
trainable weights of its own."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.grad import is_backward_call
from torchlint.analysis.weight_kinds import BACKBONE, FROZEN, TRAINABLE
from torchlint.analysis.kind_names import MODULE_CHAIN, looks_like_optimizer
from torchlint.analysis.members import method_named
from torchlint.analysis.names import canonical, dotted, last_segment

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# torch.nn layers (and losses) without parameters: nothing to train or to freeze.
PARAMETER_FREE = frozenset({
    "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SELU", "CELU", "Hardswish",
    "Hardsigmoid", "Hardtanh", "Softplus", "Softmax", "LogSoftmax", "Softmin", "Identity", "Flatten", "Unflatten",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "MaxPool1d", "MaxPool2d", "MaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "PixelUnshuffle",
    "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad2d", "ReplicationPad2d", "CrossEntropyLoss",
    "MSELoss", "L1Loss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "KLDivLoss",
})
# Optimizer classes by their last name, whatever package they come from (torch.optim,
# apex, bitsandbytes, transformers, timm, torch_optimizer).
OPTIMIZER_CLASSES = frozenset({
    "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "LBFGS", "NAdam", "RAdam", "ASGD",
    "SparseAdam", "Adafactor", "Lamb", "LAMB", "Lion", "FusedAdam", "FusedLAMB", "FusedSGD", "Adam8bit", "AdamW8bit",
    "PagedAdamW", "PagedAdamW8bit", "AdaBelief", "Ranger", "Novograd", "Muon", "Shampoo", "ZeroRedundancyOptimizer",
})
# Wrappers that run the module they are given (its weights stay what they were).
_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.DataParallel", "torch.compile",
})
# Calls that may be handed a module without changing whether its weights train.
_HARMLESS = _WRAPPERS | {"print", "len", "str", "repr", "type", "isinstance", "id", "hasattr", "getattr"}
# Methods that hand out a module's parameters or submodules: what is done with them here is
# not followed, so a module they are called on is left alone (unless only counted).
_PARAMETER_METHODS = frozenset({
    "requires_grad_", "parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "apply",
})
# Grad-disabling names a class may use on its own weights (`@torch.no_grad()` on forward).
_GRAD_OFF = frozenset({"no_grad", "inference_mode", "set_grad_enabled"})
_DEPTH = 3
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})



def related(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same module or one holds the other (``model``, ``model.vgg``)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def chain_root(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
    """What ``expr`` is made from past the calls that return their module (``.to(d)``,
    ``.eval()``), attributes and slices (``vgg19().features[:35]``), and whether one of
    those calls was ``requires_grad_``."""
    frozen = False
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in MODULE_CHAIN:
            frozen = frozen or expr.func.attr.value == "requires_grad_"
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Attribute) and isinstance(expr.value, (cst.Call, cst.Subscript)):
            expr = expr.value
        else:
            return expr, frozen


def _freezes_in_body(ctx: FileContext, root: cst.CSTNode) -> bool:
    """Does code under ``root`` switch weight gradients off: ``requires_grad_(...)``,
    ``p.requires_grad = False``, ``requires_grad=False``, or a grad-disabling context?"""
    # From the file's indexes of calls, attributes and names, each candidate tested for lying
    # under ``root``: not a walk of the whole class per question (asked for every module class).
    tree = ctx.tree
    if any(tree.is_inside(call, root) for call in ctx.method_calls("requires_grad_")):
        return True
    if any(type(tree.parent(node)) is cst.AssignTarget and tree.is_inside(node, root) for node in tree.attributes_named("requires_grad")):
        return True
    for name in tree.names_valued("requires_grad"):  # `requires_grad=False`: the keyword of an argument
        parent = tree.parent(name)
        if type(parent) is cst.Arg and parent.keyword is name and tree.is_inside(name, root):
            return True
    for word in _GRAD_OFF:  # `no_grad`, `torch.no_grad` (a dotted chain ending so)
        if any(tree.is_inside(name, root) for name in tree.names_valued(word)):
            return True
        if any(dotted(node) is not None and tree.is_inside(node, root) for node in tree.attributes_named(word)):
            return True
    return False


def class_weights(ctx: FileContext, cls: cst.ClassDef, depth: int = 0) -> str:
    """``FROZEN`` when the class switches its weights' gradients off, ``TRAINABLE`` when its
    ``__init__`` registers a layer with weights (a class of this file that does) and nothing in
    it freezes them, ``BACKBONE`` when one of them is a torchvision model's
    (``self.vgg = vgg19().features``, also through a local name: ``vgg = vgg19(...)`` first);
    "" when neither is known."""
    if _freezes_in_body(ctx, cls):
        return FROZEN
    for base in cls.bases:
        named = ctx.tree.classes_named(dotted(base.value) or "")
        parent = named[-1] if named else None  # (the last of a name defined twice, as a dict of them kept)
        if parent is not None and parent is not cls and depth < _DEPTH and class_weights(ctx, parent, depth + 1) == FROZEN:
            return FROZEN
    init = method_named(cls, "__init__")
    if init is None:
        return ""
    found = ""
    for node in ctx.tree.descendants(init):
        if isinstance(node, cst.Assign) and any((dotted(t.target) or "").startswith("self.") for t in node.targets):
            kind = built_weights(ctx, node.value, node, depth + 1) if depth < _DEPTH else None
            if kind == BACKBONE:
                return BACKBONE  # (whatever else it registers: the backbone's layers are the bulk)
            if kind == TRAINABLE:
                found = TRAINABLE
    return found


def built_weights(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str | cst.Call | None:
    """What the module ``expr`` is built as: ``TRAINABLE``/``BACKBONE``/``FROZEN``/"" as ``class_weights``
    says, for a torch.nn layer, a torchvision model or a class of this file; the constructor
    call itself for a class of another module (the project-wide join looks it up); None when
    it is not known (a parameter, a factory, a library's class)."""
    root, frozen = chain_root(expr)
    if frozen:
        return FROZEN
    if isinstance(root, (cst.Name, cst.Attribute)):
        name = dotted(root)
        bound = ctx.bindings.reaching_each(name, at) if name is not None and depth < _DEPTH and ctx.qname(root) is None else []
        if not bound or any(b.kind != "assign" or b.element is not None or b.value is None for b in bound):
            return None  # a parameter, an unpacked tuple, a loop variable: built beyond sight
        kinds = [built_weights(ctx, b.value, b.value, depth + 1) for b in bound]  # type: ignore[arg-type]
        return kinds[0] if all(k is kinds[0] or (isinstance(k, str) and k == kinds[0]) for k in kinds) else None
    if not isinstance(root, cst.Call):
        return None
    func = root.func
    qualified = canonical(ctx.qname(func)) or ""
    if qualified in _WRAPPERS:  # `DDP(model)`, `torch.compile(model)`: the model it wraps
        wrapped = ctx.argument(root, 0, "module") or ctx.argument(root, 0, "model")
        return built_weights(ctx, wrapped.value, at, depth + 1) if wrapped is not None and depth < _DEPTH else None
    if qualified.startswith("torch.nn."):
        last = last_segment(qualified)
        if last in _CONTAINERS and depth < _DEPTH and _holds_backbone(ctx, root, at, depth):
            return BACKBONE  # `nn.Sequential(*list(vgg.features.children())[:18])`: the backbone's layers
        return "" if last in PARAMETER_FREE or last.endswith("Loss") else TRAINABLE
    if qualified.startswith("torchvision.models.") and not qualified.startswith("torchvision.models.feature_extraction."):
        return BACKBONE  # (a feature extractor shares the weights of the model it is given)
    if isinstance(func, cst.Name) and ctx.is_module_class(func.value):
        cls = ctx.tree.classes_named(func.value)[0]
        return class_weights(ctx, cls, depth)
    named = qualified or dotted(func) or ""
    if last_segment(named)[:1].isupper() and not named.startswith(("torch.", "torchvision.")):
        return root  # a class of another module (imported, or by a star import): the join finds it in the project, or drops it
    return None


def _holds_backbone(ctx: FileContext, container: cst.Call, at: cst.CSTNode, depth: int) -> bool:
    """Is a container given a torchvision model's layers (a name bound to one, or the call itself)?"""
    for arg in container.args:
        for node in (arg.value, *ctx.tree.descendants(arg.value)):
            if isinstance(node, cst.Name) and ctx.qname(node) is None and built_weights(ctx, node, at, depth) == BACKBONE:
                return True
            if isinstance(node, cst.Call) and (canonical(ctx.qname(node.func)) or "").startswith("torchvision.models."):
                return True
    return False


class TrainedModules:
    """The modules this file's optimizers are given, and the modules it freezes or hands out."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    @cached_property
    def optimizers(self) -> list[cst.Call]:
        """Optimizer constructions (``Adam(G.parameters())``) and ``add_param_group`` calls."""
        found = []
        for call in self.ctx.tree.nodes(cst.Call):
            name = canonical(self.ctx.qname(call.func)) or dotted(call.func) or ""
            if last_segment(name) in OPTIMIZER_CLASSES or self.ctx.method_name(call) == "add_param_group":
                found.append(call)
        return found

    @cached_property
    def _given(self) -> tuple[frozenset[tuple[int, str]], bool]:
        """(the class whose ``self`` a name reads, 0 for none; the name) of what the optimizers
        are given, and whether all of it is in sight."""
        given = frozenset().union(*(names for names, _ in self._given_by.values()))
        return given, len(self._given_by) == len(self.optimizers) and all(whole for _, whole in self._given_by.values())

    @cached_property
    def _given_by(self) -> dict[int, tuple[frozenset[tuple[int, str]], bool]]:
        """Per optimizer construction given parameters (by ``id``): what it is given, as
        ``_given`` spells it, and whether all of it is in sight."""
        by_call: dict[int, tuple[frozenset[tuple[int, str]], bool]] = {}
        for call in self.optimizers:
            params = self.ctx.keyword(call, "params") or self.ctx.argument(call, 0)
            if params is None:
                continue
            names: set[str] = set()
            whole = self._collect(params.value, names, 0)
            owner = self.ctx.tree.enclosing_class(call)
            by_call[id(call)] = (frozenset(
                (id(owner) if owner is not None and (n == "self" or n.startswith("self.")) else 0, n) for n in names), whole)
        return by_call

    def owners(self, module: str, at: cst.CSTNode) -> list[cst.Call]:
        """The optimizer constructions given (part of) ``module``, read at ``at``."""
        owner = self.ctx.tree.enclosing_class(at)
        where = id(owner) if owner is not None and (module == "self" or module.startswith("self.")) else 0
        return [call for call in self.optimizers
                if any(related(module, name) and cls == where for cls, name in self._given_by.get(id(call), ((), False))[0])]

    def _collect(self, expr: cst.BaseExpression, names: set[str], depth: int) -> bool:
        """Add the dotted names ``expr`` reads to ``names``, following local names to what they
        are bound to (``params = list(G.parameters()) + list(D.parameters())``, ``params.append``);
        False when one of them is a parameter or bound beyond sight."""
        resolved = True
        tree = self.ctx.tree
        for node in (expr, *tree.descendants(expr)):
            name = dotted(node) if type(node) in (cst.Name, cst.Attribute) else None  # type: ignore[arg-type]
            parent = tree.parent(node)
            if name is None or type(parent) is cst.Attribute:
                continue  # only whole chains: `self.g.parameters` names `self.g`, not `self` nor `g`
            head, _, method = name.rpartition(".")
            name = head if method in _PARAMETER_METHODS and head else name
            if name in names:
                continue
            names.add(name)
            if type(node) is not cst.Name or name == "self" or self.ctx.qname(node) is not None:  # type: ignore[arg-type]
                continue  # (`self.g.parameters()`: the attribute names which module)
            for binding in self.ctx.bindings.lookup(name, node):
                if binding.kind == "param" and _parameters_of(self.ctx, node):
                    continue  # `def train(model): Adam(model.parameters())`: a module a caller built (one passed here is handed out)
                if binding.kind == "param" or depth >= _DEPTH:
                    resolved = False
                elif binding.value is not None and binding.kind in ("assign", "augassign", "for", "comp"):
                    resolved = self._collect(binding.value, names, depth + 1) and resolved
            for call in self.ctx.method_calls({"append", "extend", "insert"}):
                if dotted(call.func.value) == name:  # type: ignore[attr-defined]
                    resolved = self._collect(call, names, depth + 1) and resolved
        return resolved

    def given_name(self, module: str, owners: list[cst.Call]) -> str:
        """The name ``owners`` were given that ``module`` is read through (``D_VAE`` for
        ``D_VAE.compute_loss``), ``module`` itself when none is a prefix of it."""
        given = {name for call in owners for _, name in self._given_by.get(id(call), ((), False))[0]}
        prefixes = [name for name in given if module == name or module.startswith(name + ".")]
        return max(prefixes, key=len) if prefixes else module

    def known(self, at: cst.CSTNode) -> bool:
        """This file builds its optimizers, every one's parameters are in sight, and each
        optimizer the code around ``at`` steps (its function's, else the file's) is one of
        them, not one a caller passes (``self.optimizer = optimizer``)."""
        if not self.optimizers or not self._given[1]:
            return False
        tree = self.ctx.tree
        scope, owner = tree.scope_of(at), tree.enclosing_class(at)
        # The optimizers its own function steps; else its class's (a step split over methods,
        # or none: Lightning steps what `configure_optimizers` returns); else the file's.
        stepped = [call for call in self._stepped if tree.scope_of(call) is scope] or \
            ([call for call in self._stepped if tree.enclosing_class(call) is owner] if owner is not None else self._stepped)
        built = {id(call) for call in self.optimizers}
        for call in stepped:
            receiver = call.func.value  # type: ignore[attr-defined]
            made = self.ctx.values.constructors_passed(receiver, call)
            if not made or any(id(chain_root(m)[0]) not in built and id(m) not in built for m in made):
                return False
        return True

    @cached_property
    def _stepped(self) -> list[cst.Call]:
        """``opt.step()`` / ``opt.zero_grad()`` on names that look like optimizers."""
        return [call for call in self.ctx.method_calls({"step", "zero_grad"})
                if looks_like_optimizer(dotted(call.func.value) or "")]  # type: ignore[attr-defined]

    def optimized(self, module: str, at: cst.CSTNode) -> bool:
        """Is (part of) ``module``, read at ``at``, given to an optimizer here (``self.x`` by one
        of the same class)?"""
        owner = self.ctx.tree.enclosing_class(at)
        where = id(owner) if owner is not None and (module == "self" or module.startswith("self.")) else 0
        return any(related(module, name) and cls == where for cls, name in self._given[0])

    def handled(self, module: str, at: cst.CSTNode) -> bool:
        """Does the file do something with ``module``'s weights (``requires_grad_``, a loop over
        its ``parameters()`` that is not a count, ``.requires_grad = ...``) or hand the module
        to a call that may (``set_requires_grad(vgg, False)``, ``build_optimizer(vgg)``)?"""
        ctx = self.ctx
        tree = ctx.tree
        owner = tree.enclosing_class(at)
        for call in ctx.method_calls(_PARAMETER_METHODS):
            receiver = dotted(chain_root(call.func.value)[0])  # type: ignore[attr-defined]
            if receiver is None or not related(receiver, module) or not self._same_self(receiver, module, call, owner):
                continue
            if not any(tree.is_inside(call, optimizer) for optimizer in self.optimizers) and not _counted(ctx, call):
                return True
        for attr in tree.attributes_named("requires_grad"):
            holder = dotted(attr.value)
            if holder is not None and related(holder, module) and self._same_self(holder, module, attr, owner):
                return True
        head = module.split(".")[0]
        for name in tree.names_valued(head):
            expr = tree.parent(name) if module != head else name
            while expr is not None and type(expr) is cst.Attribute and dotted(expr) != module:
                expr = tree.parent(expr)
            if expr is None or dotted(expr) != module or not self._same_self(module, module, expr, owner):  # type: ignore[arg-type]
                continue
            arg = tree.parent(expr)
            if isinstance(arg, cst.Arg) and canonical(ctx.qname(tree.parent(arg).func)) not in _HARMLESS \
                    and (dotted(tree.parent(arg).func) or "") not in _HARMLESS:  # type: ignore[union-attr]
                return True
        return False

    def _same_self(self, name: str, module: str, node: cst.CSTNode, owner: cst.ClassDef | None) -> bool:
        """``self.x`` means the same object only within one class."""
        if not (name.startswith("self.") or name == "self" or module.startswith("self.")):
            return True
        return self.ctx.tree.enclosing_class(node) is owner


def _parameters_of(ctx: FileContext, name: cst.Name) -> bool:
    """``name.parameters()`` / ``name.named_parameters()``."""
    attribute = ctx.tree.parent(name)
    return isinstance(attribute, cst.Attribute) and attribute.attr.value in ("parameters", "named_parameters") \
        and isinstance(ctx.tree.parent(attribute), cst.Call)


def _counted(ctx: FileContext, call: cst.Call) -> bool:
    """``sum(p.numel() for p in model.parameters())``: the parameters only counted."""
    for ancestor in ctx.tree.ancestors(call):
        if isinstance(ancestor, cst.Call) and dotted(ancestor.func) in ("sum", "len"):
            return True
        if isinstance(ancestor, cst.BaseStatement):
            return False
    return False


def output_targets(ctx: FileContext, call: cst.Call) -> tuple[cst.CSTNode | None, list[str]]:
    """Where a module call's output goes within its statement: the backward call or
    ``return`` whose expression holds it (else None), and the names it is bound to
    (``feats = vgg(fake)``, ``loss += l1(vgg(x), vgg(y))``). Nothing when it is detached at
    once (``vgg(real).detach()``: no gradient reaches its weights through this call)."""
    tree = ctx.tree
    parent = tree.parent(call)
    if isinstance(parent, cst.Attribute) and parent.attr.value in ("detach", "data"):
        return None, []
    for ancestor in tree.ancestors(call):
        if type(ancestor) is cst.Call and is_backward_call(ctx, ancestor):  # type: ignore[arg-type]
            return ancestor, []
        if type(ancestor) is cst.Return:
            return ancestor, []
        if type(ancestor) is cst.Assign:  # (`y_d_hat_r, y_d_hat_g, fmap_r, fmap_g = net_d(y, y_hat)`: each name)
            return None, [name for t in ancestor.targets for name in _target_names(_paired(ctx, t.target, ancestor.value, call))]  # type: ignore[attr-defined]
        if type(ancestor) in (cst.AugAssign, cst.AnnAssign):
            name = dotted(ancestor.target)  # type: ignore[attr-defined]
            return None, [name] if name is not None else []
        if isinstance(ancestor, (cst.BaseStatement, cst.Lambda, cst.BaseComp)):
            break
    return None, []


def _paired(ctx: FileContext, target: cst.BaseExpression, value: cst.BaseExpression, call: cst.CSTNode) -> cst.BaseExpression:
    """The part of ``target`` that ``call``'s part of ``value`` is bound to: ``b`` for ``g(y)``
    in ``a, b = f(x), g(y)``; the whole target otherwise."""
    while isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
            and len(target.elements) == len(value.elements) \
            and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        part = next((i for i, e in enumerate(value.elements) if e.value is call or ctx.tree.is_inside(call, e.value)), None)
        if part is None:
            break
        target, value = target.elements[part].value, value.elements[part].value
    return target


def _target_names(target: cst.BaseExpression) -> list[str]:
    """The dotted names an assignment target binds, through tuples and lists."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    name = dotted(target)
    return [name] if name is not None else []


def output_backwards(ctx: FileContext, call: cst.Call) -> list[cst.Call]:
    """The backward passes after ``call`` in its scope that differentiate its output (see
    ``output_targets``), in source order."""
    holder, targets = output_targets(ctx, call)
    if isinstance(holder, cst.Call):
        return [holder]
    statement = ctx.tree.statement_of(call) or call
    found = {id(b): b for name in targets for b in ctx.grad.backwards_fed(name, statement, depth=3)}
    return sorted(found.values(), key=ctx.tree.index)
