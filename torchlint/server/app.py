"""``torchlint server``: a Language Server over stdio (pygls), for editors.

Diagnostics pushed on open and save, and on change after a short pause (debounced), or
pulled (``textDocument/diagnostic``, LSP 3.17) by a client that says it pulls; code
actions for the engine's fixes, "add ``# noqa: CODE``" and a fix-all
(``source.fixAll.torchlint``); hover over a finding shows its rule's summary and page;
notebooks (``notebookDocument/*``), their diagnostics on their cells. A document is
linted in the context of its project (server/lint.py): the open documents' text and the
step summaries of the project's other files on disk, kept until a save, a watched file
or a config file changes (``workspace/didChangeWatchedFiles``: then every open document
is linted again)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import replace
from pathlib import Path

from lsprotocol import converters, types
from pygls import uris
from pygls.lsp.server import LanguageServer

from torchlint import __version__
from torchlint.analysis.summary import FileSummary
from torchlint.config import ConfigError
from torchlint.engine.discover import real
from torchlint.server.actions import FIX_ALL, _contains, _range, code_actions, diagnostic, hover_text
from torchlint.server.lint import Linted, Projects, absolute, lint_text

DEBOUNCE_S = 0.3  # after the last keystroke, before a changed document is linted again
WATCHED = ("**/pyproject.toml", "**/torchlint.toml", "**/.torchlint.toml", "**/*.py", "**/*.ipynb")
log = logging.getLogger(__name__)


class TorchlintServer(LanguageServer):
    def __init__(self) -> None:
        notebooks = types.NotebookDocumentSyncOptions(
            notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")])],
            save=True,
        )
        super().__init__("torchlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental, notebook_document_sync=notebooks)
        self.linted: dict[str, Linted] = {}  # open documents (a notebook under its own URI, not its cells')
        self.summaries: dict[str, FileSummary] = {}  # the open documents' steps, as the editor has them
        self.pending: dict[str, asyncio.TimerHandle] = {}
        self.projects = Projects()  # the summaries of each project's files on disk
        self.pull = False  # the client pulls diagnostics: none are pushed
        self.refresh = False  # the client takes `workspace/diagnostic/refresh`


def _path(uri: str) -> Path | None:
    fs_path = uris.to_fs_path(uri)
    return Path(fs_path) if fs_path else None


def workspace_folders(server: TorchlintServer) -> list[Path]:
    """The workspace folders, real paths (the root URI when the client names no folders):
    the only places the server reads projects from and writes caches into."""
    workspace = server.workspace
    named = [folder.uri for folder in workspace.folders.values()] or ([workspace.root_uri] if workspace.root_uri else [])
    return [real(path) for path in map(_path, named) if path is not None]


def _notebook_uri(server: TorchlintServer, uri: str) -> str | None:
    """The notebook ``uri`` names, or holds as one of its cells; None for a text document."""
    workspace = server.workspace
    if workspace.get_notebook_document(notebook_uri=uri) is not None:
        return uri
    notebook = workspace.get_notebook_document(cell_uri=uri)
    return notebook.uri if notebook is not None else None


def _open_documents(server: TorchlintServer) -> list[str]:
    """The URIs of the documents open in the editor (a notebook's own, not its cells')."""
    workspace = server.workspace
    cells = {cell.document for notebook in workspace.notebook_documents.values() for cell in notebook.cells}
    return [uri for uri in workspace.text_documents if uri not in cells] + list(workspace.notebook_documents)


def _open_paths(server: TorchlintServer) -> set[str]:
    """The files the editor has open (their text, not the disk's, is what counts)."""
    found = set()
    for uri in _open_documents(server):
        path = _path(uri)
        if path is not None:
            found.add(absolute(path))
    return found


def _current(server: TorchlintServer, uri: str) -> tuple[str, list[tuple[str, bool, str]] | None]:
    """The text of a document as the editor has it now; a notebook's cells besides."""
    notebook = server.workspace.get_notebook_document(notebook_uri=uri)
    if notebook is None:
        return server.workspace.get_text_document(uri).source, None
    cells = [
        (cell.document, cell.kind == types.NotebookCellKind.Code, server.workspace.get_text_document(cell.document).source)
        for cell in notebook.cells
    ]
    return repr(cells), cells


def lint_document(server: TorchlintServer, uri: str) -> Linted | None:
    """Lint a Python document or a notebook (by its own URI) as the editor has it now, in
    its project's context; None for other documents, or when linting failed (said)."""
    path = _path(uri)
    text, cells = _current(server, uri)
    if path is None or path.suffix != (".ipynb" if cells is not None else ".py"):
        return None
    others = [summary for other, summary in server.summaries.items() if other != uri]
    try:
        open_paths = _open_paths(server)
        context = server.projects.summaries(path, open_paths, workspace_folders(server))
        linted = lint_text(text, path, [*context, *others], cells=cells, elsewhere=server.projects.elsewhere(path, open_paths))
    except Exception as error:  # a bad config, or a bug: say so, and leave no stale diagnostics
        if not isinstance(error, ConfigError):
            log.exception("torchlint: internal error on %s", uri)
        what = str(error) if isinstance(error, ConfigError) else f"internal error: {type(error).__name__}: {error}"
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"torchlint: {what}"))
        server.linted.pop(uri, None)
        return None
    for note in server.projects.notes:
        server.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"torchlint: {note}"))
    server.projects.notes.clear()
    if cells is None:
        linted.codec = server.workspace.get_text_document(uri).position_codec
    server.linted[uri] = linted
    return linted


