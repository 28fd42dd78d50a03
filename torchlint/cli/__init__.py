"""The ``torchlint`` command line: check, rules, rule (and profile)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from torchlint import __version__

if TYPE_CHECKING:
    from torchlint.engine import LintResult

# Only click is imported up front: `--version`, `--help`, `rules` and `rule` stay fast, and a
# run whose results all come from the cache never imports libcst or the checks.
CONTEXT = {"help_option_names": ["-h", "--help"]}
# The reporters live in torchlint/report/ (one module per format); `text` is the old name of `full`.
OUTPUT_FORMATS = ["full", "concise", "json", "json-lines", "sarif", "github", "gitlab", "junit", "text"]
OUTPUT_FORMATS_HELP = (
    "full: each finding with its source lines and help (default); concise: one line each; json; json-lines; "
    "sarif: SARIF 2.1.0 for GitHub code scanning; github: workflow annotations; gitlab: Code Quality; junit: JUnit XML."
)


class UsageProblem(click.ClickException):
    """A problem with what the user asked for: exit status 2."""

    exit_code = 2

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"torchlint: error: {self.format_message()}", err=True)


def _codes(values: tuple[str, ...] | str | None) -> tuple[str, ...] | None:
    """The codes of a rule option, comma-separated, given once or repeated (`--select TL101
    --select TL102` selects both, as ruff's does)."""
    if isinstance(values, str):
        values = (values,)
    if not values:
        return None
    return tuple(code.strip().upper() for value in values for code in value.split(",") if code.strip())


# What writing the report can fail with (a full disk, a quota, a file too large, a
# device error): said in one line, never an internal error.
_OUTPUT_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _stdout_to_devnull() -> None:
    """Drop what is still buffered for stdout: flushing it at exit would fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no real file (a test's capture)
        pass


def _flush_stdout() -> None:
    """Flush stdout unless it is closed: the server closes the real one at exit, under the
    escaping wrapper the command ran with (so ask the stream under it too)."""
    stream = sys.stdout
    under = getattr(stream, "raw", stream)
    if stream is not None and not stream.closed and not getattr(under, "closed", False):
        stream.flush()


class _LazyGroup(click.Group):
    """Subcommands imported only when run; ``--help`` lists them from ``LAZY``."""

    LAZY = {"profile": ("torchlint.cli.profile", "profile", "Run SCRIPT under the profilers and rank the findings by saving.")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY and name not in self.commands:
            module, attribute, _ = self.LAZY[name]
            try:
                import importlib

                self.add_command(getattr(importlib.import_module(module), attribute))
            except ImportError:  # the runtime half is optional while it is being built
                return None
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a bug that escapes it is one line on stderr and exit 2, never a
        traceback (``--debug`` or ``TORCHLINT_DEBUG=1`` show it)."""
        from torchlint.stopping import quiet_shutdown, status_of, stop_signals_raise
        from torchlint.terminal import safe_streams

        try:
            # Every message may quote the user's bytes (a path, a config value, source in
            # an exception): no control sequence of theirs reaches the terminal.
            with safe_streams(), stop_signals_raise():
                try:
                    return super().invoke(ctx)
                finally:
                    _flush_stdout()  # a full disk or a closed pipe is met here, not at interpreter exit
        except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM, SIGHUP: what started is ended, no traceback
            _flush_quietly()
            quiet_shutdown()  # (nor one from the interpreter's own exit, a pool's wakeup pipe closed by the stop)
            sys.exit(status_of(stop))
        except BrokenPipeError:  # `torchlint check | head -1`: the reader has all it wanted
            _stdout_to_devnull()
            sys.exit(1)
        except OSError as error:
            if error.errno not in _OUTPUT_ERRORS:
                raise
            _stdout_to_devnull()
            click.echo(f"torchlint: error: cannot write to standard output: {error.strerror or error}", err=True)
            sys.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as error:
            if "--debug" in sys.argv or os.environ.get("TORCHLINT_DEBUG"):
                raise
            click.echo(
                f"torchlint: internal error: {type(error).__name__}: {error}\n"
                "torchlint: this is a bug in torchlint; rerun with TORCHLINT_DEBUG=1 for the traceback, and report it",
                err=True,
            )
            sys.exit(2)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.commands[name].get_short_help_str(formatter.width - 20)) for name in super().list_commands(ctx)]
        rows += [(name, help_text) for name, (_, _, help_text) in self.LAZY.items() if name not in self.commands]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def _flush_quietly() -> None:
    """Flush what the command printed; a reader that went away with the signal is no error."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


@click.group(cls=_LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="torchlint")
def main() -> None:
    """Find PyTorch performance problems, and measure what they cost."""


@main.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))  # an unreadable file is a TL000, not a usage error
@click.option("--select", multiple=True, help="Rules to run (codes, names or prefixes, comma-separated or repeated; ALL for every rule).")
@click.option("--extend-select", multiple=True, help="Rules to run on top of the selection (repeatable).")
@click.option("--ignore", multiple=True, help="Rules not to run (repeatable).")
@click.option("--exclude", multiple=True, help="Glob of paths to skip (repeatable; replaces the config's).")
@click.option("--per-file-ignores", "per_file_ignores", multiple=True, metavar="PATTERN:CODES", help="Rules not to run on files matching PATTERN, e.g. `tests/*:TL101,TL102` (repeatable; replaces the config's table).")
@click.option("--extend-per-file-ignores", "extend_per_file_ignores", multiple=True, metavar="PATTERN:CODES", help="Like --per-file-ignores, on top of the config's table.")
@click.option("--tensor-core-multiple", type=int, help="Alignment TL402 asks for (default 8; 64 for A100).")
@click.option("--min-dimension", type=int, help="TL402 ignores sizes below this (default 32).")
@click.option("--target-torch", help="Oldest torch version the code must run on (default 2.4).")
@click.option("--min-impact", type=click.Choice(["high", "medium", "low"]), help="Show findings of this impact and above (default: medium; low shows every finding).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), help="Use this config file (torchlint.toml or pyproject.toml) for every file, instead of each file's nearest one.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--show-settings", type=click.Path(path_type=Path, exists=True), metavar="FILE", help="Print the settings FILE is checked with, and the config file they come from.")
@click.option("--show-files", is_flag=True, help="Print the files that would be checked, one per line.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="full", show_default=True, help=OUTPUT_FORMATS_HELP)
@click.option("-o", "--output-file", type=click.Path(path_type=Path, dir_okay=False), help="Write the report to this file instead of stdout.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True, help="Colour the report (auto: on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it).")
@click.option("--stdin-filename", help="With PATH `-`: the name stdin's text is reported under (per-file ignores and excludes apply to it).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to the line of every current finding.")
@click.option("--statistics", is_flag=True, help="Print how many findings each rule has instead of the findings.")
@click.option("--show-fixes", is_flag=True, help="List what --fix changed (or, without --fix, would change), per file and rule.")
@click.option("--fix", is_flag=True, help="Apply safe fixes in place (with PATH `-`: print the fixed source).")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, apply unsafe fixes too.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude patterns to files named on the command line too.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when problems are found.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="With --fix, exit 1 when a file was fixed, even if no problem is left.")
@click.option("-w", "--watch", is_flag=True, help="Check again whenever a checked file or a config file changes (Ctrl-C stops).")
@click.option("--no-clear", is_flag=True, help="With --watch, keep the earlier runs' output instead of clearing the screen.")
@click.option("--debug", is_flag=True, help="Let a crashing check raise instead of reporting it (runs in one process).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Processes to check files with (default: the available cores).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), help="Cache directory (default: $TORCHLINT_CACHE_DIR, else .torchlint_cache in the project root).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def check(paths: tuple[Path, ...], select: tuple[str, ...], extend_select: tuple[str, ...], ignore: tuple[str, ...], exclude: tuple[str, ...], tensor_core_multiple: int | None, min_dimension: int | None, target_torch: str | None, min_impact: str | None, config_file: Path | None, output_format: str, fix: bool, unsafe_fixes: bool, diff: bool, force_exclude: bool, exit_zero: bool, debug: bool, jobs: int | None, no_cache: bool, cache_dir: Path | None, quiet: bool, output_file: Path | None, color: str, stdin_filename: str | None, add_noqa: bool, statistics: bool, show_fixes: bool, isolated: bool, show_settings: Path | None, show_files: bool, per_file_ignores: tuple[str, ...] = (), extend_per_file_ignores: tuple[str, ...] = (), exit_non_zero_on_fix: bool = False, watch: bool = False, no_clear: bool = False) -> None:
    """Check PATHS (files or directories; default: the current directory; `-`: stdin)."""
    if diff and add_noqa:  # as ruff: --diff writes nothing, and --add-noqa only writes
        raise UsageProblem("--diff and --add-noqa cannot be combined: --diff writes nothing")
    if watch:
        if [str(p) for p in paths] == ["-"]:
            raise UsageProblem("--watch checks files, not standard input")
        from torchlint.cli.watch import watch as watch_files

        context = click.get_current_context()
        again = dict(context.params, watch=False)
        watch_files(lambda: context.invoke(check, **again), list(paths) or [Path(".")], config_file, isolated, clear=not no_clear)
        return
    from torchlint.config import ConfigError, Resolver
    from torchlint.engine import MissingPathError, lint_paths
    from torchlint.engine import cache as result_cache
    from torchlint.engine import pool, progress
    from torchlint.engine.discover import split_missing

    stdin = [str(p) for p in paths] == ["-"]  # `check -`: handled once the config is read
    targets, missing = ([Path("-")], []) if stdin else split_missing(list(paths) or [Path(".")])
    for name in missing:  # reported, and the rest is still checked (exit 2 at the end)
        click.echo(f"torchlint: error: no such file or directory: {name}", err=True)
    if missing and not targets:
        sys.exit(2)  # nothing left to check: the error is the whole answer (no report of 0 files)
    overrides = {
        "select": _codes(select), "extend-select": _codes(extend_select), "ignore": _codes(ignore),
        "exclude": exclude or None, "tensor-core-multiple": tensor_core_multiple,
        "min-dimension": min_dimension, "target-torch": target_torch, "min-impact": min_impact,
        "per-file-ignores": _per_file_ignores(per_file_ignores) if per_file_ignores else None,
        "extend-per-file-ignores": _per_file_ignores(extend_per_file_ignores) if extend_per_file_ignores else None,
    }
    try:
        # Each file is checked with its own nearest config; the current directory's says
        # where the cache goes, so the order of PATHS never matters.
        settings = Resolver(overrides, config_file, isolated)
        config = settings.for_path(Path("."))
        mode = ("unsafe" if unsafe_fixes else "safe") if (fix or diff) else None
        if show_settings is not None:
            _cli_check().show_settings(show_settings, settings)
            sys.exit(0)
        if show_files:
            _cli_check().show_files(targets, settings, force_exclude)
            sys.exit(2 if missing else 0)
        cache = None if no_cache else result_cache.cache_dir(config.root, cache_dir)
        if stdin:
            config = settings.for_path(Path(stdin_filename) if stdin_filename else Path("."))
            if config.broken:
                raise ConfigError(config.broken)
            project = _cli_check().Project(settings, cache, jobs or pool.default_jobs())
            _check_stdin(stdin_filename, config, mode, diff, debug, force_exclude, output_format, output_file, color, statistics, exit_zero, project, exit_non_zero_on_fix)
        show_progress = progress.wanted(quiet, output_format not in ("full", "concise", "text") or diff or statistics or add_noqa)
        result = lint_paths(
            targets, settings, force_exclude=force_exclude, fix=mode, debug=debug,
            jobs=jobs or pool.default_jobs(), cache=cache, progress=show_progress, project=True, fix_shown=True,
        )
        if result.note:
            click.echo(f"torchlint: note: {result.note}", err=True)
        for message in result.config_errors:  # one project's broken config: the others were checked
            click.echo(f"torchlint: error: {message}; the files it governs were not checked", err=True)
        edits = result.edits
    except MissingPathError as error:
        raise UsageProblem(f"no such file or directory: {error}") from None
    except ConfigError as error:
        raise UsageProblem(str(error)) from None
    fixed, failed = 0, 0
    if not add_noqa:  # fixes apply to what the selection and min-impact show (`--min-impact low`: every one)
        fixed, failed = _write_or_diff(edits, diff, result, targets, config)
    left_out = _cli_check().keep_shown(result, settings.for_path)
    if add_noqa:
        _added, unwritten = _cli_check().add_noqa(result, targets)
        sys.exit(2 if result.errors or unwritten else 0)
    if show_fixes:
        _show_fixes(result, settings, mode, fix and not diff)
    if diff:
        _would_fix(edits)
    else:
        if not (result.config_errors and result.files_checked == 0 and output_format in ("full", "concise")):
            # a run whose every file sits under an unreadable config has only its error to say
            _cli_check().report(result, output_format, fixed=fixed, color=color, output_file=output_file, statistics=statistics, left_out=left_out, unsafe=unsafe_fixes)
    _exit(result, any(edit.changed for edit in edits) if diff else None, exit_zero, failed=bool(missing or failed), fixed=bool(fixed) and exit_non_zero_on_fix)


def _would_fix(edits: list[Any]) -> None:
    count, files = sum(edit.fixed for edit in edits if edit.changed), sum(edit.changed for edit in edits)
    click.echo(f"Would fix {count} problem{'s' if count != 1 else ''} in {files} file{'s' if files != 1 else ''}.", err=True)


def _write_or_diff(edits: list[Any], diff: bool, result: LintResult, targets: list[Path], config: Any) -> tuple[int, int]:
    """Print the diff or write the fixes: (problems fixed, files that could not be written)."""
    if not edits:
        return 0, 0
    from torchlint.engine.fixes import checked_roots, say_notes, write_edits

    say = lambda text: click.echo(text, err=True)  # noqa: E731
    say_notes(edits, say)  # fixes left out of a notebook, and why
    if diff:
        from torchlint.terminal import write_exact

        for edit in edits:
            write_exact(edit.diff())  # a patch stays exact; on a terminal, escaped
        return 0, 0
    # A file that cannot be written keeps its findings (as it still is on disk): exit 2.
    return write_edits(edits, result.findings, checked_roots(targets), say, config)


def _cli_check():  # type: ignore[no-untyped-def]
    from torchlint.cli import check_output as cli_check

    return cli_check


def _show_fixes(result: LintResult, config: Any, mode: str | None, applied: bool) -> None:
    cli_check = _cli_check()
    if applied:
        cli_check.show_fixes(cli_check.applied_fixes(result, config), applied=True)
    else:
        cli_check.show_fixes(cli_check.would_fix(result.findings, unsafe=mode == "unsafe"), applied=False)


def _check_stdin(filename: str | None, config: Any, mode: str | None, diff: bool, debug: bool, force_exclude: bool, output_format: str, output_file: Path | None, color: str, statistics: bool, exit_zero: bool, project: Any = None, exit_non_zero_on_fix: bool = False) -> None:
    """`check -`: stdin's findings (to stderr when stdout carries the fixed source)."""
    cli_check = _cli_check()
    result, edit, lines = cli_check.check_stdin(filename, config, mode, diff=diff, debug=debug, force_exclude=force_exclude, project=project)
    for note in edit.notes if edit is not None else ():
        click.echo(f"torchlint: {note}", err=True)
    if diff and edit is not None:
        from torchlint.terminal import write_exact

        write_exact(edit.diff())
    fixed = edit.fixed if edit is not None and mode and not diff else 0
    left_out = cli_check.keep_shown(result, lambda path: config)
    if diff:  # stdout carries the diff alone, as for files: `patch` and `git apply` read it
        _would_fix([edit] if edit is not None else [])
        _exit(result, edit is not None and edit.changed, exit_zero)
    if not (result.config_errors and result.files_checked == 0 and output_format in ("full", "concise")):
        cli_check.report(result, output_format, fixed=fixed, color=color, output_file=output_file, statistics=statistics, lines=lines, err=bool(mode) and not diff, left_out=left_out)
    _exit(result, None, exit_zero, fixed=bool(fixed) and exit_non_zero_on_fix)


