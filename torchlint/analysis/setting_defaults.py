"""What a setting of a config object a function is passed defaults to, from the files of
its callers (pure data, over the project's summaries): ``args.num_workers`` in
``def make_loaders(args)`` of one file, with ``args = parser.parse_args()`` and
``parser.add_argument("--num-workers", type=int, default=0)`` in the script that calls it,
is 0 unless the run says otherwise. TL201 waits for it (engine/settle.py); TL407 for whether every
caller turns on a cache its function leaves off by default."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torchlint.analysis.frameworks import HOOK_METHOD_NAMES
from torchlint.analysis.project import Project
from torchlint.analysis.setting_calls import CallIndexes
from torchlint.analysis.setting_values import MAX_DEPTH, SettingValues
from torchlint.analysis.summary import CallSite
from torchlint.analysis.switch_words import Flag, holds

_SYMBOLS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "in": "in", "not_in": "not in", "is_": "is", "is_not": "is not"}  # (literal_tests.compared's tests)
_T = TypeVar("_T")
_BUILT_OFF = "only that branch builds the object it runs"  # (`_built_off`'s words)
_PICKED_OFF = "only that branch picks the function it calls"  # (theirs for a function bound to a name there)


class SettingDefaults(CallIndexes, SettingValues):
    """The project's callers of each function, indexed once, and the defaults they pass."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._callers: dict[tuple[str, str], list[tuple[str, CallSite]]] | None = None
        self._built: list[tuple[str, CallSite]] | None = None
        self._handed_away: frozenset[tuple[str, str]] | None = None  # classes handed to calls the join resolves to nothing
        self._unresolved: dict[str, list[tuple[str, CallSite]]] | None = None  # calls the join resolves to nothing, by the name called
        self._unfollowed: dict[str, list[tuple[str, str, str, str]]] | None = None  # FileSummary.unfollowed, by the name called
        self._keywords: dict[str, list[tuple[str, CallSite]]] | None = None  # calls passing a keyword by name, by the keyword
        self._handed_memo: dict[str, bool] = {}  # `_handed_to_kwargs`'s answers
        self._kept: dict[str, object] = {}  # `kept`'s

    def always_passed(self, path: str, function: str, param: str) -> bool:
        """Does every call of ``function`` (in ``path``) in the project pass ``param`` a value that
        may be true (``use_kv_caching=True``; not left out, nor a literal False or None), and is
        there one? A call through ``*args``/``**kwargs`` is not known to."""
        calls = self.calls_of((path, function))
        return bool(calls) and all(param in self.project.passes(call, (path, function)) for _, call in calls)

    def turned_on_nowhere(self, path: str, function: str, param: str, optional: bool) -> str | None:
        """Words for a line that runs only when ``param`` of ``function`` (in ``path``) is passed
        on (``Guards.switch_of``: ``if synced_gpus:``, ``synced_gpus=False``; a constructor's,
        ``Cls.__init__``, for ``if self.flag:``) where no call of it in the project passes a value
        that may turn it on: each leaves it out, passes None (or, unless ``optional``: a literal
        False, 0 or ""), or hands on its own parameter that defaults off and that no call of its
        function turns on. None where one may (any other value, ``*args``/``**kwargs``, a call of
        a method of that name the join cannot resolve that passes it, a subclass in the project):
        it runs as its own file says. With no call at all (a library's entry point), the words too."""
        if self._maybe_elsewhere(path, function, param, optional, 0):
            return None
        chain = self._off_everywhere(path, function, param, optional, 0)
        if chain is None:
            return None
        owner, _, name = function.rpartition(".")
        shown = f"{owner}()" if name == "__init__" else f"{function}()"
        setting = f"`{param}` given" if optional else f"`{param}=True`"
        settings = self._settings_passing(path, function, param)
        if settings:  # (`use_amp=args.use_amp`: passed, but only the run's setting, itself off by default)
            return f"only on an opt-in path: `{shown}` runs it only with {setting}, off by default, and the project passes it only {settings}"
        if chain or self._unfollowed_named(name):
            return f"only on an opt-in path: `{shown}` runs it only with {setting}, off by default, and no call in the project passes it"
        return f"only on an opt-in path: `{shown}` runs it only with {setting}, off by default, and no code of the project calls it"

    def passed_off_everywhere(self, path: str, flags: tuple[Flag, ...], built: bool = False) -> str | None:
        """Words for a line that runs only where each of ``flags`` holds (``Guards.flag_of``: a
        test of a parameter of a function in ``path``, or of a constructor's, ``Cls.__init__``,
        for ``if self.flag:``) where, for one of them, every call in the project passes a literal
        that fails it (a literal False, 0 or "" for a truth test), leaves it at a default that
        does, or hands on its own parameter that every call of its own function so passes:
        encodec's ``build_stable_quantized_cdf(..., check=False)``, wavlm's ``MultiheadAttention``
        never built with ``add_zero_attn``, so-vits-svc's ``NoiseScheduleVP(schedule="discrete")``
        against ``if self.schedule == "linear":``. A test function's call (``test()``, ``test_*``,
        a ``test_*.py`` file) is no part of a run. None where each may hold: a call passes
        anything else or ``*args``/``**kwargs``, code the join cannot follow may pass it, or no
        call but a test's is seen (a library's API). ``built``: the tests around the branch that builds an object
        (``CallSite.flags``): a subclass whose own ``__init__`` calls ``super().__init__(...)`` passes them only what
        that call shows, whatever it sets on ``self`` afterwards (OpenNMT's ``if num_experts > 0:`` in a base layer)."""
        for function, param, test, constant, default in flags:
            if self._passed_off(path, function, param, test, constant, default, 0, built):
                owner, _, name = function.rpartition(".")
                shown = f"{owner}()" if name == "__init__" else f"{function}()"
                settings = self._settings_passing(path, function, param)
                if test == "truth" and settings:
                    return f"only when `{param}` is true, and every call of `{shown}` in the project leaves it off (it is passed only {settings})"
                if test == "truth":
                    return f"only when `{param}` is true, and every call of `{shown}` in the project leaves it off"
                if test == "not":
                    return f"only when `{param}` is false, and every call of `{shown}` in the project leaves it true (passed, or its default)"
                return f"only when `{param} {_SYMBOLS[test]} {constant!r}`, and no call of `{shown}` in the project passes such a value"
        return None

    def _passed_off(self, path: str, function: str, param: str, test: str, constant: object, default: tuple[object, ...], depth: int,
                    built: bool = False) -> bool:
        if depth > MAX_DEPTH or self._maybe_elsewhere(path, function, param, test != "truth", depth, built):
            return False
        calls = [(where, call) for where, call in self.calls_of((path, function)) if not self._a_test(where, call.caller)]
        if not calls:
            return False
        summary = self.project.files.get(path)
        if not default and test == "truth" and summary is not None and any(f == function and p == param for f, p, _ in summary.off_defaults):
            default = (False,)  # (a default off the summary knows: `mask=None`, `flag=False`)
        for caller_path, call in calls:
            where = self._explicit(call, (path, function), param)
            if where is None and call.given is None and self._forwarded(call, (path, function), param):
                # (`Codes(dim=dim, **kwargs)` in a `Stack.__init__(..., **kwargs)`: what the stack's own calls pass there)
                if not self._passed_off(caller_path, call.caller, param, test, constant, default, depth + 1, built):
                    return False
                continue
            if where is None:
                if call.given is None or not default or holds(test, constant, default[0]) is not False:
                    return False  # left at a default that may hold, or through `*args`/`**kwargs`
                continue
            literals = dict(call.literals)
            if where in literals:
                if holds(test, constant, literals[where]) is not False:
                    return False
                continue
            if test == "truth" and where in call.falsy:
                continue
            default_passed = self._setting_passed(caller_path, call, where)
            if default_passed is not None:
                # (`clip_loss_weight=args.coca_contrastive_loss_weight` in `create_loss(args)`: the parser's default, 1.0)
                if holds(test, constant, default_passed[0]) is not False:
                    return False
                continue
            own = dict(call.own_params).get(where)
            if own is None:
                # (an attribute its class keeps from its constructor, `self.replace_unk`: what every construction passes there)
                kept = self._kept_param(call, where)
                if kept is None or not self._passed_off(caller_path, *kept, test, constant, self._literal_default(caller_path, *kept), depth + 1, built):
                    return False
                continue
            # (its caller's own parameter handed on: what every call of the caller passes there)
            if not self._passed_off(caller_path, call.caller, own, test, constant, self._literal_default(caller_path, call.caller, own), depth + 1, built):
                return False
        return True

    def _literal_default(self, path: str, function: str, param: str) -> tuple[object, ...]:
        """``(default,)`` for a parameter of ``function`` that defaults to a literal (``FileSummary.literal_defaults``), else ()."""
        summary = self.project.files.get(path)
        return next(((d,) for f, p, d in summary.literal_defaults if f == function and p == param), ()) if summary is not None else ()

    def called_switched_off(self, path: str, function: str, depth: int = 0) -> str | None:
        """Words for a function whose every call in the project sits behind a switch of its caller
        that no call turns on (``CallSite.switch``, ``turned_on_nowhere``: ``if top_k is not None:
        top_k_logits(...)`` in ``sample(..., top_k=None)``), or in a function itself only so called:
        what it runs is on that opt-in path too. None where there is no call, or one without such
        a switch, a call made every N steps, a call the join cannot resolve under its name, or a use
        of it as a value (``FileSummary.valued``: called where no call site says)."""
        memo: dict[tuple[str, str], str | None] = self.kept("switched", dict)
        key = (path, function)
        if key not in memo:
            memo[key] = None  # (a function that calls itself, on the way: no switch known)
            memo[key] = self._called_switched_off(path, function, depth)
        return memo[key]

    def _called_switched_off(self, path: str, function: str, depth: int) -> str | None:
        owner, _, name = function.rpartition(".")
        if depth > MAX_DEPTH or (path, function) in self._sparse_calls():
            return None
        if name == "forward" and name not in self.valued():
            # (a model runs on its call, by no name a call site records, and has unresolved calls in most projects:
            # only the branches building its objects, each of its calls, decide here)
            found = self._all_off(self.calls_of((path, function)), depth, only_built=True)
            if found is not None:
                return found
        if name == "__call__" and (found := self._calls_off(path, owner, function, depth)) is not None:
            return found
        # (a dunder runs on an object's construction or call, by no name a call site records)
        if name.startswith("__") or name in ("forward", "__call__") or name in self.valued() or self.unresolved_named(name):
            return self._built_switched_off(path, owner, function, depth)
        return self._all_off(self.calls_of((path, function)), depth) or self._built_switched_off(path, owner, function, depth)

    def only_built_off(self, path: str, function: str) -> str | None:
        """Words where every call of ``function`` (of ``path``) is a call of an object only a branch no construction
        takes builds (``CallSite.flags``: OpenNMT's ``MoE`` under ``if num_experts > 0:``), for a model's code whose
        callers are not seen: their switches are not asked (a flag of its ``forward`` may be passed by them)."""
        calls = self.calls_of((path, function))
        return self._all_off(calls, 0, only_built=True) if calls else None

    def _all_off(self, calls: list[tuple[str, CallSite]], depth: int, modes: bool = False, only_built: bool = False) -> str | None:
        """Words where each of ``calls`` is made only behind a switch or a flag of the run that
        nothing turns on, or in a function itself only so called, or of an object no branch the project
        takes builds (only that where ``only_built``: a ``forward``); the first one's words; None otherwise."""
        words = None
        skipped = False
        for caller_path, call in calls:
            found = self._built_off(caller_path, call)
            if found is None and not only_built:
                found = (self.turned_on_nowhere(caller_path, *call.switch) if call.switch is not None else None) \
                    or self.run_flag_off(caller_path, call.run_flags, modes) \
                    or (self.called_switched_off(caller_path, call.caller, depth + 1) if call.caller else None)
            if found is None and self._never_called(caller_path, call):
                skipped = True  # (`tensorlab2tensor()`, an API function no code of the project calls: no run reaches the line through it)
                continue
            if found is None:
                return None
            words = words or found
        # (an uncalled caller is passed over only beside a call of an object no branch the project takes builds)
        return words if not skipped or words is not None and (_BUILT_OFF in words or _PICKED_OFF in words) else None

    def _calls_off(self, path: str, owner: str, function: str, depth: int) -> str | None:
        """Words for the ``__call__`` of a plain class of ``path`` (no base but ``object``, no subclass, never used as
        a value) whose every call the join resolves is made only behind a switch or a flag of the run
        nothing turns on, where no call the join cannot resolve is handed an object of it (ConvNeXt's
        ``loss_scaler(loss, optimizer, ...)`` only ``if use_amp:``, ``--use_amp`` off by default)."""
        found = self.project.classes.get(path, {}).get(owner)
        # (a library's base may call it by its own design; a subclass or a value, by no call site recorded)
        if found is None or any(base != ("local", "object") for base in found.bases) or self.project.has_subclasses(path, owner) or owner.rpartition(".")[2] in self.valued():
            return None
        calls = self.calls_of((path, function))
        # (an object handed to a library's function may be called there)
        if not calls or (path, owner) in self.handed_to_unresolved():
            return None
        return self._all_off(calls, depth)

    def _never_called(self, path: str, call: CallSite) -> bool:
        """Is ``call`` made outside hot loops by a function no code of the project calls, by name, as a
        value, by a framework (a hook, ``forward``, a dunder) or every N steps?"""
        name = call.caller.rpartition(".")[2]
        return bool(call.caller) and call.loop is None and not name.startswith("__") and name != "forward" \
            and name not in HOOK_METHOD_NAMES and name not in self.valued() and not self.unresolved_named(name) \
            and (path, call.caller) not in self._sparse_calls() and not self.calls_of((path, call.caller))

    def _built_off(self, path: str, call: CallSite) -> str | None:
        """Words for a call of an object built only behind tests of a parameter (``CallSite.flags``) that
        every call in the project fails: LPIPS' ``self.net`` is an ``L2()`` only where ``model in ["L2", "l2"]``,
        and the project passes ``model="net-lin"``."""
        off = self.passed_off_everywhere(path, call.flags, built=True) if call.flags else None
        # (a function a name was bound to in that branch, `spline_fn = rational_quadratic_spline`: BranchFunctions)
        return f"{off}: {_BUILT_OFF if call.target[0] == 'object' else _PICKED_OFF}" if off else None

    def _built_switched_off(self, path: str, owner: str, function: str, depth: int) -> str | None:
        """Words for a method (``function``) of a class ``owner`` of ``path`` that the project builds only
        behind a switch or a flag of the run nothing turns on (pytorch-a2c-ppo-acktr-gail's GAIL
        ``Discriminator``, built and updated only under ``if args.gail:``): no object, none of its methods
        run, whatever other calls of their names the join cannot resolve. None where the class has a
        subclass in the project, is used as a value, may be built by name, or a call names the method on the class."""
        if not owner or owner not in self.project.classes.get(path, {}) or self.project.has_subclasses(path, owner) \
                or owner.rpartition(".")[2] in self.valued() or self._built_by_name():
            return None
        calls = self.calls_of((path, function))
        if any(str(call.target[-1]).endswith(f"{owner}.{function.rpartition('.')[2]}") for _, call in calls):
            return None  # (`Discriminator.helper(x)`: a static method runs with no object built)
        if calls and not self._all_off(calls, depth):
            return None  # (`if args.do_train: trainer = Trainer(...); trainer.train()`: its calls say it runs when built)
        built = self._built_by_class().get((path, owner), [])
        # (a construction behind any flag off by default: `if args.gail: discr = Discriminator(...)` before the loop)
        return self._all_off(built, depth, modes=True) if built else None

    def _built_by_class(self) -> dict[tuple[str, str], list[tuple[str, CallSite]]]:
        """The project's constructions by the class they build (file, class key): indexed once."""
        def index() -> dict[tuple[str, str], list[tuple[str, CallSite]]]:
            found: dict[tuple[str, str], list[tuple[str, CallSite]]] = {}
            for caller, call in self.constructions():
                cls = self.project.class_of(call.target, caller, 1)
                if cls is not None:
                    found.setdefault(cls, []).append((caller, call))
            return found
        return self.kept("built_by_class", index)  # type: ignore[no-any-return]

    def _built_by_name(self) -> bool:
        """Does a file of the project build objects from names (``FileSummary.by_name``, a registry)?"""
        return self.kept("by_name", lambda: any(s.by_name or s.registered for s in self.project.files.values()))

    def valued(self) -> frozenset[str]:
        """The names the project's files use as values (``FileSummary.valued``): a function so
        used may be called where no call site says."""
        return self.kept("valued", lambda: frozenset(n for summary in self.project.files.values() for n in summary.valued))

    def _sparse_calls(self) -> frozenset[tuple[str, str]]:
        """The functions some call every N steps runs (``FileSummary.guarded``, ``every_n``): no ``calls`` site."""
        return self.kept("sparse", lambda: frozenset(callee for path, summary in self.project.files.items()
                                                     for call in (*summary.guarded, *summary.every_n)
                                                     for callee in self.project.callees(call.target, path)))

    def _off_everywhere(self, path: str, function: str, param: str, optional: bool, depth: int) -> bool | None:
        """True: the project's calls of ``function`` leave ``param`` off; False: there are none;
        None: one may turn it on."""
        calls = self.calls_of((path, function))
        for caller_path, call in calls:
            where = self._explicit(call, (path, function), param)
            if where is None and call.given is None and self._forwarded(call, (path, function), param):
                # (`Codes(dim=dim, **kwargs)` in a `Stack.__init__(..., **kwargs)`: what the stack's own calls pass there)
                if not self._switch_off(caller_path, (call.caller, param, optional), depth + 1):
                    return None
                continue
            if where is None:
                if call.given is None:
                    return None  # `*args`/`**kwargs` may hold it
                continue  # left out, or None: the default
            if not optional and where in call.falsy:
                continue
            passed = self._setting_passed(caller_path, call, where)
            if passed is not None and (passed[0] is None or not optional and not passed[0]):
                continue  # (`use_amp=args.use_amp`, a `str2bool` option at `default=False`: off unless the run turns it on)
            own = dict(call.own_params).get(where)
            kept = self._kept_param(call, where) if own is None else None
            if kept is not None and self._handed_off(caller_path, *kept, optional, depth):
                continue  # (`self.replace_unk`, kept from a constructor whose every construction leaves it off)
            if own is None or not self._handed_off(caller_path, call.caller, own, optional, depth):
                if call.switch is not None and self._switch_off(caller_path, call.switch, depth + 1):
                    continue  # (`if filtered: sample(x, top_k=5)`: made only behind its caller's switch, which nothing turns on)
                return None  # a value that may be on, or a parameter its own callers may turn on
        return bool(calls)

    def _forwarded(self, call: CallSite, callee: tuple[str, str], param: str) -> bool:
        """Does ``call`` hand on its caller's own ``**kwargs`` (``CallSite.forwards``) without naming
        ``param`` itself, so that only what the caller's own calls put there may reach it?"""
        if call.forwards is None or not call.caller:
            return False
        names = self.project.parameters(call, callee, classmethods=True)
        if callee[1].endswith(".__init__") and names[:1] == ("self",):
            names = names[1:]
        return all(where != param if isinstance(where, str) else where >= len(names) or names[where] != param for where in call.forwards)

    def _switch_off(self, path: str, switch: tuple[str, str, bool], depth: int) -> bool:
        function, param, optional = switch
        return depth < MAX_DEPTH and not self._maybe_elsewhere(path, function, param, optional, depth) \
            and self._off_everywhere(path, function, param, optional, depth) is not None

    def _explicit(self, call: CallSite, callee: tuple[str, str], param: str) -> int | str | None:
        """Where ``call`` names ``param`` itself (a keyword, or a position before any ``*``/``**``)."""
        if call.given is not None:
            filled = self._filled_by(call, callee, param)
            return filled[0] if filled is not None else None
        named = {where for where, _ in call.own_params} | {where for where, _, _ in call.own_settings} | set(call.falsy) \
            | {where for where, _, _ in call.kept_params}
        if param in named:
            return param  # (`f(x, flag=flag, **kwargs)`, `f(w=args.w, **shared)`: a keyword named is none `kwargs` may hold)
        names = self.project.parameters(call, callee, classmethods=True)
        if callee[1].endswith(".__init__") and names[:1] == ("self",):
            names = names[1:]
        return next((w for w in named if isinstance(w, int) and w < len(names) and names[w] == param), None)

    def _maybe_elsewhere(self, path: str, function: str, param: str, optional: bool, depth: int, built: bool = False) -> bool:
        """May code the join cannot follow pass ``param``: a subclass of the function's class in the
        project (its ``super().__init__(flag=True)``, its own calls), a call of a method of the same
        name the join resolves to nothing that names it, or such a call no call site records
        (``FileSummary.unfollowed``: a library object's, a rare branch's), unless what it passes is
        a literal off or its caller's own parameter, off by default, that nothing turns on? With ``built``, a
        constructor's subclasses that each call ``super().__init__(...)`` are followed, not feared; without, too,
        where no subclass sets an attribute the base keeps from ``param`` (OpenNMT's ``self.block_ngram_repeat``)."""
        owner, _, name = function.rpartition(".")
        if owner and owner in self.project.classes.get(path, {}) and self.project.has_subclasses(path, owner) \
                and not (name == "__init__" and (built or self._kept_unset(path, owner, param)) and self._subclasses_construct_through(path, owner)):
            return True
        if name == "__init__":
            # (a construction names its class: one the join cannot resolve is another class; but a class the
            # project never builds by name may be built by reflection, decision-diffuser's
            # `utils.Config('models.GaussianInvDynDiffusion', returns_condition=...)`: a keyword of the switch's
            # name handed to what does not take it by name may be that construction)
            return not self.calls_of((path, function)) and self._handed_to_kwargs(param)
        # (a `**` splat of such a call is none of the project's values: what code outside it passes, as for an entry point)
        # (a module's `forward` is called by its object's name, `model(x, flag=True)`: any such call may be one)
        name = "" if name in ("forward", "__call__") else name
        for caller_path, call in self.unresolved_named(name):
            named = param in call.given[1] if call.given is not None else param in dict(call.own_params) or param in call.falsy
            if not named or not optional and param in call.falsy:
                continue
            own = dict(call.own_params).get(param)
            if own is None or not self._handed_off(caller_path, call.caller, own, optional, depth):
                return True
        for caller_path, keyword, caller, own in self._unfollowed_named(name):
            if keyword == param and not (own and self._handed_off(caller_path, caller, own, optional, depth)):
                return True
        return False

    def _handed_off(self, path: str, function: str, param: str, optional: bool, depth: int) -> bool:
        """Is ``param`` of ``function`` one that defaults off (None, for ``optional``) and that no
        code of the project turns on?"""
        summary = self.project.files.get(path)
        off = {(p, none) for f, p, none in summary.off_defaults if f == function} if summary is not None and function else set()
        return depth < MAX_DEPTH and ((param, True) in off or not optional and (param, False) in off) \
            and not self._maybe_elsewhere(path, function, param, optional, depth + 1) \
            and self._off_everywhere(path, function, param, optional, depth + 1) is not None

    def kept(self, name: str, make: Callable[[], _T]) -> _T:
        """What ``make()`` returns, made once per project and kept under ``name``: for an analysis
        over these indexes that asks the same questions for every file (analysis/vendored_reach.py, this class's own memos)."""
        kept = self._kept
        if name not in kept:
            kept[name] = make()
        return kept[name]  # type: ignore[no-any-return]

    def calls_of(self, function: tuple[str, str]) -> list[tuple[str, CallSite]]:
        """Every call of the project that runs ``function`` (file, key; a construction: its class's
        ``__init__``), with its file."""
        if self._callers is None:
            self._callers = self._index()
        return self._callers.get(function, [])

    def _index(self) -> dict[tuple[str, str], list[tuple[str, CallSite]]]:
        """Every call of the project by the function it runs (a class's construction: its
        ``__init__``)."""
        project = self.project
        callers: dict[tuple[str, str], list[tuple[str, CallSite]]] = {}
        for path, summary in project.files.items():
            for call in summary.calls:
                callees = project.callees(call.target, path)
                if not callees and call.target[0] in ("local", "import"):
                    owner = project.class_of(call.target, path, 1)
                    init = project.method(*owner, "__init__") if owner is not None else None
                    callees = [init] if init is not None else []
                for callee in (*callees, *(self._inheriting_inits(path, call) if call.through_cls else ())):
                    callers.setdefault(callee, []).append((path, call))
        return callers