def views(server: TorchlintServer, uri: str) -> list[tuple[str, Linted]]:
    """``(document URI, its findings)`` for a linted document: itself, or a notebook's
    cells, each with its own findings (lines counted within the cell, as LSP counts them)."""
    linted = server.linted.get(uri)
    if linted is None:
        return []
    if linted.cells is None:
        return [(uri, linted)]
    found = []
    for number, cell in enumerate(linted.cells, start=1):
        document = server.workspace.get_text_document(cell)
        own = [
            replace(f, location=replace(f.location, cell=None)) for f in linted.findings
            if f.location.cell == number or (f.location.cell is None and number == _first_code_cell(server, linted))
        ]
        found.append((cell, Linted(document.source, findings=own, codec=document.position_codec)))
    return found


def _first_code_cell(server: TorchlintServer, linted: Linted) -> int:
    """Where a finding about the whole notebook (it cannot be read) is shown."""
    notebook = server.workspace.get_notebook_document(cell_uri=(linted.cells or [""])[0])
    for number, cell in enumerate(notebook.cells if notebook is not None else [], start=1):
        if cell.kind == types.NotebookCellKind.Code:
            return number
    return 1


def _view(server: TorchlintServer, uri: str) -> Linted | None:
    """The findings of one document URI (a cell's own), linted as the editor has it now."""
    owner = _notebook_uri(server, uri) or uri
    linted = server.linted.get(owner)
    if linted is None or linted.text != _current(server, owner)[0]:
        return None
    return next((view for document, view in views(server, owner) if document == uri), None)


def publish(server: TorchlintServer, uri: str, others_too: bool = True) -> None:
    """Lint the document (a notebook: all its cells) as it is now and send its diagnostics
    (unless the client pulls them); when its steps changed, the other open documents are
    linted again (their per-step findings may change)."""
    server.pending.pop(uri, None)
    owner = _notebook_uri(server, uri) or uri
    linted = lint_document(server, owner)
    if linted is None:
        path = _path(owner)
        if not server.pull and path is not None and path.suffix in (".py", ".ipynb"):  # a failed lint: no stale diagnostics
            for document in _documents_of(server, owner):
                server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=document, diagnostics=[]))
        return
    if not server.pull:
        for document, view in views(server, owner):
            version = server.workspace.get_text_document(document).version
            diagnostics = [diagnostic(f, view) for f in view.findings]
            server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=document, diagnostics=diagnostics, version=version))
    steps_changed = server.summaries.get(owner) != linted.summary
    if linted.summary is not None:
        server.summaries[owner] = linted.summary
    if others_too and steps_changed:
        relint_open(server, but=owner)


def _documents_of(server: TorchlintServer, uri: str) -> list[str]:
    notebook = server.workspace.get_notebook_document(notebook_uri=uri)
    return [cell.document for cell in notebook.cells] if notebook is not None else [uri]


def relint_open(server: TorchlintServer, but: str | None = None) -> None:
    """Every open document again (pushed), or the client asked to pull again."""
    if server.pull:
        for uri in [u for u in server.linted if u != but]:
            server.linted.pop(uri, None)  # linted again when next pulled
        if server.refresh and any(uri != but for uri in _open_documents(server)):
            server.workspace_diagnostic_refresh(None)
        return
    for uri in [u for u in server.linted if u != but]:
        publish(server, uri, others_too=False)


def pulled(server: TorchlintServer, uri: str) -> list[types.Diagnostic]:
    """``textDocument/diagnostic``: the findings of ``uri`` (a cell's own, for a cell),
    linting its document first when the editor's text changed since."""
    view = _view(server, uri)
    if view is None:
        owner = _notebook_uri(server, uri) or uri
        before = server.summaries.get(owner)
        if lint_document(server, owner) is None:
            return []
        linted = server.linted[owner]
        if linted.summary is not None:
            server.summaries[owner] = linted.summary
        if before != linted.summary:
            relint_open(server, but=owner)
        view = _view(server, uri)
    return [diagnostic(f, view) for f in view.findings] if view is not None else []


