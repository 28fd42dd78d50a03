"""The project's index over the checked files' summaries: their functions, classes and parameters by
path, the files a module name may be (nearest first, relative imports by directory), and the parameters a
call fills or leaves out; :class:`torchlint.analysis.project.Project` resolves names on it."""

from __future__ import annotations

import os
from collections.abc import Iterable

from torchlint.analysis.summary import _NOT_PROJECT, CallSite, FileSummary, Ref

_BOUND = frozenset({"method", "object", "super"})  # calls whose first parameter (`self`) is bound, not passed


class ProjectIndex:
    """The checked files' summaries, indexed: what name resolution reads."""

    def __init__(self, summaries: Iterable[FileSummary]) -> None:
        self.files = {s.path: s for s in summaries}
        self.modules: dict[str, list[str]] = {}
        for path in self.files:
            for name in _module_names(path):
                self.modules.setdefault(name, []).append(path)
        self.classes = {path: {c.key: c for c in s.classes} for path, s in self.files.items()}
        self.functions = {path: set(s.functions) for path, s in self.files.items()}
        self.params = {path: dict(s.params) for path, s in self.files.items()}
        self.returns = {(path, key): refs for path, s in self.files.items() for key, refs in s.returns}
        # (file, function key, parameter) -> the classes of objects callers pass there
        self.passed: dict[tuple[str, str, str], list[tuple[Ref, str]]] = {}
        self._callees_memo: dict[tuple[Ref, str], list[tuple[str, str]]] = {}
        # what a parameter may hold (``("passed", ...)``): chains of parameters passed on are resolved once each
        self._classes_memo: dict[tuple[Ref, str, int, bool], list[tuple[str, str]]] = {}
        self._resolving: set[tuple[Ref, str, int, bool]] = set()  # being resolved now (a cycle meets them)
        self._cut: set[tuple[Ref, str, int, bool]] = set()  # met in a cycle: what depends on them is not memoised
        # (module, importer's directory) -> its files nearest first: every reference asks
        # again, and a name every project has (`utils`, `model`) has a file in each of them
        self._nearest_memo: dict[tuple[str, str], list[str]] = {}
        self._module_memo: dict[tuple[str, str], bool] = {}
        self._split_memo: dict[tuple[int, str, str], list[tuple[str, list[str]]]] = {}  # (level, dotted name, importer)
        self._derived: dict[tuple[str, str], list[tuple[str, str]]] | None = None  # a class -> the classes naming it a base
        # (file, function key, attribute) of a function a class attribute binds, found by `method`: a call of that
        # attribute on an object passes the object as the function's first parameter, whatever its name
        self._bound_aliases: set[tuple[str, str, str]] = set()
        # (file, class key) of the classes some code of the project builds (``join_params.constructed``,
        # set by the join); None: not known (any may be built), so every method may run
        self.built: frozenset[tuple[str, str]] | None = None
        self._off_defaults_memo: dict[str, dict[tuple[str, str], bool]] = {}  # file -> (function, parameter) -> default None
        self._calls_into: dict[tuple[str, str], list[tuple[str, CallSite]]] | None = None  # callee -> its calls in the project

    def omitted(self, call: CallSite, callee: tuple[str, str]) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` leaves out (or passes None)."""
        if call.given is None:
            return frozenset()
        names = self.parameters(call, callee)
        positional, keywords = call.given
        return frozenset(names[positional:]) - set(keywords)

    def none_passed(self, call: CallSite, callee: tuple[str, str], path: str, caller_omitted: frozenset[str] | None = None) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` may leave None (``StepInfo.omitted``, whose ``if p is None:``
        branches run): left out or a literal None; a run setting whose argparse default is None
        (``CallSite.maybe_none``: ConvNeXt's ``args.clip_grad``); or the caller's own parameter, never bound again
        (``FileSummary.off_defaults``), handed on where the caller's reach leaves it out and it defaults to None
        (``caller_omitted``), or where a call of the caller in the project passes None or such a setting there
        (ConvNeXt's ``train_one_epoch(..., args.clip_grad)`` handing ``max_norm`` on as ``clip_grad``)."""
        found = set(self.omitted(call, callee))
        if not call.maybe_none and not call.own_params:
            return frozenset(found)
        names = self.parameters(call, callee)
        filled = {where: where if isinstance(where, str) else names[where] for where in (*call.maybe_none, *(w for w, _ in call.own_params))
                  if isinstance(where, str) or where < len(names)}
        found.update(filled[where] for where in call.maybe_none if where in filled)
        for where, own in call.own_params:
            default = self._off_defaults(path).get((call.caller, own)) if where in filled else None
            if default is None:
                continue  # (bound again, or no default off: what it holds is the caller's own)
            if default and caller_omitted is not None and own in caller_omitted or self._handed_none(path, call.caller, own, default):
                found.add(filled[where])
        return frozenset(found)

    def _off_defaults(self, path: str) -> dict[tuple[str, str], bool]:
        memo = self._off_defaults_memo
        if path not in memo:
            memo[path] = {(key, name): none for key, name, none in self.files[path].off_defaults}
        return memo[path]

    def _handed_none(self, path: str, function: str, param: str, none_default: bool) -> bool:
        """Does a call of ``function`` in the project pass None or a setting defaulting to None to ``param``, or
        leave it out where it defaults to None (``none_default``)? (One level: what those calls hand on is not followed.)"""
        calls = self._calls_into
        if calls is None:
            calls = self._calls_into = {}
            for where, summary in self.files.items():
                for call in summary.calls:
                    for callee in self.callees(call.target, where):  # type: ignore[attr-defined]  # (Project's)
                        calls.setdefault(callee, []).append((where, call))
        for where, call in calls.get((path, function), ()):
            names = self.parameters(call, (path, function))
            if param not in self.omitted(call, (path, function)) and not any(
                    w == param if isinstance(w, str) else w < len(names) and names[w] == param for w in call.maybe_none):
                continue
            explicit = {*call.maybe_none, *(w for w, value in call.literals if value is None)}
            if none_default or any(w == param if isinstance(w, str) else w < len(names) and names[w] == param for w in explicit):
                return True
        return False

    def passes(self, call: CallSite, callee: tuple[str, str], caller: tuple[str, str] | None = None,
               caller_passed: frozenset[str] | None = None) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` passes a value that may be true (not
        left out, not a literal None, False, 0 or ""); ``{"*"}`` where ``*args``/``**kwargs``
        may pass any. A call that hands on its caller's own ``**kwargs`` passes what it names,
        the keys the caller sets there, and what the caller was passed beyond its own
        parameters (``caller_passed``, from the reach of ``caller``; unknown: any)."""
        names = self.parameters(call, callee)
        off = {where if isinstance(where, str) else names[where] for where in call.falsy if isinstance(where, str) or where < len(names)}
        if call.given is None:
            if call.forwards is None or caller is None or caller_passed is None:
                return frozenset({"*"})
            own = set(self.params.get(caller[0], {}).get(caller[1], ()))
            named = {where if isinstance(where, str) else names[where] for where in call.forwards if isinstance(where, str) or where < len(names)}
            return frozenset((named | (caller_passed - own)) - off)
        positional, keywords = call.given
        given = {*names[:positional], *keywords} - off
        if caller_passed is not None and "*" not in caller_passed and call.own_params:
            # `block(x, kv_cache)` in a `forward(idx, kv_cache=None)` its step called as `model(x)`:
            # handing on a parameter the caller was not passed passes nothing
            given -= {where if isinstance(where, str) else names[where] for where, name in call.own_params
                      if name not in caller_passed and (isinstance(where, str) or where < len(names))}
        return frozenset(given)

    def constants(self, call: CallSite, callee: tuple[str, str]) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` passes a value the same on every step."""
        if not call.constants:
            return frozenset()
        names = self.parameters(call, callee)
        return frozenset(where if isinstance(where, str) else names[where] for where in call.constants
                         if isinstance(where, str) or where < len(names))

    def uploads(self, call: CallSite, callee: tuple[str, str]) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` passes a batch it just copied to the device."""
        if not call.uploads:
            return frozenset()
        names = self.parameters(call, callee)
        return frozenset(where if isinstance(where, str) else names[where] for where in call.uploads
                         if isinstance(where, str) or where < len(names))

    def forwarded_uploads(self, call: CallSite, callee: tuple[str, str], uploaded: frozenset[str]) -> frozenset[str]:
        """The parameters of ``callee`` that ``call`` passes its caller's own parameters in
        ``uploaded`` (batches some per-step call copied to the device), unchanged."""
        if not uploaded or not call.own_params:
            return frozenset()
        names = self.parameters(call, callee)
        return frozenset(where if isinstance(where, str) else names[where] for where, name in call.own_params
                         if name in uploaded and (isinstance(where, str) or where < len(names)))

    def parameters(self, call: CallSite, callee: tuple[str, str], classmethods: bool = False) -> tuple[str, ...]:
        """The callee's parameters as the call's arguments fill them (``self`` left out). With ``classmethods``, a
        method's first parameter ``cls`` too, bound on its class as well (``Stack.from_opt(opt)`` fills ``opt``: the
        settings a call passes, ``SettingDefaults``; the reach the join follows keeps the older reading, whose
        correction reaches far more code, OpenNMT's whole translator, than is measured yet)."""
        names = self.params[callee[0]].get(callee[1], ())
        bound = call.target[0] in _BOUND or callee[1].rsplit(".", 1)[-1] in ("forward", "__call__")
        if classmethods and not bound and names[:1] == ("cls",) and "." in callee[1]:
            return names[1:]
        return names[self._offset(call.target, names, bound, callee):]

    def _offset(self, target: Ref, names: tuple[str, ...], bound: bool, callee: tuple[str, str]) -> int:
        """How many of the callee's first parameters no argument of a call of ``target`` fills (``_implicit``),
        and the object a call of a class attribute bound to a function passes it (``model.decode(mel)``:
        ``decode(model, mel)``)."""
        if bound and names and target[0] in _BOUND and (*callee, target[2]) in self._bound_aliases:
            return 1
        return _implicit(names, bound, callee)

    def _record_arguments(self, call: CallSite, path: str, callee: tuple[str, str], bound: bool) -> bool:
        """Note which parameter of ``callee`` each object argument of ``call`` fills; True when
        something new was noted."""
        names = self.params[callee[0]].get(callee[1], ())
        offset = self._offset(call.target, names, bound, callee)
        grown = False
        for where, owner in call.args:
            index = where + offset if isinstance(where, int) else None
            name = names[index] if index is not None and index < len(names) else where
            if isinstance(name, str):
                known = self.passed.setdefault((*callee, name), [])
                if (owner, path) not in known:
                    known.append((owner, path))
                    grown = True
        return grown

    def _forget(self) -> None:
        """Drop what was resolved from the arguments recorded so far: more may be recorded."""
        self._callees_memo.clear()
        self._classes_memo.clear()
        self._resolving.clear()
        self._cut.clear()

    # --- modules ---------------------------------------------------------------------
    def module_file(self, module: str, importer: str, level: int = 0) -> str | None:
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *module.split(".")) if module else base
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if candidate in self.files:
                    return candidate
            return None
        candidates = self.module_files(module, importer)
        return candidates[0] if candidates else None

    def module_files(self, module: str, importer: str) -> list[str]:
        """The files an absolute import of ``module`` may mean, nearest the importer first.
        Several files can be module ``model`` (``model/__init__.py``, ``utils/model.py``);
        a module does not import itself, so the importer comes last."""
        candidates = self.modules.get(module)
        if not candidates:
            return []
        if len(candidates) == 1:
            return candidates
        directory = os.path.dirname(importer)  # another file shares with the importer what it shares with its directory
        nearest = self._nearest_memo.get((module, directory))
        if nearest is None:
            nearest = self._nearest_memo[(module, directory)] = sorted(candidates, key=lambda c: -len(os.path.commonpath([c, directory])))
        return [c for c in nearest if c != importer] + [importer] if importer in candidates else nearest

    def _split(self, ref: Ref, importer: str) -> list[tuple[str, list[str]]]:
        """(file, remaining name parts) for each way an import reference can split into a
        project module and a name inside it, longest module first (not to be changed: memoised,
        since every class, base and call named through an import asks again)."""
        _, level, name = ref
        key = (level, name, importer)
        found = self._split_memo.get(key)
        if found is None:
            found = self._split_memo[key] = self._split_anew(level, name, importer)
        return found

    def _split_anew(self, level: int, name: str, importer: str) -> list[tuple[str, list[str]]]:
        parts = name.split(".") if name else []
        found = []
        for cut in range(len(parts), -1, -1):
            module, rest = ".".join(parts[:cut]), parts[cut:]
            if not rest or (not module and not level):
                continue
            paths = self.module_files(module, importer) if not level else [self.module_file(module, importer, level)]
            found.extend((path, rest) for path in paths if path is not None)
        if not found and not level and len(parts) > 2 and parts[0] not in _NOT_PROJECT and parts[0] not in self.modules:
            found = self._split_rooted_elsewhere(parts, importer)
        return found

    def _split_rooted_elsewhere(self, parts: list[str], importer: str) -> list[tuple[str, list[str]]]:
        """A package imported under a root the checked tree lacks (a monorepo's
        ``deeplearning.ssl.moco.builder`` for the checked ``moco/builder.py``): the longest
        tail of two or more parts that names a project module. The callers still ask that
        the name looked up is defined there, and no known library's root is tried."""
        for start in range(1, len(parts) - 2):
            for cut in range(len(parts), start + 1, -1):
                paths = self.module_files(".".join(parts[start:cut]), importer)
                if paths:
                    return [(path, parts[cut:]) for path in paths if parts[cut:]]
        return []


def _implicit(names: tuple[str, ...], bound: bool, callee: tuple[str, str]) -> int:
    """How many of the callee's first parameters no argument fills: a bound ``self``/``cls``,
    or the ``ctx`` autograd passes an ``autograd.Function``'s ``forward`` (``Fn.apply(x, blocks)``
    fills ``x`` and ``blocks``)."""
    if bound and names[:1] in (("self",), ("cls",)):
        return 1
    return 1 if names[:1] == ("ctx",) and callee[1].rsplit(".", 1)[-1] == "forward" else 0


def _module_names(path: str) -> list[str]:
    """Every dotted name ``path`` could be imported as, from each ancestor directory:
    ``/p/src/pkg/losses.py`` → ``losses``, ``pkg.losses``, ``src.pkg.losses``..."""
    directory, filename = os.path.split(path)
    stem = filename[:-3] if filename.endswith(".py") else filename
    parts = [] if stem == "__init__" else [stem]
    names = []
    for _ in range(8):
        if parts:
            names.append(".".join(parts))
        directory, name = os.path.split(directory)
        if not name or not name.isidentifier():
            break
        parts.insert(0, name)
    return names


def module_tails(paths: Iterable[str]) -> frozenset[str]:
    """The last part of every module name of the files at ``paths`` (``_module_names``): a file's
    stem, a package's directory (its ``__init__.py``), each dot-separated piece of either. An
    absolute import none of whose parts is among them names no module of those files: no
    ``_split`` of it finds one, so the join resolves nothing through it."""
    tails: set[str] = set()
    for path in paths:
        directory, filename = os.path.split(path)
        stem = filename[:-3] if filename.endswith(".py") else filename
        tails.update((os.path.basename(directory) if stem == "__init__" else stem).split("."))
    return frozenset(tails)


def never_resolved(target: Ref, tails: frozenset[str]) -> bool:
    """Is ``target`` a call the join of a project whose ``module_tails`` are within ``tails`` never
    follows: an absolute import none of whose parts is a tail, or a method of an object of a class
    (or made by a factory) so imported (``Project.callees`` finds them only through ``_split``)."""
    ref = import_judged(target)
    return ref[0] == "import" and not ref[1] and tails.isdisjoint(ref[2].split("."))


def import_judged(target: Ref) -> Ref:
    """What ``never_resolved`` judges ``target`` by: itself, or its object's class, or the factory that made it."""
    if target[0] == "object":
        return target[1][1] if target[1][0] == "returned" else target[1]
    return target