def _exit(result: LintResult, has_diff: bool | None, exit_zero: bool, failed: bool = False, fixed: bool = False) -> None:
    """2 for an error; with ``--diff`` (``has_diff`` not None) 1 for a diff, as ruff,
    whatever findings no fix removes; else 1 for findings or (``--exit-non-zero-on-fix``)
    a fix written; 0 otherwise or with ``--exit-zero``."""
    if result.errors or failed or result.config_errors:  # an internal error, a missing path, a fix not written, a config
        sys.exit(2)
    wrong = has_diff if has_diff is not None else result.findings or fixed
    sys.exit(1 if wrong and not exit_zero else 0)


def _per_file_ignores(values: tuple[str, ...]) -> dict[str, str]:
    """``PATTERN:CODES`` options as a ``per-file-ignores`` table (the last colon splits)."""
    table: dict[str, str] = {}
    for value in values:
        pattern, colon, codes = value.rpartition(":")
        if not colon or not pattern or not codes.strip():
            raise UsageProblem(f"--per-file-ignores takes PATTERN:CODES (e.g. `tests/*:TL101`), got {value!r}")
        table[pattern] = f"{table[pattern]},{codes}" if pattern in table else codes
    return table


@main.command(context_settings=CONTEXT)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules(output_format: str) -> None:
    """List every rule: code, name, default on/off, autofix; runtime rules (TLR, reported
    by `torchlint profile`) after the static ones."""
    from torchlint import catalogue

    table = catalogue.all_rules()
    if output_format == "json":
        import json

        click.echo(json.dumps([{"code": r.code, "name": r.name, "kind": "runtime" if r.runtime else "static", "default": r.default, "fix": r.fix.value, "summary": r.summary} for r in table], indent=2))
        return
    width = max(len(r.name) for r in table)
    click.echo(f"{'CODE':<6} {'NAME':<{width}} {'DEFAULT':<8} {'AUTOFIX':<7} SUMMARY")
    for r in table:
        default = "runtime" if r.runtime else "on" if r.default else "opt-in"
        click.echo(f"{r.code:<6} {r.name:<{width}} {default:<8} {r.fix.value:<7} {r.summary}")


@main.command(context_settings=CONTEXT)
@click.argument("code")
def rule(code: str) -> None:
    """Print the page of rule CODE (a code such as TL101, or its name)."""
    from torchlint import catalogue

    found = catalogue.find(code, runtime=True)
    if found is None:
        raise UsageProblem(f"unknown rule `{code}`; `torchlint rules` lists them")
    text = catalogue.page(found)
    if text is None:
        raise UsageProblem(f"the page of {found.code} is missing from this installation")
    click.echo(text.rstrip())


@main.command(context_settings=CONTEXT)
def server() -> None:
    """Run the Language Server over stdio, for editors (docs/editors.md)."""
    try:
        from torchlint.server.app import serve
    except ImportError as error:
        raise UsageProblem(f"`torchlint server` needs pygls ({error}); install `torchlint[server]`") from None
    from torchlint.terminal import raw_streams

    with raw_streams():  # stdio carries the protocol, byte for byte
        serve()