_CONVERTER = converters.get_converter()


def _result_id(items: list[types.Diagnostic]) -> str:
    """A pulled report's ``resultId``: a digest of its diagnostics, so the same diagnostics
    (the document and its project as they were) are answered ``unchanged``."""
    data = json.dumps(_CONVERTER.unstructure(items), sort_keys=True)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _later(ls: TorchlintServer, uri: str) -> None:
    """Lint ``uri`` once the typing pauses (a burst of keystrokes is linted once)."""
    waiting = ls.pending.pop(uri, None)
    if waiting is not None:
        waiting.cancel()
    ls.pending[uri] = asyncio.get_running_loop().call_later(DEBOUNCE_S, publish, ls, uri)


def _closed(ls: TorchlintServer, uris_: list[str], owner: str) -> None:
    """A closed document is the file on disk again (its project's summaries hold it)."""
    ls.linted.pop(owner, None)
    ls.summaries.pop(owner, None)
    if not ls.pull:
        for uri in uris_:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def build() -> TorchlintServer:
    server = TorchlintServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: TorchlintServer, params: types.InitializeParams) -> None:
        capabilities = params.capabilities
        ls.pull = capabilities.text_document is not None and capabilities.text_document.diagnostic is not None
        workspace = capabilities.workspace
        ls.refresh = bool(workspace and workspace.diagnostics and workspace.diagnostics.refresh_support)

    @server.feature(types.INITIALIZED)
    def initialized(ls: TorchlintServer, params: types.InitializedParams) -> None:
        workspace = ls.client_capabilities.workspace
        watched = workspace.did_change_watched_files if workspace is not None else None
        if watched is not None and watched.dynamic_registration:
            options = types.DidChangeWatchedFilesRegistrationOptions(watchers=[types.FileSystemWatcher(glob_pattern=glob) for glob in WATCHED])
            registration = types.Registration(id="torchlint-watched-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options)
            ls.client_register_capability(types.RegistrationParams(registrations=[registration]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchlintServer, params: types.DidOpenTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchlintServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.projects.forget()  # the disk changed
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: TorchlintServer, params: types.DidChangeTextDocumentParams) -> None:
        if not ls.pull:
            _later(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchlintServer, params: types.DidCloseTextDocumentParams) -> None:
        _closed(ls, [params.text_document.uri], params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: TorchlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        publish(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    async def notebook_change(ls: TorchlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        if not ls.pull:
            _later(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: TorchlintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.projects.forget()
        publish(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: TorchlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        _closed(ls, [cell.uri for cell in params.cell_text_documents], params.notebook_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: TorchlintServer, params: types.DidChangeWatchedFilesParams) -> None:
        """A config file or a source file changed on disk: the project's summaries and
        every open document's findings may change with it."""
        ls.projects.forget()
        relint_open(ls)

    @server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC, types.DiagnosticOptions(identifier="torchlint", inter_file_dependencies=True, workspace_diagnostics=False))
    def document_diagnostic(ls: TorchlintServer, params: types.DocumentDiagnosticParams) -> types.RelatedFullDocumentDiagnosticReport | types.RelatedUnchangedDocumentDiagnosticReport:
        items = pulled(ls, params.text_document.uri)
        result_id = _result_id(items)
        if params.previous_result_id == result_id:  # what the client holds is what it would get
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        view = _view(ls, params.text_document.uri)
        if view is None:
            return []  # the document changed since it was linted; actions come with the next lint
        only = list(params.context.only) if params.context.only is not None else None
        return code_actions(view, params.text_document.uri, params.range, only)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: TorchlintServer, params: types.HoverParams) -> types.Hover | None:
        owner = _notebook_uri(ls, params.text_document.uri) or params.text_document.uri
        view = next((v for document, v in views(ls, owner) if document == params.text_document.uri), None)
        if view is None:
            return None
        position = view.from_client(params.position)
        found = [f for f in view.findings if _contains(_range(f), position)]
        if not found:
            return None
        text = "\n\n---\n\n".join(hover_text(f) for f in found)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text), range=view.to_client(_range(found[0])))

    return server


def serve() -> None:
    """Serve over stdin and stdout until the editor says exit, or a stop signal comes."""
    _end_on_stop_signals()
    build().start_io()


def _end_on_stop_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP end the server at once with the signal's status (130,
    143, 129). pygls reads stdin in a worker thread that nothing interrupts, and on the way
    out waits for its threads: unwinding would hang until the editor closed stdin. Nothing
    is lost: every file the server writes (the cache) is written whole, then renamed."""
    import os
    import signal
    import sys

    from torchlint.stopping import RAISED

    def end(signum: int, frame: object) -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(128 + signum)

    for signum in (signal.SIGINT, *RAISED):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # an editor that ignores one for us is obeyed
            signal.signal(signum, end)
