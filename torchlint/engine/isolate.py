"""Crash isolation for the cross-file stages: the project's join, settling each file's
findings, the findings at call sites.

Each file is checked under its own guard (``pool.guarded``), but these stages run once for
the whole project, so a bug met in one file's piece of them would cost every file its
findings. Here it costs that piece only: the file is named with the stage in one line (no
traceback; ``--debug`` raises it), the run exits 2 as for any internal error, and the
file's findings are those its own file shows (its per-step findings settled by a join of
that file alone, where the project's could not take it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from torchlint.analysis.join import join
from torchlint.analysis.join_steps import Steps
from torchlint.analysis.summary import FileSummary
from torchlint.engine.results import FileResult, InternalError
from torchlint.terminal import printable

T = TypeVar("T")
# A join that still fails with this many files left out has a bug no one file explains:
# the project is then settled without it (each file as its own project).
_MAX_LEFT_OUT = 4

LEFT_OUT = "it was left out of the project's join: its findings are those its own file shows"
LEFT_OUT_OTHER = "it was left out of the project's join, with what the given files' steps reach through it"
UNSETTLED = "its findings are those its own file shows, without the project's steps"


def stage_error(name: str, stage: str, error: BaseException, lost: str) -> InternalError:
    """One line for the user: the file, the stage, the error, what its findings lack."""
    return InternalError(name, stage, f"{type(error).__name__}: {error} ({lost})", "")


def display_name(path: str | Path) -> str:
    """How findings name a file: relative to the working directory when it lies below it."""
    absolute = os.path.abspath(path)
    try:
        shown = Path(absolute).relative_to(Path.cwd()).as_posix()
    except (ValueError, OSError):  # outside the working directory, or no working directory
        shown = Path(path).as_posix()
    return printable(shown)


def name_of(result: FileResult) -> str:
    if result.source is not None:
        return result.source.path  # the name its findings carry
    if result.path is not None:
        return display_name(result.path)
    return display_name(result.summary.path) if result.summary is not None else "<unknown>"


def joined(summaries: Sequence[FileSummary], debug: bool = False) -> tuple[Steps, dict[str, Exception]]:
    """The project's join, and the files (by summary path) it was made without because
    joining them raised, each with its error. A failing join is searched for the file whose
    addition makes it fail (a binary search over prefixes: the join of a prefix fails from
    the first prefix holding every file the bug needs), which is left out, and so again;
    where that does not end it, no join is made and every file is left out."""
    kept = list(summaries)
    left_out: dict[str, Exception] = {}
    for _ in range(_MAX_LEFT_OUT + 1):
        try:
            return join(kept), left_out
        except Exception as error:
            if debug:
                raise
            last = error
            if len(left_out) == _MAX_LEFT_OUT or not kept:
                break
            index, last = _first_failing(kept, error)
            left_out[kept[index].path] = last
            del kept[index]
    for summary in kept:
        left_out.setdefault(summary.path, last)
    return Steps(), left_out


def _first_failing(summaries: list[FileSummary], error: Exception) -> tuple[int, Exception]:
    """The index of the file whose addition makes the join of ``summaries[:i + 1]`` fail,
    with that error (the join of all of ``summaries`` failed with ``error``)."""
    low, high = 0, len(summaries)  # join(summaries[:low]) holds, join(summaries[:high]) fails
    while high - low > 1:
        middle = (low + high) // 2
        failed = _join_error(summaries[:middle])
        if failed is None:
            low = middle
        else:
            high, error = middle, failed
    return high - 1, error


def _join_error(summaries: list[FileSummary]) -> Exception | None:
    try:
        join(summaries)
    except Exception as error:
        return error
    return None


def settle_project(results: Sequence[FileResult], summaries: Sequence[FileSummary], settle: Callable[[list[FileResult], Steps], object],
                   debug: bool = False, name: Callable[[FileResult], str] = name_of) -> tuple[Steps, list[InternalError]]:
    """The join of ``summaries`` (those of ``results`` and of the project's files that are not
    reported, in the caller's order), and each of ``results`` settled by it (``settle``). A
    file the join had to leave out is settled as its own project, with an error naming it;
    the errors of the other files left out are returned (their findings are not reported,
    the given files' steps through them are missing)."""
    steps, left_out = joined(summaries, debug)
    alone: list[FileResult] = []
    for result in results:
        if result.summary is not None and result.summary.path in left_out:
            result.errors.append(stage_error(name(result), "join", left_out.pop(result.summary.path), LEFT_OUT))
            alone.append(result)
    for result in alone:  # each as its own project
        settle([result], joined([result.summary] if result.summary is not None else [], debug)[0])
    apart = {id(result) for result in alone}
    settle([result for result in results if id(result) not in apart], steps)
    return steps, [stage_error(display_name(path), "join", error, LEFT_OUT_OTHER) for path, error in left_out.items()]


def guarded_stage(result: FileResult, stage: str, debug: bool, work: Callable[[], T], lost: str = UNSETTLED) -> T | None:
    """``work()``; where it raises, None and an error on ``result`` naming its file and the stage."""
    try:
        return work()
    except Exception as error:
        if debug:
            raise
        result.errors.append(stage_error(name_of(result), stage, error, lost))
        return None


__all__ = ["LEFT_OUT", "UNSETTLED", "display_name", "guarded_stage", "joined", "name_of", "settle_project", "stage_error"]
