"""What a setting of a config object passed down the project's calls defaults to, from the files
of the callers (pure data, over the project's summaries, ``FileSummary.settings``): ``args.num_workers``
in ``def make_loaders(args)`` (TL201's integers), ``CoCaLoss(clip_loss_weight=args.coca_contrastive_loss_weight)``
in ``create_loss(args)`` (any literal default: a float, a bool, None, for a flag's test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite

MAX_DEPTH = 4  # a namespace (or a flag) handed on from function to function: main -> build -> make_loaders
_UNKNOWN = object()  # a setting's default no file gives (None is a default argparse gives)


class SettingValues:
    """A mixin of SettingDefaults, which supplies the project, its calls by callee and its kept answers."""

    project: Project
    calls_of: Callable[[tuple[str, str]], list[tuple[str, CallSite]]]
    kept: Callable[[str, Callable[[], Any]], Any]

    def passed_default(self, path: str, function: str, param: str, setting: str) -> int | None:
        """The default of ``setting`` on the object every call of ``function`` (in ``path``)
        passes as ``param``: where each call's file defines it (an argparse ``default=``), or
        else where the project's files that define it agree. None when a call passes
        something else, leaves the parameter out, or no call is found: the run's choice."""
        if not function:  # a config object imported from the project: what its assignments there say
            return self.assigned_default(setting)
        values = self._passed(path, function, param, setting, 0, True)
        value = values.pop() if len(values) == 1 else None
        return value if type(value) is int else None

    def assigned_default(self, setting: str) -> int | None:
        """The integer every file of the project that assigns ``setting`` to a config object gives it
        (GraphGym's ``cfg.num_workers = 0`` in ``set_cfg``), argparse defaults of that name included,
        and there is one; None where one gives another value, or something other than an integer."""
        values = {value for summary in self.project.files.values() for name, value in summary.assigned if name == setting}
        # (TL201's worker counts: a float or a flag default is none)
        values |= {value for summary in self.project.files.values() for name, value in summary.settings if name == setting and type(value) is int}
        return values.pop() if len(values) == 1 and None not in values else None

    def _setting_passed(self, path: str, call: CallSite, where: int | str) -> tuple[object] | None:
        """The default of the setting ``call`` (in ``path``) passes at ``where``, a setting of its
        caller's own config parameter, or of a namespace the caller parses (``CallSite.own_settings``), as a
        1-tuple: the one default the files of the caller's callers (or of the parser) give it (a float, a bool, None too). None where it is not
        one, the defaults differ or are not known, or a file of the project assigns the setting
        (``args.lr = 0.1``: no longer the parser's default)."""
        found = next(((param, setting) for at, param, setting in call.own_settings if at == where), None)
        if found is None or not call.caller or found[1] in self._assigned_settings():
            return None
        # (`args = get_args()` in the caller itself, `""`: the default where the run parses it)
        values = self._passed(path, call.caller, found[0], found[1], 0, False) if found[0] else {self._defined(path, found[1], False)}
        if values == {_UNKNOWN} and found[0] and not self.calls_of((path, call.caller)):
            # (a function no call site reaches, OpenNMT's `from_opt` picked from a registry by a string: the project's
            # one parser default, where every file that defines the setting agrees)
            values = {self._defined(path, found[1], False)}
        return (values.pop(),) if len(values) == 1 and _UNKNOWN not in values else None

    def run_flag_off(self, path: str, flags: tuple[tuple[str, bool, bool], ...], modes: bool = False) -> str | None:
        """Words for a call (in ``path``) made only with one of the run's ``flags`` on (``CallSite.run_flags``)
        where that setting is off by default: its default in ``path``, or the one every file of the project
        that parses it gives (``args = get_args()``, another module's parser), is a literal False, None, 0
        or "" (a `store_true` flag, a `str2bool` option at `default=False`), and no file assigns it. Only a
        flag tested in a loop (a part of each step) counts, unless ``modes``: a construction's, where any does."""
        for name, off_here, in_loop in flags:
            if not (in_loop or modes):
                continue  # (`if args.do_train:` around the whole loop: the mode the run is launched in)
            setting = name.rpartition(".")[2]
            if setting in self._assigned_settings():
                continue  # (`args.probe = True` in some file: no longer the parser's default)
            default = False if off_here else self._defined(path, setting, False)
            if default is not _UNKNOWN and not default:
                return f"only when `{name}` is turned on, a setting of the run that is off by default"
        return None

    def _assigned_settings(self) -> frozenset[str]:
        """The settings some file of the project assigns a config object (``FileSummary.assigned``)."""
        return self.kept("assigned", lambda: frozenset(name for summary in self.project.files.values() for name, _ in summary.assigned))

    def _passed(self, path: str, function: str, param: str, setting: str, depth: int, ints: bool) -> set[object]:
        """The defaults of ``setting`` the calls of ``function`` give the namespace they pass as
        ``param`` (``_UNKNOWN`` for one not known); with ``ints``, integer defaults only."""
        calls = self.calls_of((path, function))
        if not calls or depth > MAX_DEPTH:
            return {_UNKNOWN}
        found: set[object] = set()
        for caller_path, call in calls:
            filled = self._filled_by(call, (path, function), param)
            if filled is None:
                found.add(_UNKNOWN)  # left out (its default is no namespace), or through `*args`/`**kwargs`
            elif filled[1] is not None and call.caller:  # the caller's own parameter, handed on: its callers pass it
                found |= self._passed(caller_path, call.caller, filled[1], setting, depth + 1, ints)
            else:
                found.add(self._defined(caller_path, setting, ints))
        return found

    def _filled_by(self, call: CallSite, callee: tuple[str, str], param: str) -> tuple[int | str, str | None] | None:
        """Where ``call`` passes ``param`` (a position or keyword), and the caller's own
        parameter it passes there, if it is one; None when it does not pass it."""
        if call.given is None:
            return None
        names = self.project.parameters(call, callee, classmethods=True)
        if callee[1].endswith(".__init__") and names[:1] == ("self",):
            names = names[1:]  # a construction: `self` is the object made
        positional, keywords = call.given
        where: int | str | None = param if param in keywords else next((i for i, n in enumerate(names[:positional]) if n == param), None)
        if where is None:
            return None
        return where, dict(call.own_params).get(where)

    def _defined(self, path: str, setting: str, ints: bool) -> object:
        """``defined_default``'s value, ``_UNKNOWN`` where none is known."""
        found = defined_default(self.project, path, setting, ints)
        return found[0] if found is not None else _UNKNOWN


def defined_default(project: Project, path: str, setting: str, ints: bool = False) -> tuple[object] | None:
    """The setting's default in file ``path``, else the one every file of the project that
    defines it gives (an options module's parser, the script importing it), as a 1-tuple; with
    ``ints``, integer defaults only. None where none is known."""
    summary = project.files.get(path)
    here = _defaults(summary.settings, ints) if summary is not None else {}
    if setting in here:
        return (here[setting],)
    everywhere = {(type(d[setting]), d[setting]) for s in project.files.values() if setting in (d := _defaults(s.settings, ints))}
    return (everywhere.pop()[1],) if len(everywhere) == 1 else None


def _defaults(settings: tuple[tuple[str, object], ...], ints: bool) -> dict[str, object]:
    """``FileSummary.settings`` by name; with ``ints``, the integer ones only (TL201's worker counts)."""
    return {name: value for name, value in settings if not ints or type(value) is int}
