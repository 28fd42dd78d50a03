"""The project's calls indexed by what a call names, for :class:`~torchlint.analysis.setting_defaults.SettingDefaults`:
calls the join resolves to nothing by the name called, calls no call site records (``FileSummary.unfollowed``), calls
by each keyword they pass, each index built once per project; and the ways a subclass reaches a base's constructor
(``super().__init__``, a classmethod's ``cls(...)``) (pure data, no libcst)."""

from __future__ import annotations

from collections.abc import Callable

from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite


class CallIndexes:
    """A mixin of SettingDefaults, which sets the indexes' slots (None until asked) in its ``__init__``."""

    project: Project
    _unresolved: dict[str, list[tuple[str, CallSite]]] | None
    _unfollowed: dict[str, list[tuple[str, str, str, str]]] | None
    _keywords: dict[str, list[tuple[str, CallSite]]] | None
    _handed_memo: dict[str, bool]
    calls_of: Callable[[tuple[str, str]], list[tuple[str, CallSite]]]
    _built: list[tuple[str, CallSite]] | None
    _handed_away: frozenset[tuple[str, str]] | None

    def _handed_to_kwargs(self, keyword: str) -> bool:
        """Does a call of the project pass ``keyword`` by name (any value but a literal off) to
        code that does not take it by name: a ``**kwargs`` of the project's, or a callee the join
        cannot resolve? Answered once per keyword, over the calls that name it (``_naming``)."""
        memo = self._handed_memo
        if keyword not in memo:
            memo[keyword] = any(not callees or any(keyword not in self.project.parameters(call, callee) for callee in callees)
                                for path, call in self._naming().get(keyword, ())
                                for callees in (self.project.callees(call.target, path),))
        return memo[keyword]

    def _naming(self) -> dict[str, list[tuple[str, CallSite]]]:
        """The project's calls by each keyword they pass by name, a literal off aside: one pass
        over the calls, not one per keyword asked."""
        if self._keywords is None:
            self._keywords = {}
            for path, summary in self.project.files.items():
                for call in summary.calls:
                    for keyword in call.given[1] if call.given is not None else ():
                        if keyword not in call.falsy:
                            self._keywords.setdefault(keyword, []).append((path, call))
        return self._keywords

    def keywords_passed(self, path: str, function: str) -> int | None:
        """The most keywords a call of ``function`` (of ``path``) passes that it takes by no name: what
        its ``**`` parameter holds (ConvNeXt's ``metric_logger.update(loss=loss_value)``, one). None where
        no call resolves to it, or one passes ``*``/``**`` (any number)."""
        calls = self.calls_of((path, function))  # type: ignore[attr-defined]
        if not calls or any(call.given is None for _, call in calls):
            return None
        named = set(self.project.params.get(path, {}).get(function, ()))
        return max(sum(keyword not in named for keyword in call.given[1]) for _, call in calls)  # type: ignore[index]

    def called_only_in(self, path: str, function: str) -> bool:
        """Is every call of ``function`` (of ``path``) the project makes in ``path`` itself, and
        is there one? (Its own file then sees every value it is passed.)"""
        calls = self.calls_of((path, function))  # type: ignore[attr-defined]
        return bool(calls) and all(caller == path for caller, _ in calls)

    def always_built(self, path: str, cls: str, field: str, position: int) -> bool:
        """Does every construction of config class ``cls`` (of ``path``) in the project pass its
        own ``field`` (by name, at ``position``, or possibly through ``*args``/``**kwargs``), and
        is there one? ``GPT(GPTConfig(vocab_size=50304))`` in the training script: the field's
        default is no run's size."""
        built = [call for caller, call in self.constructions() if self.project.class_of(call.target, caller, 1) == (path, cls)]
        return bool(built) and all(call.given is None or field in call.given[1] or call.given[0] > position for call in built)

    def constructions(self) -> list[tuple[str, CallSite]]:
        """The calls of the project that may build a class (a capitalised name, here or imported): found once."""
        if self._built is None:
            self._built = [(path, call) for path, summary in self.project.files.items() for call in summary.calls
                           if call.target[0] in ("import", "local") and str(call.target[-1]).rpartition(".")[2][:1].isupper()]
        return self._built

    def handed_to_unresolved(self) -> frozenset[tuple[str, str]]:
        """The project's classes (file, class key) an object of which some call the join resolves to
        nothing is handed (``CallSite.args``): a library's function may call it. Found once."""
        if self._handed_away is None:
            project = self.project
            self._handed_away = frozenset(found for path, summary in project.files.items() for call in summary.calls
                                          if call.args and not project.callees(call.target, path)
                                          for _, ref in call.args for found in (project.class_of(ref, path, 1),) if found is not None)
        return self._handed_away

    def unresolved_named(self, name: str) -> list[tuple[str, CallSite]]:
        """The project's calls the join resolves to nothing whose name called is ``name`` (every
        one, for ""), with their files: each may be a call of a function of that name."""
        if self._unresolved is None:
            self._unresolved = {}
            for path, summary in self.project.files.items():
                for call in summary.calls:
                    if not self.project.callees(call.target, path):
                        self._unresolved.setdefault(str(call.target[-1]).rpartition(".")[2], []).append((path, call))
        if not name:
            return [each for calls in self._unresolved.values() for each in calls]
        return self._unresolved.get(name, [])

    def _unfollowed_named(self, name: str) -> list[tuple[str, str, str, str]]:
        if self._unfollowed is None:
            self._unfollowed = {}
            for path, summary in self.project.files.items():
                for called, keyword, caller, own in summary.unfollowed:
                    self._unfollowed.setdefault(called, []).append((path, keyword, caller, own))
        if not name:
            return [each for entries in self._unfollowed.values() for each in entries]
        return self._unfollowed.get(name, [])

    def _a_test(self, path: str, caller: str) -> bool:
        """Is ``caller`` (in ``path``) a test, whose calls are no part of a run: a function of a
        ``test_*.py`` file, or ``test()``/``test_*`` called by no code of the project but once at
        module level (``if __name__ == "__main__": test()``). A ``test(model, loader)`` that a
        training script runs after each epoch is an evaluation of the run, not a test."""
        name = caller.rpartition(".")[2]
        if path.rpartition("/")[2].startswith("test_"):
            return True
        if name != "test" and not name.startswith("test_"):
            return False
        return all(not call.caller and call.loop is None and not call.within for _, call in self.calls_of((path, caller)))

    def _subclasses_construct_through(self, path: str, owner: str) -> bool:
        """Does every subclass of ``owner`` (of ``path``) in the project reach its ``__init__`` by a call the index
        holds: none of its own (its constructions run the base's: OpenNMT's ``TransformerLMDecoderLayer``), or one
        calling ``super().__init__(...)`` (``TransformerDecoderLayer``: ``super().__init__(..., num_experts=num_experts)``)?
        Then what a subclass passes is among the calls followed."""
        for sub_path, sub in self.project.subclasses(path, owner):
            summary = self.project.files.get(sub_path)
            cls = self.project.classes.get(sub_path, {}).get(sub)
            init = f"{sub}.__init__"
            if summary is None or cls is None or "__init__" in cls.methods \
                    and not any(c.caller == init and c.target[0] == "super" and c.target[-1] == "__init__" for c in summary.calls):
                return False  # (its own `__init__`, and no `super().__init__(...)` seen in it: it may pass anything)
        return True

    def _kept_unset(self, path: str, owner: str, param: str) -> bool:
        """Has every subclass of ``owner`` (of ``path``) in the project an ``__init__`` of its own (whose ``super().__init__(...)``
        the join follows), none setting on ``self`` an attribute the base's ``__init__`` keeps from ``param``
        (``ClassSummary.kept``, ``sets``)? Then what the base holds is what those calls pass."""
        base = self.project.classes.get(path, {}).get(owner)
        if base is None:
            return False
        attributes = {attribute for attribute, kept_from in base.kept if kept_from == param}
        for sub_path, sub in self.project.subclasses(path, owner):
            cls = self.project.classes.get(sub_path, {}).get(sub)
            # (`class LoudLoss(AuxLoss): pass`: built by no call seen here, it passes whatever its users give the base)
            if cls is None or "__init__" not in cls.methods:
                return False
            if attributes & set(cls.sets):
                return False  # (`self.block_ngram_repeat = 3` after `super().__init__(...)`: the subclass's own value)
        return True

    def _inheriting_inits(self, path: str, call: CallSite) -> list[tuple[str, str]]:
        """The ``__init__`` of each subclass a ``cls(...)`` in a classmethod (``call.caller``) may build: one that
        inherits that classmethod, whose own ``__init__`` (or an intermediate base's) then runs."""
        owner, _, method = call.caller.rpartition(".")
        found = []
        for sub_path, sub in self.project.subclasses(path, owner) if owner else ():
            init = self.project.method(sub_path, sub, "__init__")
            if self.project.method(sub_path, sub, method) == (path, call.caller) and init is not None and init != (path, f"{owner}.__init__"):
                found.append(init)
        return found

    def _settings_passing(self, path: str, function: str, param: str) -> str:
        """"the run's `use_amp` setting, off by default" where a call of ``function`` passes ``param`` a setting
        of the run (``CallSite.own_settings``), "`Translator()`'s `replace_unk`, off wherever it is built" where one
        passes an attribute its class keeps from a constructor parameter (``CallSite.kept_params``); "" where none does."""
        calls = self.calls_of((path, function))
        wheres = [(call, self._explicit(call, (path, function), param)) for _, call in calls]  # type: ignore[attr-defined]
        settings = sorted({setting for call, where in wheres for at, _, setting in call.own_settings if at == where})
        kept = sorted({(init.rpartition(".")[0], kept_param) for call, where in wheres for at, init, kept_param, _ in call.kept_params if at == where})
        words = [f"the run's {', '.join(f'`{n}`' for n in settings)} setting, off by default"] if settings else []
        words += [f"`{owner}()`'s `{name}`, off wherever it is built" for owner, name in kept]
        return " or ".join(words)

    def _kept_param(self, call: CallSite, where: int | str | None) -> tuple[str, str] | None:
        """``(Cls.__init__, parameter)`` where ``call`` passes at ``where`` an attribute its caller's class keeps
        from that constructor parameter (``CallSite.kept_params``) and no file of the project sets on an object
        (``FileSummary.object_sets``: ``translator.replace_unk = True`` in a script); None otherwise."""
        found = next(((init, param, attribute) for at, init, param, attribute in call.kept_params if at == where), None)
        if found is None or found[2] in self._object_sets():
            return None
        return found[0], found[1]

    def _object_sets(self) -> frozenset[str]:
        """Every attribute some file of the project assigns on an object other than ``self``."""
        return self.kept("object_sets", lambda: frozenset(name for summary in self.project.files.values() for name in summary.object_sets))  # type: ignore[attr-defined]
