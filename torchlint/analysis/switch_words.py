"""The plain data of a switch a finding runs behind, and its words: what the join and the settling
step read without libcst (the light path of a file that never mentions torch imports no libcst)."""

from __future__ import annotations

import operator

# (function key, parameter, test, constant, default): a test a line runs only where it holds (``literal_tests.compared``:
# "truth", "not" or an ``operator`` name, and the constant compared with), and the parameter's literal default, (value,) or ()
Flag = tuple[str, str, str, object, tuple[object, ...]]
# (setting, test as written, whether it must be true, default): a setting of the run a line runs only with
# (``if args.torchcompile:``: "torchcompile", "args.torchcompile", True) and its literal default where the
# line's file gives one, (value,), else () for the join to look up in the project (``Guards.settings_required``)
SettingTest = tuple[str, str, bool, tuple[object, ...]]

# keywords only an option's declaration passes: `group.add("--x", default=0)` with one is configargparse's `add_argument`
# (`Constants.argparse_defaults`, the light summary's `_setting_values`)
OPTION_KEYWORDS = frozenset({"default", "type", "help", "action", "choices", "dest", "required", "nargs"})


def switch_off_words(owner: str, param: str, optional: bool) -> str:
    """The words of a constructor's switch off by default (``Guards.switch_words``)."""
    if not optional:
        return f"only with `{param}=True` passed to `{owner}()` (off by default)"
    return f"only where `{param}` is given to `{owner}()` (off by default)"


def switch_set_words(owner: str, param: str, optional: bool) -> str:
    """The same switch where a construction in the project passes a value that may turn it on (a
    config's ``config.dyn_discrete``, an argparse option): its default is no run's, so not said."""
    return f"only when `{param}` is set on `{owner}()`" if not optional else f"only where `{param}` is given to `{owner}()`"


def setting_off_words(test: SettingTest, default: object) -> str:
    """Words for what runs only with a setting of the run that ``default`` leaves off; "" where it is on."""
    _, shown, wanted, _ = test
    if bool(default) is wanted:
        return ""
    return f"only with `{shown}`, off by default" if wanted else f"only without `{shown}`, on by default"


def holds(test: str, constant: object, value: object) -> bool | None:
    """Does ``compared``'s ``test`` hold for ``value``? None where Python would raise (``None > 0``:
    the branch raises, it is not skipped)."""
    if test == "truth":
        return bool(value)
    if test == "not":
        return not value
    if test in ("in", "not_in"):
        return (value in constant) is (test == "in")  # type: ignore[operator]
    try:
        return bool(getattr(operator, test)(value, constant))
    except TypeError:
        return None
