"""What the Language Server lints, and with what context.

A document is a Python file's text or a notebook's cells (joined as ``check`` joins an
``.ipynb``'s code cells). It is checked with the step summaries of the other open
documents and of the rest of its project on disk (``engine/project_files.py``: the
project's files as ``check`` finds them, their summaries from the result cache or made
without running a rule), so a helper in a package is per-step as soon as it is opened,
whatever else is open. server/app.py wires these to LSP messages."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lsprotocol import types

from torchlint.analysis.join_steps import Steps
from torchlint.analysis.summary import FileSummary
from torchlint.config import Resolver, format_size, load_config
from torchlint.engine import Linter
from torchlint.engine.cache import Cache, cache_dir
from torchlint.engine.call_sites import for_file, kept
from torchlint.engine.discover import SourceFile, real
from torchlint.engine.pool import check_files, collector_paused, default_jobs, guarded
from torchlint.engine.project_files import Context, project_root
from torchlint.engine.isolate import settle_project
from torchlint.engine.results import FileResult, InternalError
from torchlint.engine.settle import settle_steps
from torchlint.engine.source import Source, notebook_source, syntax_error
from torchlint.findings import UNUSED_NOQA, Finding
from torchlint.textlines import lines_with_ends

log = logging.getLogger(__name__)

@dataclass
class Linted:
    """A document's text as linted, its tree (for fixes) and findings."""

    text: str
    module: object | None = None
    findings: list[Finding] = field(default_factory=list)
    summary: FileSummary | None = None  # where its steps are, for the other documents' joins
    codec: Any = None  # the document's position codec: torchlint counts code points, the client UTF-16 units
    result: FileResult | None = None  # the check's result, tree and source kept: what a fix-all rewrites
    linter: Linter | None = None
    steps: Steps | None = None  # the join it was settled with
    used: list[Finding] = field(default_factory=list)  # findings at its call sites a `# noqa` of its may suppress (engine/call_sites.py)
    cells: list[str] | None = None  # a notebook: its cells' document URIs, in order (a finding's cell counts from 1)

    def to_client(self, r: types.Range) -> types.Range:
        return self.codec.range_to_client_units(lines_with_ends(self.text), r) if self.codec is not None else r

    def from_client(self, position: types.Position) -> types.Position:
        if self.codec is None:
            return position
        converted = self.codec.position_from_client_units(lines_with_ends(self.text), position)
        return types.Position(converted.line, converted.character)


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.name


def lint_text(text: str, path: Path, others: Iterable[FileSummary] = (), cells: list[tuple[str, bool, str]] | None = None,
              elsewhere: Callable[[set[str]], list[FileResult]] | None = None) -> Linted:
    """Findings of ``text`` as the file ``path``, with its nearest configuration; per-step
    findings settled by joining its summary with ``others``. ``cells``: a notebook's
    cells instead of ``text``, each ``(document URI, is code, text)``. ``elsewhere``: the
    results of the project's files on disk by absolute path, for what the document's
    calls put into the step there (``engine/call_sites.py``)."""
    config = load_config(path.parent, {})
    display = _display(path, config.root)
    if cells is not None:
        notebook = {"cells": [{"cell_type": "code" if code else "markdown", "source": body} for _, code, body in cells], "metadata": {}}
        source: Source | Finding = notebook_source(display, json.dumps(notebook))
        uris = [uri for uri, _, _ in cells]
    else:
        source, uris = Source(display, text), None
    if isinstance(source, Finding):
        return Linted(text, None, [source], cells=uris)
    size = len(source.text.encode("utf-8", "surrogatepass"))
    if size > config.max_file_size:  # as `check` does: libcst needs ~700x a file's size
        message = f"the document is {format_size(size)}, above the {format_size(config.max_file_size)} limit; not checked"
        return Linted(text, None, [syntax_error(display, message, hint="Raise `max-file-size`, or exclude the file")], cells=uris)
    linter = Linter(config)
    file = SourceFile(path, display, config.max_file_size)
    with collector_paused():
        result = guarded(file, False, lambda: linter.lint(source, path))  # deep nesting: as `check`
    for error in result.errors:  # a check that raised: its findings are missing, the others stand
        log.error("torchlint: internal error in %s on %s: %s\n%s", error.code, error.path, error.error, error.traceback)
    summary = result.summary
    checked = len(result.errors)
    summaries = [*others, *([summary] if summary is not None else [])]
    steps, elsewhere_errors = settle_project([result], summaries, lambda some, joined: settle_steps(some, joined), name=lambda _: display)
    for error in [*result.errors[checked:], *elsewhere_errors]:  # a cross-file stage that raised (engine/isolate.py)
        log.error("torchlint: internal error in %s on %s: %s", error.code, error.path, error.error)
    used: list[Finding] = []
    if elsewhere is not None and summary is not None and result.source is not None and not result.errors:
        errors: list[InternalError] = []
        used = for_file(display, summary.path, steps, elsewhere, errors)
        for error in errors:
            log.error("torchlint: internal error in %s on %s: %s", error.code, error.path, error.error)
        shown = kept(used, config, path, result.source)
        if len(shown) < len(used) and any(f.code == UNUSED_NOQA[0] for f in result.findings):  # a `# noqa` they use is no TL001
            result = linter.lint(result.source, path, steps, used)
        result.findings = [*result.findings, *shown]
    findings = sorted(result.findings, key=Finding.sort_key)
    return Linted(text, result.module, findings, summary, result=result, linter=linter, steps=steps, cells=uris, used=used)


