"""``torchlint profile SCRIPT [ARGS...]``: the click command, the application layer
that drives the collectors (:mod:`torchlint.profiler`) and builds the report
(:mod:`torchlint.cli.profile_report`); beside :mod:`torchlint.cli.check_output`.

Imports neither torch nor libcst at import time: the static checks are
imported in a background thread while the script runs, torch only ever in
the child process.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import click

from torchlint.cli.profile_ranks import is_rank_run, launch_or_exit, profile_ranks, rank_options, report_ranks
from torchlint.cli.profile_report import _import_static_checks, lint_for_session, report_run, show_html
from torchlint.profiler.loadrun import load_run
from torchlint.profiler.run import RunDirError, RunOptions, ScriptError, StopRequested, StopSignals, check_script, make_run_dir, release_run_dir, run_child
from torchlint.profiler.session import PROFILE_FILE, SESSION_FILE
from torchlint.stopping import name_of



def run_experiment_for(run_dir: Path, budget: float | None, *, log: Any = None) -> dict[str, Any] | None:
    """``--experiment``: measure each switchable finding's saving (experiment.json).

    Runs after the profiled run and before the report: collect -> session data ->
    join -> experiment -> render. Never raises; a failure is said on stderr."""
    from torchlint.correlate import correlate

    say = log or (lambda text: click.echo(text, err=True))
    try:
        from torchlint.experiment.runner import run_experiment

        session = load_run(run_dir)
        findings, _static = lint_for_session(session)
        joined = correlate(findings, session)
        # observed time only orders what is tried first within the budget
        items = [(c.finding, getattr(c, "observed_s", None) or getattr(c, "cost_s", 0.0)) for c in joined.findings + joined.runtime]
        budget_text = f"{budget:.0f} s" if budget is not None else "default"
        say(f"torchlint: experiment: {len(items)} findings, budget {budget_text}")
        return run_experiment(session, items, run_dir, budget_s=budget, log=say)
    except Exception as exc:  # the profile and its report still stand
        say(f"torchlint: error: the experiment failed: {type(exc).__name__}: {exc}")
        return None


def rebuild_report(run_dir: Path | None, script: str | None, output_format: str, no_browser: bool, open_html: bool = False) -> None:
    """``--report RUN_DIR``: the report of an earlier run, from what it left; exits."""
    if run_dir is None:
        click.echo("torchlint: error: give a SCRIPT to profile, or --report RUN_DIR", err=True)
        sys.exit(2)
    if script is not None:
        click.echo("torchlint: error: --report rebuilds a report and runs nothing: give no SCRIPT with it", err=True)
        sys.exit(2)
    if not ((run_dir / SESSION_FILE).is_file() or (run_dir / PROFILE_FILE).is_file()):
        click.echo(f"torchlint: error: {run_dir}: not a run directory (no {SESSION_FILE} or {PROFILE_FILE})", err=True)
        sys.exit(2)
    try:
        _report, rendered = report_run(run_dir, output_format=output_format, no_browser=no_browser)
    except Exception as exc:  # a damaged run directory: say so, no traceback
        click.echo(f"torchlint: error: could not rebuild the report in {run_dir}: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    click.echo(rendered, nl=False)
    show_html(run_dir, open_html, output_format == "json")
    sys.exit(0)


def rebuild_rank_report(run_dir: Path, script: str | None, output_format: str, no_browser: bool, detail_rank: int | None) -> None:
    """``--report RUN_DIR`` of a multi-rank run: every rank merged again; exits."""
    if script is not None:
        click.echo("torchlint: error: --report rebuilds a report and runs nothing: give no SCRIPT with it", err=True)
        sys.exit(2)
    try:
        _report, rendered = report_ranks(run_dir, output_format=output_format, no_browser=no_browser, detail_rank=detail_rank)
    except Exception as exc:  # a damaged run directory: say so, no traceback
        click.echo(f"torchlint: error: could not rebuild the report in {run_dir}: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    click.echo(rendered, nl=False)
    sys.exit(0)


@click.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["-h", "--help"],
    }
)
@click.argument("script", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARGS]...")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Report format on stdout. With json, stdout carries only the report; the script's output goes to stderr.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run directory (default: torchlint-profile/<script>-<time>/). Must be empty, unless --overwrite.",
)
@click.option("--overwrite", is_flag=True, help="Empty the --out directory of an earlier run first.")
@click.option("--no-browser", is_flag=True, help="Do not start snakeviz; print its command instead.")
@click.option("--open", "open_html", is_flag=True, help="Open report.html (the run directory's HTML report) in the browser.")
@click.option("--wait", type=click.IntRange(min=0), default=1, show_default=True, help="torch.profiler schedule: steps skipped before each window.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="torch.profiler schedule: warm-up steps (recorded, discarded).")
@click.option("--active", type=click.IntRange(min=1), default=5, show_default=True, help="torch.profiler schedule: steps recorded per window.")
@click.option("--repeat", type=click.IntRange(min=0), default=1, show_default=True, help="torch.profiler schedule: number of windows (0: until the run ends).")
@click.option("--max-steps", type=click.IntRange(min=1), help="Stop the script cleanly after N optimizer steps.")
@click.option("--record-shapes", is_flag=True, help="torch.profiler: record input shapes.")
@click.option("--profile-memory", is_flag=True, help="torch.profiler: record tensor allocations.")
@click.option("--experiment", is_flag=True, help="Re-run the script with each switchable finding switched off, alternated with the original, and measure the saving.")
@click.option("--budget", type=click.FloatRange(min=1), metavar="SECONDS", help="Time limit of --experiment (default: 4x the profiled run, at least 20 s).")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), metavar="RUN_DIR", help="Rebuild the report of an earlier run from its run directory; runs nothing.")
@rank_options
def profile(
    script: str,
    script_args: tuple[str, ...],
    output_format: str,
    out: Path | None,
    no_browser: bool,
    wait: int,
    warmup: int,
    active: int,
    repeat: int,
    max_steps: int | None,
    record_shapes: bool,
    profile_memory: bool,
    experiment: bool = False,
    budget: float | None = None,
    report_dir: Path | None = None,
    overwrite: bool = False,
    open_html: bool = False,
    **ranks: Any,
) -> None:
    """Run SCRIPT under cProfile and torch.profiler and rank the findings by what fixing them saves.

    SCRIPT runs as __main__ in a child Python process with ARGS as its own
    sys.argv. Steps are the optimizer's steps; no edits to the script are
    needed. Exit status is the script's own.
    """
    if report_dir is not None and is_rank_run(report_dir):
        rebuild_rank_report(report_dir, script, output_format, no_browser, ranks.get("detail_rank"))
    if report_dir is not None or script is None:
        rebuild_report(report_dir, script, output_format, no_browser, open_html)
    launch = launch_or_exit(ranks, experiment)  # None: one process
    try:
        path = check_script(script)
    except ScriptError as exc:
        click.echo(f"torchlint: error: {exc}", err=True)
        sys.exit(2)
    if not torch_installed():  # the script would die on `import torch`, and the report say "0 optimizer steps"
        click.echo(f"torchlint: error: `profile` needs torch, which {sys.executable} cannot import: install torch first, pinned "
                   f"(`pip install torch=={PINNED_TORCH} --index-url https://download.pytorch.org/whl/cpu` on a machine without a GPU), "
                   "then the `profile` extra (`pip install 'torchlint[profile]'`)", err=True)
        sys.exit(2)
    try:
        run_dir = make_run_dir(path, out, overwrite=overwrite)
    except RunDirError as exc:
        click.echo(f"torchlint: error: {exc}", err=True)
        sys.exit(2)
    try:
        if launch is not None:
            profile_ranks(run_dir, script, script_args, output_format, no_browser, RunOptions(
                wait=wait, warmup=warmup, active=active, repeat=repeat, max_steps=max_steps,
                record_shapes=record_shapes, profile_memory=profile_memory,
            ), launch, ranks.get("detail_rank"))
        _profile_into(run_dir, path, script, script_args, output_format, no_browser, experiment, budget, RunOptions(
            wait=wait, warmup=warmup, active=active, repeat=repeat, max_steps=max_steps,
            record_shapes=record_shapes, profile_memory=profile_memory,
        ), open_html=open_html)
    finally:
        release_run_dir(run_dir)


PINNED_TORCH = "2.13.0"  # the README's pin


def torch_installed() -> bool:
    """Whether this Python, which runs the script, can find torch (found, not imported:
    importing it costs seconds, and the child does that)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def misplaced_options_hint(script: str, script_args: tuple[str, ...]) -> str | None:
    """When a run failed and the script was given one of torchlint's own options (``train.py
    --no-browser``: everything after SCRIPT is the script's), say where they go."""
    ours = {o for p in profile.params for o in getattr(p, "opts", ()) if o.startswith("--")}
    misplaced = [a for a in script_args if a.split("=", 1)[0] in ours]
    if not misplaced:
        return None
    names = " ".join(dict.fromkeys(a.split("=", 1)[0] for a in misplaced))
    return (f"{names} came after the script, so the script got {'it' if len(misplaced) == 1 else 'them'}: "
            f"torchlint's options go before SCRIPT (torchlint profile {' '.join(misplaced)} {script} ...)")


