"""Whether torch.compile runs at all in a run left at its defaults: a compile call made only with
a setting of the run that is off by default (open_clip's ``--torchcompile``, a ``store_true``
flag) traces nothing unless the run opts in, so what it would trace breaks no graph at the
defaults. Pure data over the summaries (``FileSummary.compiled_guards``, ``CallSite.setting``):
:mod:`torchlint.analysis.compiled_reach` carries the words to each function it reaches."""

from __future__ import annotations

from torchlint.analysis.project import Project
from torchlint.analysis.setting_values import defined_default
from torchlint.analysis.switch_words import SettingTest, setting_off_words
from torchlint.analysis.test_paths import test_suite_path


def compile_switch(project: Project, path: str, guard: tuple[tuple[SettingTest, ...], str]) -> str:
    """Words for a root of ``path`` compiled only with a setting off by default ("only with
    `args.torchcompile`, off by default"): the compile call's own test, else the one every call of
    the function making it is made under (open_clip's ``task.compile()`` under ``if
    args.torchcompile:``), test code aside; "" where it may compile at the defaults."""
    tests, holder = guard
    words = _off(project, path, tests)
    if words or not holder:
        return words
    found = [_off(project, where, settings) for where, settings in _calls_of(project, path, holder)]
    return found[0] if found and all(found) else ""


def _off(project: Project, path: str, tests: tuple[SettingTest, ...]) -> str:
    """The words for the first of ``tests`` whose setting is off at its default, in ``path`` or
    where the project defines it; "" where none is."""
    for test in tests:
        setting = test[0]
        default = test[3] or defined_default(project, path, setting)
        words = setting_off_words(test, default[0]) if default else ""
        # (`args.compile = True` in some file: no longer the parser's default; minimind's LoRA trainer setting
        # `args.use_compile = 0` turns nothing on)
        if words and any(name == setting and (value is None or setting_off_words(test, value) == "")
                         for summary in project.files.values() for name, value in summary.assigned):
            continue
        if words:
            return words
    return ""


def _calls_of(project: Project, path: str, holder: str) -> list[tuple[str, tuple[SettingTest, ...]]]:
    """The calls of the function ``holder`` of ``path`` in the project (``FileSummary.compile_calls``:
    those of a function named to compile), a test's aside, with the setting each is made only with; one
    the join cannot resolve, of that name, may be one too. None where its name is used as a value."""
    name = holder.rpartition(".")[2]
    if "compile" not in name.lower() or any(name in summary.valued for summary in project.files.values()):
        return []  # (its calls are not recorded, or `callbacks.append(self.compile)`: who calls it, under what, is not seen)
    found = []
    for where, summary in project.files.items():
        if test_suite_path(where):
            continue  # a test compiles on toy inputs to see that it compiles: no run's setting
        for called, target, caller, settings in summary.compile_calls:
            if called != name or caller.rpartition(".")[2].startswith("test"):
                continue
            callees = project.callees(target, where) if target is not None else []
            if (path, holder) in callees or not callees and (target is None or target[0] != "import"):
                found.append((where, settings))  # (unresolved: `obj.compile()` of an object of no known class may be it)
    return found
