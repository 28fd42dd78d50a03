"""The report of a ``torchlint profile`` run, as both halves of the command build it.

An application module beside :mod:`torchlint.cli.profile` (one process) and
:mod:`torchlint.cli.profile_ranks` (one run per rank): load the session the
collectors left (:mod:`torchlint.profiler`), lint the files it ran, join and
estimate (:mod:`torchlint.estimate`), and render (:mod:`torchlint.report`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import click

from torchlint.profiler.loadrun import load_run
from torchlint.profiler.run import OUTPUT_LOG
from torchlint.profiler.session import EXPERIMENT_FILE, PROFILE_FILE, SESSION_FILE, ProfileSession

REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
REPORT_HTML = "report.html"


def lint_for_session(session: ProfileSession) -> tuple[list[Any], dict[str, Any]]:
    """Run the static checks on the files the run executed; never raises."""
    from torchlint.correlate import display_path, user_files

    files = user_files(session)
    cwd = Path(session.cwd)
    shown = [display_path(f, str(cwd)) for f in files]
    try:
        from torchlint.config import Resolver
        from torchlint.engine import lint_paths
    except Exception as exc:  # the static half is missing or broken
        return [], {"available": False, "reason": f"{type(exc).__name__}: {exc}", "paths": shown, "files_checked": 0}
    here = Path.cwd()
    try:
        if cwd.is_dir() and cwd != here:  # --report from elsewhere: paths are the run's
            os.chdir(cwd)
        # each file with its own nearest config, as `torchlint check` does
        result = lint_paths([Path(p) for p in shown], Resolver(cwd=cwd))
    except Exception as exc:
        return [], {"available": False, "reason": f"{type(exc).__name__}: {exc}", "paths": shown, "files_checked": 0}
    finally:
        if Path.cwd() != here:
            os.chdir(here)
    errors = [str(e) for e in getattr(result, "errors", [])]
    return list(result.findings), {
        "available": True,
        "paths": shown,
        "files_checked": int(getattr(result, "files_checked", len(shown))),
        "errors": errors,
    }


def _import_static_checks() -> None:
    try:
        importlib.import_module("torchlint.config")
        importlib.import_module("torchlint.engine")
    except Exception:  # reported when the checks are run
        pass


def _snakeviz(run_dir: Path, no_browser: bool) -> dict[str, Any]:
    from torchlint.profiler import snakeviz

    prof = run_dir / PROFILE_FILE
    if not prof.is_file():
        return {"launched": False, "command": None, "url": None, "pid": None, "reason": "no profile.prof"}
    if snakeviz.executable() is None:
        cmd = snakeviz.shell_command(snakeviz.command(prof))
        return {"launched": False, "command": cmd, "url": None, "pid": None, "reason": "snakeviz is not installed"}
    headless = snakeviz.headless_reason()
    if no_browser or headless:
        cmd = snakeviz.command(prof, server=bool(headless))
        return {
            "launched": False,
            "command": snakeviz.shell_command(cmd),
            "url": None,
            "pid": None,
            "reason": "--no-browser" if no_browser else headless,
        }
    try:
        server = snakeviz.launch(prof, browser=True, log=run_dir / "snakeviz.log")
    except OSError as exc:
        return {
            "launched": False,
            "command": snakeviz.shell_command(snakeviz.command(prof)),
            "url": None,
            "pid": None,
            "reason": str(exc),
        }
    return {
        "launched": True,
        "command": snakeviz.shell_command(list(server.process.args)),  # type: ignore[arg-type]
        "url": server.url,
        "pid": server.pid,
        "reason": None,
    }


def report_run(
    run_dir: Path,
    *,
    output_format: str = "text",
    no_browser: bool = True,
    status: int | None = None,
    script: Path | None = None,
    argv: list[str] | None = None,
    hint: str | None = None,
) -> tuple[dict[str, Any], str]:
    """Load, correlate and render a finished run; writes report.json and report.txt.

    ``status`` is the child's exit status as the parent saw it; it fills in a
    session the child could not finish writing (killed by a signal).
    """
    from torchlint.estimate import analyse
    from torchlint.profiler.session import load_measurements
    from torchlint.report import profile_json, profile_text

    session = load_run(run_dir)
    measurements, problem = load_measurements(run_dir)
    if problem:
        session.meta.setdefault("warnings", []).append(problem)
    if status is not None and session.meta.get("exit_status") is None:
        session.meta["exit_status"] = status
        session.meta["stop_reason"] = f"killed by signal {status - 128}" if status > 128 else "unknown"
    if script is not None:
        session.meta.setdefault("script", str(script.resolve()))
    if argv is not None:
        session.meta.setdefault("argv", argv)
    if hint:
        session.meta.setdefault("warnings", []).append(hint)
    findings, static = lint_for_session(session)
    correlation = analyse(findings, session, measurements)
    artifacts: dict[str, Any] = {
        "profile": PROFILE_FILE if (run_dir / PROFILE_FILE).is_file() else None,
        "traces": [t for t in (session.artifacts.get("traces") or []) if (run_dir / t).is_file()],
        "report_json": REPORT_JSON,
        "report_text": REPORT_TEXT,
        "report_html": REPORT_HTML,
        "session": SESSION_FILE if (run_dir / SESSION_FILE).is_file() else None,
        "script_output": OUTPUT_LOG if (run_dir / OUTPUT_LOG).is_file() else None,
        "experiment": EXPERIMENT_FILE if (run_dir / EXPERIMENT_FILE).is_file() else None,
    }
    sv = _snakeviz(run_dir, no_browser)
    report = profile_json.build(
        correlation, session, run_dir=str(run_dir), static=static, artifacts=artifacts, snakeviz=sv,
        experiment=_experiment_data(run_dir),
    )
    text = profile_text.render(report)
    (run_dir / REPORT_JSON).write_text(profile_json.render(report), encoding="utf-8")
    (run_dir / REPORT_TEXT).write_text(text, encoding="utf-8")
    _write_html(report, session, run_dir)
    return report, (profile_json.render(report) if output_format == "json" else text)


def _experiment_data(run_dir: Path) -> dict[str, Any] | None:
    """experiment.json as data, for the report's account of what the experiment saw."""
    import json

    path = run_dir / EXPERIMENT_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):  # load_measurements already says it could not be read
        return None


def _write_html(report: dict[str, Any], session: ProfileSession, run_dir: Path) -> None:
    """report.html beside the others; a failure here costs only the page, said on stderr."""
    try:
        from torchlint.report import profile_html

        (run_dir / REPORT_HTML).write_text(profile_html.render(report, session, run_dir), encoding="utf-8")
    except Exception as exc:
        click.echo(f"torchlint: warning: could not write {REPORT_HTML}: {type(exc).__name__}: {exc}", err=True)


def show_html(run_dir: Path, open_it: bool, json_mode: bool) -> None:
    """``--open``: report.html in the browser; otherwise (or with no browser) its file:// URL."""
    page = run_dir / REPORT_HTML
    if not page.is_file():
        return
    url = page.resolve().as_uri()
    if open_it:
        from torchlint.profiler import snakeviz

        reason = snakeviz.headless_reason()
        if reason is None:
            try:
                import webbrowser

                if webbrowser.open(url):
                    click.echo(f"torchlint: opened {url}", err=True)
                    return
                reason = "no browser found"
            except Exception as exc:  # webbrowser.Error, a broken browser command
                reason = f"{type(exc).__name__}: {exc}"
        click.echo(f"torchlint: could not open a browser ({reason}); the report: {url}", err=True)
        return
    click.echo(f"HTML report: {url}", err=json_mode)
