"""``torchlint profile --nproc-per-node N SCRIPT``: the multi-rank half of the command.

An application module, like :mod:`torchlint.cli.profile`: launch the ranks through
torchrun (:mod:`torchlint.profiler.distributed`), then load every ``rank<K>/``,
lint once, correlate each rank, merge (:mod:`torchlint.correlate.ranks`) and render
(:mod:`torchlint.report.profile_ranks`). See docs/distributed.md.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import click

from torchlint.profiler.distributed import TIMEOUT_STATUS, Launch, LaunchResult, launcher_command, parse_ranks, run_ranks
from torchlint.profiler.loadrun import load_run
from torchlint.profiler.run import RunOptions, rank_dirs
from torchlint.profiler.session import PROFILE_FILE, SESSION_FILE

LAUNCH_FILE = "launch.json"  # how the ranks were launched and how the launch ended
_STOP_STATUS = {"timeout": TIMEOUT_STATUS, "interrupted": 130, "terminated": 143, "hangup": 129}


def is_rank_run(run_dir: Path) -> bool:
    return (run_dir / LAUNCH_FILE).is_file() or bool(rank_dirs(run_dir))


def profile_ranks(run_dir: Path, script: str, script_args: tuple[str, ...], output_format: str, no_browser: bool, options: RunOptions, launch: Launch, detail_rank: int | None) -> None:
    """Run every rank into ``run_dir``, then report; exits with the job's status."""
    from torchlint.cli.profile_report import _import_static_checks

    json_mode = output_format == "json"
    prewarm = threading.Thread(target=_import_static_checks, name="torchlint-prewarm", daemon=True)
    prewarm.start()
    cmd = launcher_command(launch, script, list(script_args), options, run_dir)
    result = run_ranks(cmd, run_dir, launch.timeout, stdout_to_stderr=json_mode)
    if result.stopped:
        click.echo(f"torchlint: the ranks were stopped ({result.stopped}); reporting what they wrote", err=True)
    _save_launch(run_dir, launch, result, [script, *script_args])
    prewarm.join()
    try:
        report, rendered = report_ranks(run_dir, output_format=output_format, no_browser=no_browser, detail_rank=detail_rank)
    except Exception as exc:  # the job's status still wins; say what went wrong
        click.echo(f"torchlint: error: could not build the report in {run_dir}: {type(exc).__name__}: {exc}", err=True)
        sys.exit(result.status or 1)
    if not json_mode:
        click.echo("")
    click.echo(rendered, nl=False)
    if report["snakeviz"].get("launched"):
        from torchlint.profiler import snakeviz

        snakeviz.serve_until_interrupted(report["snakeviz"]["pid"], say=lambda text: click.echo(text, err=True))
    sys.exit(report["run"]["exit_status"])


def _save_launch(run_dir: Path, launch: Launch, result: LaunchResult, argv: list[str]) -> None:
    data = {
        "argv": argv,
        "nproc_per_node": launch.nproc_per_node,
        "nnodes": launch.nnodes,
        "node_rank": launch.node_rank,
        "rdzv_endpoint": launch.rdzv_endpoint,
        "ranks": list(launch.ranks) if launch.ranks is not None else None,
        "timeout": launch.timeout,
        "launcher_status": result.status,
        "stopped": result.stopped,
        "killed": result.killed,
    }
    (run_dir / LAUNCH_FILE).write_text(json.dumps(data, indent=1), encoding="utf-8")


def job_status(launch: dict[str, Any], figures: list[Any]) -> int:
    """The job's exit status: a stop's (124 timeout, 130, 143), else the first failed
    rank's own status, else any rank's non-zero one, else the launcher's."""
    if launch.get("stopped") in _STOP_STATUS:
        return _STOP_STATUS[launch["stopped"]]
    for fig in figures:
        if fig.failed:
            return int(fig.exit_status or launch.get("launcher_status") or 1)
    for fig in figures:
        if fig.exit_status:
            return int(fig.exit_status)
    return int(launch.get("launcher_status") or 0)


