"""Name resolution over the checked files' summaries: which function of the project a
reference in one file calls, which classes an object may be, a class's bases and the
framework hooks it inherits. Only checked files are the project: a reference that
resolves to nothing else (a library, site-packages) ends the search quietly, as do
recursion and depth. :mod:`torchlint.analysis.join` uses it to find the per-step
functions, :mod:`torchlint.analysis.compiled_reach` what torch.compile traces.
"""

from __future__ import annotations


from torchlint.analysis import frameworks
from torchlint.analysis.dispatch import self_dispatch
from torchlint.analysis.project_classes import MAX_CLASSES as _MAX_CLASSES, ProjectClasses
from torchlint.analysis.project_index import _BOUND
from torchlint.analysis.summary import ClassSummary, Ref
_MAX_DEPTH = 12  # resolution through re-exports and base classes
_SEVERAL = frozenset({"each", "attr", "passed", "or"})  # references that may name several classes
_ROUNDS = 4  # constructor arguments passed on through calls of objects passed in: enough for a trainer's model


class Project(ProjectClasses):
    """Name resolution over the checked files' summaries."""

    def index_arguments(self) -> None:
        """Record, for every call that passes an object of a class, which parameter of the
        callee receives it. A call of a method of what the callers pass (``functools.partial(
        self.diffusion.training_losses, self.ddp_model, ...)`` with ``self.diffusion`` a
        constructor's parameter) resolves only through what is recorded: such calls are
        taken again, a few rounds, until nothing new is found."""
        deferred = []
        receivers: dict[tuple[Ref, str], tuple[tuple[str, str] | None, bool]] = {}  # many calls share a target
        for path, summary in self.files.items():
            for call in summary.calls:  # (not the guarded ones: an `evaluate(state, loader, eval_step_fn)` every N steps would pass its step closure to an eval loop)
                if not call.args:
                    continue
                if call.target[0] == "object" and call.target[1][0] in _SEVERAL:
                    deferred.append((path, call))  # its callee depends on what is recorded
                    continue
                key = (call.target, path)
                if key not in receivers:
                    receivers[key] = self._receiver(call.target, path)
                callee, bound = receivers[key]
                if callee is not None:
                    self._record_arguments(call, path, callee, bound)
        for _ in range(_ROUNDS):
            self._forget()
            if not any([self._record_arguments(call, path, callee, True) for path, call in deferred for callee in self._deferred_callees(call.target, path)]):
                break
        self._forget()

    def _deferred_callees(self, target: Ref, path: str) -> list[tuple[str, str]]:
        """What a call of an object handed over runs: its method, or, where it is a class (one out of a registry,
        score_sde's ``corrector(sde, score_fn, snr, n_steps)``), the ``__init__`` that building one runs."""
        found = self.callees(target, path)
        if found or target[0] != "object" or target[2] != "__call__":
            return found
        built = self._instantiated(("returned", target, None), path, 1)
        return [init for owner in built if (init := self.method(*owner, "__init__")) is not None]

    def _receiver(self, target: Ref, path: str) -> tuple[tuple[str, str] | None, bool]:
        """The function a call of ``target`` runs, and whether its ``self`` is bound."""
        callee, bound = self.function(target, path), target[0] in _BOUND
        if callee is None:  # `SetCriterion(matcher=matcher)`: the class's __init__
            owner = self.class_of(target, path, 1) if target[0] in ("local", "import") else None
            callee, bound = (self.method(*owner, "__init__") if owner is not None else None), True
        return callee, bound

    # --- functions and classes -------------------------------------------------------
    def function(self, ref: Ref, importer: str, depth: int = 0) -> tuple[str, str] | None:
        """The (file, function key) that ``ref`` in ``importer`` calls, if it is the project's."""
        if depth > _MAX_DEPTH:
            return None
        kind = ref[0]
        if kind == "local":
            return (importer, ref[1]) if ref[1] in self.functions.get(importer, ()) else None
        if kind == "method":  # a method, else an object a (base) class keeps in that attribute
            return self.method(importer, ref[1], ref[2], depth) or self._object_method(("attr", ref[1], ref[2]), importer, "__call__", depth)
        if kind == "object":  # a method of an instance of a project class, else a module it keeps
            owner = self.class_of(ref[1], importer, depth + 1)
            found = self._object_methods([owner], ref[2], depth) if owner is not None else []
            return found[0] if found else None
        if kind == "keywords":  # a decode loop's model known by the keywords it is given
            taking = self.forwards_taking(ref[1])
            return taking[0] if len(taking) == 1 else None
        if kind == "each":  # (a table of functions exported: `callees` runs each)
            return None
        if kind == "super":  # `super().m()`: the first base class (of the project) that defines it
            for owner_path, owner in self.mro(importer, ref[1], depth)[1:]:
                if ref[2] in owner.methods:
                    return (owner_path, f"{owner.key}.{ref[2]}")
            return None

        if kind == "star":
            for level, module in self.files[importer].stars if importer in self.files else ():
                path = self.module_file(module, importer, level)
                if path is not None:
                    found = self._named(path, [ref[1]], depth)
                    if found is not None:
                        return found
            return None
        for path, rest in self._split(ref, importer):
            found = self._named(path, rest, depth)
            if found is not None:
                return found
        return None

    def _object_method(self, class_ref: Ref, importer: str, name: str, depth: int) -> tuple[str, str] | None:
        owner = self.class_of(class_ref, importer, depth + 1)
        return self._method_of(owner, name, depth) if owner is not None else None

    def _method_of(self, owner: tuple[str, str], name: str, depth: int) -> tuple[str, str] | None:
        """``name`` on an object of ``owner``; a call of the object (``"__call__"``) runs its ``forward``."""
        for method in ("forward", "__call__") if name == "__call__" else (name,):
            found = self.method(*owner, method, depth + 1)
            if found is not None:
                return found
        return None

    def _object_methods(self, owners: list[tuple[str, str]], name: str, depth: int) -> list[tuple[str, str]]:
        """``name`` called on an object of each of ``owners``: its method; else, where the class
        has none, a call of what it keeps in that attribute (``self.model.mask_decoder(x)``,
        the model a predictor holds: the decoder's ``forward``)."""
        found: list[tuple[str, str]] = []
        for owner in owners:
            if name == "__call__" and owner[1] in self.functions.get(owner[0], ()):
                found.append(owner)  # a function passed in (`denoiser(x, sigma)`): a call of it runs it
                continue
            method = self._method_of(owner, name, depth)
            if method is not None:
                found.append(method)
                found.extend(self._overrides(method))  # an abstract method: what runs is a subclass's
            elif name != "__call__":  # (a call of the object itself is its forward or nothing)
                held = self.classes_of(("attr", owner[1], name), owner[0], depth + 1)
                found.extend(m for each in held if (m := self._method_of(each, "__call__", depth + 1)) is not None)
        return list(dict.fromkeys(found))

    def callees(self, ref: Ref, importer: str) -> list[tuple[str, str]]:
        """Every (file, function key) a call of ``ref`` may run: ``function``'s one, or, for a
        call of an object that may be of several classes (an attribute set in two branches,
        what several callers pass, a container's members), the method of each."""
        key = (ref, importer)
        found = self._callees_memo.get(key)
        if found is None:
            kind = ref[0]
            owners: list[tuple[str, str]] = []
            if kind == "each":  # several targets (a call on an object set in two ways): what each runs
                self._callees_memo[key] = found = [one for each in ref[1] for one in self.callees(each, importer)]
                return found
            if kind == "object" and ref[1][0] in _SEVERAL:
                owners, name = self.classes_of(ref[1], importer, 1), ref[2]
            elif kind == "object" and ref[1][0] == "returned":  # a factory that returns one of several classes
                owners, name = self.classes_of(ref[1], importer, 1), ref[2]
                owners = owners if len(owners) > 1 else []
            elif kind == "method" and self.method(importer, ref[1], ref[2]) is None:
                owners, name = self.classes_of(("attr", ref[1], ref[2]), importer, 1), "__call__"
            elif kind == "method":  # `self.train_step()`: the method of whichever subclass `self` is
                self._callees_memo[key] = found = self_dispatch(self, importer, ref[1], ref[2])
                return found
            if owners:
                found = self._object_methods(owners, name, 1)
            elif kind == "object":  # one class: its method, or each class the attribute of that name may hold
                owner = self.class_of(ref[1], importer, 1)
                found = self._object_methods([owner], ref[2], 0) if owner is not None else []
            elif kind == "keywords":
                found = self.forwards_taking(ref[1])
            else:
                one = self.function(ref, importer)
                found = [one] if one is not None else self._table_callees(ref, importer)
            if not found and kind == "method":  # `self._sa_block(x)`: a method of torch's layer class the class derives from
                found = self.library_method_callees(importer, ref[1], ref[2])
            self._callees_memo[key] = found
        return found

    def _table_callees(self, ref: Ref, importer: str) -> list[tuple[str, str]]:
        """A call of an item of a table of functions another module exports (``pooling_dict[name](x, batch)``,
        ``FileSummary.exports``' ``("each", ...)``): each function it holds."""
        if ref[0] != "import":
            return []
        for path, rest in self._split(ref, importer):
            table = next((target for name, target in self.files[path].exports if len(rest) == 1 and name == rest[0] and target[0] == "each"), None)
            if table is not None:
                return [one for member in table[1] for one in self.callees(member, path)]
        return []

    def _returned(self, ref: Ref, importer: str, depth: int) -> tuple[Ref, str] | None:
        """What ``("returned", factory, element)`` stands for: the factory's returned reference
        (``return build(args)`` followed) and the file it is resolved in."""
        factory = self.function(ref[1], importer, depth + 1)
        returned = self.returns.get(factory) if factory is not None else None
        if not returned:
            return None
        if len(returned) == 1 and returned[0] is not None and returned[0][0] == "returned" and returned[0][2] is None:
            return (*returned[0][:2], ref[2]), factory[0]  # `return build(args)`
        element = 0 if ref[2] is None else ref[2]
        inner = returned[element] if element < len(returned) else None
        return (inner, factory[0]) if inner is not None else None

    def classes_of(self, ref: Ref, importer: str, depth: int = 0, limit: int = _MAX_CLASSES, passed_only: bool = False) -> list[tuple[str, str]]:
        """Every class ``ref`` may name (``class_of`` gives the first): each member of
        ``("each", refs)``, every class the first class in the MRO that keeps ``("attr", ...)``
        holds there, whatever any caller passes for ``("passed", ...)``, each class a factory
        may return (``if swin: model = Swin() elif ...: model = SwinV2() ... return model``);
        for a parameter's ``("or", passed, fallback)``, what its callers pass where that names a class,
        else its fallback (with ``passed_only``, never a fallback: a caller handing on its own parameter
        passes nothing where only that parameter's default or annotation would name a class); at most ``limit``."""
        if ref[0] == "returned" and depth <= _MAX_DEPTH:
            inner = self._returned(ref, importer, depth)
            return self.classes_of(inner[0], inner[1], depth + 1, limit, passed_only) if inner is not None else self._instantiated(ref, importer, depth)
        if ref[0] == "or" and depth <= _MAX_DEPTH:
            # StyleTTS2's `DiffusionSampler(sampler=ADPM2Sampler())` runs ADPM2's forward, not each `Sampler` subclass's
            passed = self.classes_of(ref[1], importer, depth + 1, limit, True)
            return passed if passed or passed_only else self.classes_of(ref[2], importer, depth + 1, limit)
        if ref[0] not in _SEVERAL:
            one = self.class_of(ref, importer, depth)
            return [one] if one is not None else []
        if depth > _MAX_DEPTH:
            return []
        if ref[0] == "passed":  # memoised: parameters passed on call after call form chains, and cycles
            key = (ref, importer, limit, passed_only)
            known = self._classes_memo.get(key)
            if known is not None:
                if key in self._resolving:
                    self._cut.add(key)  # a parameter passed back to itself: what is found so far
                return known
            self._classes_memo[key] = []
            self._resolving.add(key)
            found = self._several(ref, importer, depth, limit, passed_only)
            self._resolving.discard(key)
            self._cut.discard(key)
            if self._cut & self._resolving:  # it saw a parameter still being resolved: not final, ask again later
                del self._classes_memo[key]
            else:
                self._classes_memo[key] = found
            return found
        return self._several(ref, importer, depth, limit, passed_only)

    def _instantiated(self, ref: Ref, importer: str, depth: int) -> list[tuple[str, str]]:
        """``("returned", ("object", X, "__call__"), None)`` where ``X`` is a class handed over, not an object: score_sde's
        ``corrector_obj = corrector(sde, score_fn, snr, n_steps)`` with ``corrector`` out of a registry. A class with no
        ``forward`` or ``__call__`` cannot be an object called: calling it builds one of it."""
        called = ref[1]
        if called[0] != "object" or called[2] != "__call__" or ref[2] is not None:
            return []
        return [owner for owner in self.classes_of(called[1], importer, depth + 1) if self._method_of(owner, "__call__", depth) is None]

    def _several(self, ref: Ref, importer: str, depth: int, limit: int, passed_only: bool = False) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for inner, where in self._alternatives(ref, importer, depth):
            for owner in self.classes_of(inner, where, depth + 1, limit, passed_only):
                if owner not in found:
                    found.append(owner)
                    if len(found) >= limit:
                        return found
        return found

    def _alternatives(self, ref: Ref, importer: str, depth: int) -> list[tuple[Ref, str]]:
        """The references (and the files they are written in) that ``ref`` may be any of."""
        if ref[0] == "each":
            return [(member, importer) for member in ref[1]]
        if ref[0] == "attr":  # `self.policy` that this class or a project base class keeps
            for owner_path, owner in self.mro(importer, ref[1], depth + 1):
                held = [(inner, owner_path) for name, inner in owner.attributes if name == ref[2]]
                if held:
                    return held
            # (kept by its subclasses alone: each one's, kospeech's `Conv2dExtractor.forward` calling each extractor's `self.conv`)
            return [(inner, p) for p, sub in self.subclasses(importer, ref[1]) for name, inner in self.classes[p][sub].attributes if name == ref[2]]
        found = []
        for owner, caller in self.passed.get((importer, ref[1], ref[2]), ()):  # what the callers pass
            if len(ref) == 4 and isinstance(ref[3], str):  # an entry of a dict passed: `state["ema"]`
                owner = dict(owner[1]).get(ref[3]) if owner[0] == "dict" else None
            elif len(ref) == 4:  # an element of what is passed: `net_g, net_d = nets`
                owner = owner[1][ref[3]] if owner[0] == "tuple" and ref[3] < len(owner[1]) else None
            elif owner[0] in ("tuple", "dict"):
                continue
            if owner is not None:
                found.append((owner, caller))
        return found

    def _named(self, path: str, rest: list[str], depth: int) -> tuple[str, str] | None:
        key = ".".join(rest)
        if key in self.functions[path]:
            return (path, key)
        if len(rest) == 2 and rest[0] in self.classes[path]:
            found = self.method(path, rest[0], rest[1], depth + 1)
            if found is None and rest[1] == "apply":  # `ops.Attention.apply(q, k, v)`: an autograd.Function runs its forward
                found = self.method(path, rest[0], "forward", depth + 1)
            return found
        for name, target in self.files[path].exports:  # re-exported: follow the import
            if name == key and len(rest) > 1:  # a function a namespace holds (`flash_attn.flash_attn_func`)
                return self.function(target, path, depth + 1)
            if name == rest[0] and (len(rest) == 1 or target[0] == "import"):  # (`f = g` exported: `g` itself only)
                inner = target if len(rest) == 1 else (target[0], target[1], ".".join([target[2], *rest[1:]]))
                return self.function(inner, path, depth + 1)
        return None

    def method(self, path: str, class_key: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """``name`` looked up on class ``class_key`` of ``path`` and then its project bases: a ``def``, or
        a class attribute bound to a function (whisper's ``decode = decode_function``: ``decoding.decode``)."""
        for owner_path, owner in self.mro(path, class_key, depth):
            if name in owner.methods:
                return (owner_path, f"{owner.key}.{name}")
            for alias, ref in owner.aliases:
                if alias == name:
                    found = self.function(ref, owner_path, depth + 1)
                    if found is not None:
                        self._bound_aliases.add((*found, name))
                    return found
        return None

    def mro(self, path: str, class_key: str, depth: int = 0) -> list[tuple[str, ClassSummary]]:
        """The class and its project base classes, depth first (enough for lookups)."""
        found: list[tuple[str, ClassSummary]] = []
        work = [(path, class_key, depth)]
        seen: set[tuple[str, str]] = set()
        while work:
            p, key, d = work.pop(0)
            cls = self.classes.get(p, {}).get(key)
            if cls is None or (p, key) in seen or d > _MAX_DEPTH:
                continue
            seen.add((p, key))
            found.append((p, cls))
            for base in cls.bases:
                resolved = self.class_of(base, p, d + 1)
                if resolved is not None:
                    work.append((*resolved, d + 1))
        return found

    def class_of(self, ref: Ref, importer: str, depth: int) -> tuple[str, str] | None:
        if depth > _MAX_DEPTH:
            return None
        if ref[0] == "returned":  # an object a project factory returns (element or whole)
            inner = self._returned(ref, importer, depth)
            return self.class_of(*inner, depth + 1) if inner is not None else None
        if ref[0] in _SEVERAL:  # the first of the classes it may be
            found = self.classes_of(ref, importer, depth, limit=1)
            return found[0] if found else None
        if ref[0] == "local":
            return (importer, ref[1])
        if ref[0] == "star":
            for level, module in self.files[importer].stars:
                path = self.module_file(module, importer, level)
                if path is not None and ref[1] in self.classes[path]:
                    return (path, ref[1])
            return None
        if ref[0] != "import":
            return None  # (a method, an object's method: no class)
        for path, rest in self._split(ref, importer):
            key = ".".join(rest)
            if key in self.classes[path]:
                return (path, key)
            if key in self.functions[path]:  # `averager = EMA()` of a function named like a class: what it returns
                inner = self._returned(("returned", ref, None), importer, depth)
                return self.class_of(*inner, depth + 1) if inner is not None else None
            for name, target in self.files[path].exports:
                if name == rest[0] and len(rest) == 1 and depth < _MAX_DEPTH:
                    return self.class_of(target, path, depth + 1)
        return None

    def is_module(self, path: str, class_key: str) -> bool:
        """Is the class an ``nn.Module``, through its project bases in any file
        (``CascadeROIHeads(StandardROIHeads)``, ``StandardROIHeads(ROIHeads)``, ``ROIHeads(torch.nn.Module)``)?"""
        key = (path, class_key)
        known = self._module_memo.get(key)
        if known is None:
            known = self._module_memo[key] = any(base[0] == "import" and base[1] == 0 and frameworks.module_base(base[2])
                                                 for _, owner in self.mro(path, class_key) for base in owner.bases)
        return known

    def framework_hooks(self, path: str, cls: ClassSummary) -> frameworks.BaseHooks | None:
        """The framework hook table of ``cls`` when a framework class is among its bases
        (directly, or through the project's own classes)."""
        for owner_path, owner in self.mro(path, cls.key):
            for base in owner.bases:
                if base[0] == "import" and base[1] == 0:
                    hooks = frameworks.base_hooks(base[2])
                    if hooks is not None:
                        return hooks
        return None