def _profile_into(run_dir: Path, path: Path, script: str, script_args: tuple[str, ...], output_format: str, no_browser: bool, experiment: bool, budget: float | None, options: RunOptions, open_html: bool = False) -> None:
    """Run the script into ``run_dir``, then report; exits with the script's status."""
    json_mode = output_format == "json"
    # The static checks' imports (libcst) take a few tenths of a second: do them
    # while the script runs, in this otherwise idle process.
    prewarm = threading.Thread(target=_import_static_checks, name="torchlint-prewarm", daemon=True)
    prewarm.start()
    # Each torch.profiler window's trace is summarised here as soon as it is written,
    # while the script runs on (off its critical path; tracefile.py).
    from torchlint.profiler.tracefile import watch

    stop_watching = watch(run_dir)
    status = run_child(script, list(script_args), run_dir, options, stdout_to_stderr=json_mode)
    stop_watching()
    prewarm.join()
    hint = misplaced_options_hint(script, script_args) if status != 0 else None
    # Ctrl-C, SIGTERM or SIGHUP from here on stops the experiment (its windows are ended),
    # never the report of a run that finished: the report is written, then torchlint exits
    # with the signal's status (130, 143, 129).
    with StopSignals() as stops:
        if experiment and status == 0:
            try:
                run_experiment_for(run_dir, budget)
            except StopRequested as stop:
                click.echo(f"torchlint: experiment {stop.reason}; reporting the profiled run", err=True)
        elif experiment:
            click.echo(f"torchlint: experiment not run: the script exited with status {status}", err=True)
        stops.defer()
        try:
            _report, rendered = report_run(
                run_dir,
                output_format=output_format,
                no_browser=no_browser,
                status=status,
                script=path,
                argv=[script, *script_args],
                hint=hint,
            )
        except Exception as exc:  # the script's status still wins; say what went wrong
            click.echo(f"torchlint: error: could not build the report in {run_dir}: {type(exc).__name__}: {exc}", err=True)
            sys.exit(status if status else 1)
    if stops.signum is not None:
        click.echo(f"torchlint: stopped by {name_of(stops.signum)}; the report is in {run_dir}", err=True)
        status = 128 + stops.signum
    if not json_mode:
        click.echo("")  # a blank line between the script's output and the report
    click.echo(rendered, nl=False)
    show_html(run_dir, open_html, json_mode)
    if _report["snakeviz"].get("launched") and stops.signum is None:
        from torchlint.profiler import snakeviz

        snakeviz.serve_until_interrupted(_report["snakeviz"]["pid"], say=lambda text: click.echo(text, err=True))
    sys.exit(status)