def report_ranks(run_dir: Path, *, output_format: str = "text", no_browser: bool = True, detail_rank: int | None = None) -> tuple[dict[str, Any], str]:
    """Load every rank, lint once, correlate each, merge; writes report.json and report.txt."""
    from torchlint.correlate.ranks import rank_figures
    from torchlint.estimate import analyse
    from torchlint.cli.profile_report import REPORT_HTML, REPORT_JSON, REPORT_TEXT, _snakeviz, _write_html, lint_for_session
    from torchlint.report import profile_json, profile_ranks, profile_text

    dirs = rank_dirs(run_dir)
    if not dirs:
        raise FileNotFoundError("no rank wrote a directory (did torchrun start? see its output above)")
    launch = _load_launch(run_dir)
    sessions = {k: load_run(d) for k, d in dirs.items()}
    detail = detail_rank if detail_rank in sessions else min(sessions)
    if detail_rank is not None and detail_rank != detail:
        sessions[detail].meta.setdefault("warnings", []).append(f"--rank {detail_rank}: no such rank here; rank {detail} is shown")
    findings, static = lint_for_session(sessions[detail])
    correlations = {k: analyse(findings, s, []) for k, s in sessions.items()}
    figures = [rank_figures(k, sessions[k], dirs[k]) for k in sessions]
    name = dirs[detail].name
    session = sessions[detail]
    artifacts = {
        "profile": f"{name}/{PROFILE_FILE}" if (dirs[detail] / PROFILE_FILE).is_file() else None,
        "traces": [f"{name}/{t}" for t in session.artifacts.get("traces") or [] if (dirs[detail] / t).is_file()],
        "report_json": REPORT_JSON,
        "report_text": REPORT_TEXT,
        "report_html": REPORT_HTML,
        "session": f"{name}/{SESSION_FILE}" if (dirs[detail] / SESSION_FILE).is_file() else None,
        "script_output": f"{name}/script-output.log" if (dirs[detail] / "script-output.log").is_file() else None,
    }
    report = profile_json.build(
        correlations[detail], session, run_dir=str(run_dir), static=static, artifacts=artifacts,
        snakeviz=_snakeviz(dirs[detail], no_browser),
    )
    launch["world_size"] = next((s.meta["distributed"].get("world_size") for s in sessions.values() if s.meta.get("distributed")), None)
    profile_ranks.merge(report, detail_rank=detail, figures=figures, sessions=sessions, correlations=correlations, launch=launch)
    report["run"]["exit_status"] = job_status(launch, figures)
    if launch.get("stopped"):
        report["run"]["stop_reason"] = launch["stopped"]
    text = profile_text.render(report)
    (run_dir / REPORT_JSON).write_text(profile_json.render(report), encoding="utf-8")
    (run_dir / REPORT_TEXT).write_text(text, encoding="utf-8")
    _write_html(report, session, run_dir)  # the detailed rank's page; rank_data() has every rank
    return report, (profile_json.render(report) if output_format == "json" else text)


def _load_launch(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / LAUNCH_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


_OPTIONS = (
    click.option("--nproc-per-node", type=click.IntRange(min=1), help="Launch SCRIPT with torchrun (torch.distributed.run): N ranks on this node, each profiled into rank<K>/."),
    click.option("--nnodes", help="torchrun: number of nodes (or MIN:MAX)."),
    click.option("--node-rank", type=click.IntRange(min=0), help="torchrun: this node's rank."),
    click.option("--rdzv-backend", help="torchrun: rendezvous backend (c10d, ...)."),
    click.option("--rdzv-endpoint", help="torchrun: rendezvous endpoint HOST:PORT."),
    click.option("--rdzv-id", help="torchrun: rendezvous (job) id."),
    click.option("--master-addr", help="torchrun: address of the rank 0 node (static rendezvous)."),
    click.option("--master-port", type=click.IntRange(min=1, max=65535), help="torchrun: port on the rank 0 node."),
    click.option("--ranks", "ranks_text", metavar="0,3", help="With --nproc-per-node: profile only these ranks; the others run plainly."),
    click.option("--timeout", type=click.FloatRange(min=1), metavar="SECONDS", help="With --nproc-per-node: stop every rank after SECONDS (a hang) and report what they wrote."),
    click.option("--rank", "detail_rank", type=click.IntRange(min=0), help="With --nproc-per-node or --report: the rank shown in detail and opened in snakeviz (default 0)."),
)
#: Options that mean nothing without --nproc-per-node, by parameter name.
_TORCHRUN_ONLY = {
    "nnodes": "--nnodes", "node_rank": "--node-rank", "rdzv_backend": "--rdzv-backend",
    "rdzv_endpoint": "--rdzv-endpoint", "rdzv_id": "--rdzv-id", "master_addr": "--master-addr",
    "master_port": "--master-port", "ranks_text": "--ranks", "timeout": "--timeout", "detail_rank": "--rank",
}


def rank_options(command: Any) -> Any:
    """The torchrun options of ``torchlint profile``, as one decorator."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def launch_or_exit(ranks: dict[str, Any], experiment: bool) -> Launch | None:
    """The torchrun launch the options ask for (None: one process); exit 2 on a misuse."""
    nproc = ranks.get("nproc_per_node")
    if nproc is None:
        given = [flag for name, flag in _TORCHRUN_ONLY.items() if ranks.get(name) is not None]
        if given:
            _usage(f"{given[0]} needs --nproc-per-node")
        return None
    if experiment:
        _usage("--experiment runs one process; it cannot be combined with --nproc-per-node")
    try:
        selected = parse_ranks(ranks.get("ranks_text"))
    except ValueError as exc:
        _usage(str(exc))
    return Launch(
        nproc_per_node=nproc,
        nnodes=str(ranks.get("nnodes") or "1"),
        node_rank=ranks.get("node_rank"),
        rdzv_backend=ranks.get("rdzv_backend"),
        rdzv_endpoint=ranks.get("rdzv_endpoint"),
        rdzv_id=ranks.get("rdzv_id"),
        master_addr=ranks.get("master_addr"),
        master_port=ranks.get("master_port"),
        ranks=selected,
        timeout=ranks.get("timeout"),
    )


def _usage(message: str) -> None:
    click.echo(f"torchlint: error: {message}", err=True)
    sys.exit(2)