def fix_all(linted: Linted) -> str | None:
    """The document's text with every safe fix applied (round after round, as ``check
    --fix`` applies them); None when nothing changes. Notebooks are left to ``check``."""
    if linted.result is None or linted.linter is None or linted.cells is not None:
        return None
    result = replace(linted.result, findings=list(linted.result.findings))  # fixing consumes them
    edit = linted.linter.fix(result, unsafe=False, steps=linted.steps, used=linted.used)
    return edit.after if edit is not None and edit.after != linted.text else None


def workspace_folder(path: Path, folders: Iterable[Path]) -> Path | None:
    """The workspace folder (real paths, as ``real`` gives) that holds ``path`` once its
    ``..`` and links are resolved; None outside every one."""
    resolved = real(path)
    return next((folder for folder in folders if folder == resolved or folder in resolved.parents), None)


class Projects:
    """The step summaries of each project's files on disk, made on first use and kept
    until something on disk changes (``forget``): a save, a watched file, a config.

    The server reads and writes only inside its workspace folders: a document outside
    every one (``ws/../elsewhere/x.py``, a file the editor opened from anywhere) is linted
    alone, no project walked around it and no cache written there; a project reaching
    above its workspace folder is walked from that folder."""

    def __init__(self) -> None:
        self.by_root: dict[Path, list[FileSummary]] = {}
        self.contexts: dict[Path, Context] = {}
        self.root_of: dict[Path, Path] = {}  # a document's project root, as summaries() last found it
        self.notes: list[str] = []

    def forget(self) -> None:
        self.by_root.clear()
        self.contexts.clear()
        self.root_of.clear()

    def elsewhere(self, path: Path, open_paths: Iterable[str] = ()) -> Callable[[set[str]], list[FileResult]]:
        """The results of ``path``'s project's files on disk, by absolute path: what a
        document's calls put into the step there. Not of the files open in the editor
        (``open_paths``): each shows its own findings, from the editor's text."""
        root = self.root_of.get(path)  # as summaries() found it: inside the workspace, or none
        context = self.contexts.get(root) if root is not None else None
        if context is None:
            return lambda paths: []
        skip = set(open_paths)
        return lambda paths: context.full_results(set(paths) - skip, jobs=default_jobs())

    def summaries(self, path: Path, open_paths: Iterable[str], folders: Iterable[Path] = ()) -> list[FileSummary]:
        """The summaries of ``path``'s project, but for the files open in the editor
        (``open_paths``, absolute: the editor's text stands for them); ``folders``: the
        workspace folders, real paths."""
        self.root_of.pop(path, None)
        folder = workspace_folder(path, folders)
        if folder is None:
            return []
        settings = Resolver(cwd=path.parent)
        root = project_root(path, settings)
        if root is None:
            return []
        if root in folder.parents:
            root = folder  # the part of the project the editor opened, nothing above it
        self.root_of[path] = root
        if root not in self.by_root:
            self.by_root[root] = self._summarise(path, root)
        skip = set(open_paths)
        return [summary for summary in self.by_root[root] if summary.path not in skip]

    def _summarise(self, path: Path, root: Path) -> list[FileSummary]:
        settings = Resolver(cwd=root)
        store = Cache(cache_dir(root))  # in `root`, in the workspace; or where the user's $TORCHLINT_CACHE_DIR says
        context = Context.around([path], [], settings, store, within=root)
        if context.note:
            self.notes.append(context.note)
        context.take(check_files(context.todo_files(), context.todo_configs(), jobs=default_jobs()), store)
        store.prune()
        self.contexts[root] = context
        return context.summaries


def absolute(path: Path) -> str:
    """How a summary names the file at ``path``."""
    return os.path.abspath(path)
