"""The ``torchlint`` command line: check, rules, rule (and profile)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from torchlint import __version__, catalogue
from torchlint.config import ConfigError, load_config
from torchlint.engine import LintResult, MissingPathError, lint_paths
from torchlint.engine.fixes import ChangedOnDiskError, write_atomically
from torchlint.report import json as json_report
from torchlint.report import text as text_report

CONTEXT = {"help_option_names": ["-h", "--help"]}


class UsageProblem(click.ClickException):
    """A problem with what the user asked for: exit status 2."""

    exit_code = 2

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"torchlint: error: {self.format_message()}", err=True)


def _codes(value: str | None) -> tuple[str, ...] | None:
    if not value:
        return None
    return tuple(code.strip().upper() for code in value.split(",") if code.strip())


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="torchlint")
def main() -> None:
    """Find PyTorch performance problems, and measure what they cost."""


@main.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", help="Rules to run (codes or prefixes, comma-separated; ALL for every rule).")
@click.option("--extend-select", help="Rules to run on top of the selection.")
@click.option("--ignore", help="Rules not to run.")
@click.option("--exclude", multiple=True, help="Glob of paths to skip (repeatable; replaces the config's).")
@click.option("--tensor-core-multiple", type=int, help="Alignment TL402 asks for (default 8; 64 for A100).")
@click.option("--min-dimension", type=int, help="TL402 ignores sizes below this (default 32).")
@click.option("--target-torch", help="Oldest torch version the code must run on (default 2.4).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), help="Read this pyproject.toml instead of the nearest one.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--fix", is_flag=True, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, apply unsafe fixes too.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude patterns to files named on the command line too.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when problems are found.")
@click.option("--debug", is_flag=True, help="Let a crashing check raise instead of reporting it.")
def check(paths: tuple[Path, ...], select: str | None, extend_select: str | None, ignore: str | None, exclude: tuple[str, ...], tensor_core_multiple: int | None, min_dimension: int | None, target_torch: str | None, config_file: Path | None, output_format: str, fix: bool, unsafe_fixes: bool, diff: bool, force_exclude: bool, exit_zero: bool, debug: bool) -> None:
    """Check PATHS (files or directories; default: the current directory)."""
    targets = list(paths) or [Path(".")]
    overrides = {
        "select": _codes(select), "extend-select": _codes(extend_select), "ignore": _codes(ignore),
        "exclude": exclude or None, "tensor-core-multiple": tensor_core_multiple,
        "min-dimension": min_dimension, "target-torch": target_torch,
    }
    try:
        config = load_config(targets[0] if targets[0].exists() else Path("."), overrides, config_file)
        mode = ("unsafe" if unsafe_fixes else "safe") if (fix or diff) else None
        result = lint_paths(targets, config, force_exclude=force_exclude, fix=mode, debug=debug)
        edits = result.edits
    except MissingPathError as error:
        raise UsageProblem(f"no such file or directory: {error}") from None
    except ConfigError as error:
        raise UsageProblem(str(error)) from None
    fixed = _write_or_diff(edits, diff, result)
    if diff:
        count = sum(edit.fixed for edit in edits)
        click.echo(f"Would fix {count} problem{'s' if count != 1 else ''} in {len(edits)} file{'s' if len(edits) != 1 else ''}.", err=True)
    else:
        _print_report(result, output_format, fixed)
    _exit(result, bool(diff and edits), exit_zero)


def _write_or_diff(edits: list, diff: bool, result: LintResult) -> int:  # type: ignore[type-arg]
    if diff:
        for edit in edits:
            click.echo(edit.diff(), nl=False)
        return 0
    fixed = 0
    for edit in edits:
        try:
            write_atomically(edit)
            fixed += edit.fixed
        except ChangedOnDiskError:
            click.echo(f"torchlint: {edit.display} changed on disk while it was being checked; not fixed", err=True)
        except OSError as error:
            click.echo(f"torchlint: cannot write {edit.display}: {error}", err=True)
    return fixed


def _print_report(result: LintResult, output_format: str, fixed: int) -> None:
    if output_format == "json":
        click.echo(json_report.render(result.findings))
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        click.echo(text_report.render(result.findings, result.files_checked, color=color, fixed=fixed))
    for error in result.errors:
        click.echo(f"torchlint: internal error in {error.code} on {error.path}: {error.error}", err=True)
        click.echo(error.traceback.rstrip(), err=True)
    if result.errors:
        click.echo("torchlint: this is a bug in torchlint; please report it with the file that triggered it.", err=True)


def _exit(result: LintResult, has_diff: bool, exit_zero: bool) -> None:
    if result.errors:
        sys.exit(2)
    sys.exit(1 if (result.findings or has_diff) and not exit_zero else 0)


@main.command(context_settings=CONTEXT)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules(output_format: str) -> None:
    """List every rule: code, name, default on/off, autofix."""
    table = catalogue.rules()
    if output_format == "json":
        import json

        click.echo(json.dumps([{"code": r.code, "name": r.name, "default": r.default, "fix": r.fix.value, "summary": r.summary} for r in table], indent=2))
        return
    width = max(len(r.name) for r in table)
    click.echo(f"{'CODE':<6} {'NAME':<{width}} {'DEFAULT':<8} {'AUTOFIX':<7} SUMMARY")
    for r in table:
        click.echo(f"{r.code:<6} {r.name:<{width}} {'on' if r.default else 'opt-in':<8} {r.fix.value:<7} {r.summary}")


@main.command(context_settings=CONTEXT)
@click.argument("code")
def rule(code: str) -> None:
    """Print the page of rule CODE (a code such as TL101, or its name)."""
    found = catalogue.find(code)
    if found is None:
        raise UsageProblem(f"unknown rule `{code}`; `torchlint rules` lists them")
    text = catalogue.page(found)
    if text is None:
        raise UsageProblem(f"the page of {found.code} is missing from this installation")
    click.echo(text.rstrip())


def _register_profile() -> None:
    try:
        from torchlint.profiler.command import profile as profile_command
    except ImportError:  # the runtime half is optional while it is being built
        return
    main.add_command(profile_command)


_register_profile()

if __name__ == "__main__":  # pragma: no cover
    main()
