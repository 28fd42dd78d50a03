"""``torchlint server``: a Language Server over stdio (pygls), for editors.

Diagnostics on open and save, and on change after a short pause (debounced); code
actions for the engine's fixes and for "add ``# noqa: CODE``"; hover over a finding
shows its rule's summary and page. A document is linted with the step summaries of the
other documents the server has linted (``analysis/project.py`` joins them), so a helper
that an open training loop calls every step is flagged in the helper too. Notebooks are
left to ``torchlint check``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls import uris
from pygls.lsp.server import LanguageServer

from torchlint import __version__, catalogue
from torchlint.analysis.project import join
from torchlint.analysis.summary import FileSummary
from torchlint.config import ConfigError, format_size, load_config
from torchlint.engine import Linter, settle_steps
from torchlint.engine.add_noqa import add_noqa
from torchlint.engine.fixes import apply_fixes, keep_untouched
from torchlint.engine.discover import SourceFile
from torchlint.engine.pool import collector_paused, guarded
from torchlint.engine.source import Source, line_and_column, lines_with_ends, syntax_error
from torchlint.findings import LOW, MEDIUM, Finding
from torchlint.report.rule_info import description, rule_url

DEBOUNCE_S = 0.3  # after the last keystroke, before a changed document is linted again
log = logging.getLogger(__name__)


@dataclass
class Linted:
    """A document's text as linted, its tree (for fixes) and findings."""

    text: str
    module: object | None = None
    findings: list[Finding] = field(default_factory=list)
    summary: FileSummary | None = None  # where its steps are, for the other documents' joins
    codec: Any = None  # the document's position codec: torchlint counts code points, the client UTF-16 units

    def to_client(self, r: types.Range) -> types.Range:
        return self.codec.range_to_client_units(lines_with_ends(self.text), r) if self.codec is not None else r

    def from_client(self, position: types.Position) -> types.Position:
        if self.codec is None:
            return position
        converted = self.codec.position_from_client_units(lines_with_ends(self.text), position)
        return types.Position(converted.line, converted.character)


class TorchlintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("torchlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.linted: dict[str, Linted] = {}  # open documents
        self.summaries: dict[str, FileSummary] = {}  # every document linted, open or closed since
        self.pending: dict[str, asyncio.TimerHandle] = {}


def _path(uri: str) -> Path | None:
    fs_path = uris.to_fs_path(uri)
    return Path(fs_path) if fs_path else None


def lint_text(text: str, path: Path, others: Iterable[FileSummary] = ()) -> Linted:
    """Findings of ``text`` as the file ``path``, with its nearest configuration; per-step
    findings settled by joining its summary with ``others``."""
    config = load_config(path.parent, {})
    display = path.name
    try:
        display = path.resolve().relative_to(config.root).as_posix()
    except ValueError:
        pass
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > config.max_file_size:  # as `check` does: libcst needs ~700x a file's size
        message = f"the document is {format_size(size)}, above the {format_size(config.max_file_size)} limit; not checked"
        return Linted(text, None, [syntax_error(display, message, hint="Raise `max-file-size`, or exclude the file")])
    linter = Linter(config)
    file = SourceFile(path, display, config.max_file_size)
    with collector_paused():
        result = guarded(file, False, lambda: linter.lint(Source(display, text), path))  # deep nesting: as `check`
    for error in result.errors:  # a check that raised: its findings are missing, the others stand
        log.error("torchlint: internal error in %s on %s: %s\n%s", error.code, error.path, error.error, error.traceback)
    summary = result.summary
    settle_steps([result], join([*others, *([summary] if summary is not None else [])]))
    return Linted(text, result.module, sorted(result.findings, key=Finding.sort_key), summary)


def _range(finding: Finding) -> types.Range:
    loc = finding.location
    end_line = loc.end_line if loc.end_line is not None else loc.line
    end_column = loc.end_column if loc.end_column is not None else loc.column + 1
    return types.Range(types.Position(loc.line - 1, loc.column - 1), types.Position(end_line - 1, end_column - 1))


def _severity(finding: Finding) -> types.DiagnosticSeverity:
    """An editor's severity by impact: high findings are warnings (errors are TL000's, code
    that cannot be checked), medium ones information, low ones hints (dots, not squiggles)."""
    if finding.code == "TL000":
        return types.DiagnosticSeverity.Error
    return {LOW: types.DiagnosticSeverity.Hint, MEDIUM: types.DiagnosticSeverity.Information}.get(finding.impact, types.DiagnosticSeverity.Warning)


def diagnostic(finding: Finding, linted: Linted) -> types.Diagnostic:
    return types.Diagnostic(
        range=linted.to_client(_range(finding)),
        message=finding.message + (f"\nimpact: {finding.impact} ({finding.impact_reason})" if finding.impact else "")
        + (f"\nhelp: {finding.fix_hint}" if finding.fix_hint else ""),
        severity=_severity(finding),
        code=finding.code,
        code_description=types.CodeDescription(href=rule_url(finding.code, finding.name)),
        source="torchlint",
    )


def publish(server: TorchlintServer, uri: str, others_too: bool = True) -> None:
    """Lint the document as it is now and send its diagnostics; when its steps changed,
    the other open documents are linted again (their per-step findings may change)."""
    server.pending.pop(uri, None)
    path = _path(uri)
    if path is None or path.suffix != ".py":
        return
    document = server.workspace.get_text_document(uri)
    others = [summary for other, summary in server.summaries.items() if other != uri]
    try:
        linted = lint_text(document.source, path, others)
        linted.codec = document.position_codec
    except Exception as error:  # a bad config, or a bug: say so, and leave no stale diagnostics
        if not isinstance(error, ConfigError):
            log.exception("torchlint: internal error on %s", uri)
        what = str(error) if isinstance(error, ConfigError) else f"internal error: {type(error).__name__}: {error}"
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"torchlint: {what}"))
        server.linted.pop(uri, None)
        server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[], version=document.version))
        return
    server.linted[uri] = linted
    diagnostics = [diagnostic(f, linted) for f in linted.findings]
    server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=document.version))
    steps_changed = server.summaries.get(uri) != linted.summary
    if linted.summary is not None:
        server.summaries[uri] = linted.summary
    if others_too and steps_changed:
        for other in [u for u in server.linted if u != uri]:
            publish(server, other, others_too=False)


def _offset_position(text: str, offset: int) -> types.Position:
    return types.Position(*line_and_column(text, offset))


def text_edit(before: str, after: str) -> types.TextEdit:
    """One edit turning ``before`` into ``after``: the span between their common ends."""
    start = 0
    limit = min(len(before), len(after))
    while start < limit and before[start] == after[start]:
        start += 1
    end = 0
    while end < limit - start and before[len(before) - 1 - end] == after[len(after) - 1 - end]:
        end += 1
    return types.TextEdit(
        range=types.Range(_offset_position(before, start), _offset_position(before, len(before) - end)),
        new_text=after[start: len(after) - end],
    )


def _overlaps(a: types.Range, b: types.Range) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (b.start.line, b.start.character) <= (a.end.line, a.end.character)


def _action(title: str, uri: str, linted: Linted, after: str, finding: Finding, preferred: bool) -> types.CodeAction:
    edit = text_edit(linted.text, after)
    edit.range = linted.to_client(edit.range)
    return types.CodeAction(
        title=title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic(finding, linted)],
        edit=types.WorkspaceEdit(changes={uri: [edit]}),
        is_preferred=preferred,
    )


def code_actions(linted: Linted, uri: str, wanted: types.Range) -> list[types.CodeAction]:
    """A fix (where the rule has one) and "add # noqa" for each finding in ``wanted``."""
    actions = []
    wanted = types.Range(linted.from_client(wanted.start), linted.from_client(wanted.end))
    for finding in linted.findings:
        if not _overlaps(_range(finding), wanted) or finding.code == "TL000":
            continue
        if finding.fix is not None and linted.module is not None:
            fixed, applied = apply_fixes(linted.module, [finding])  # type: ignore[arg-type]
            fixed = keep_untouched(linted.text, fixed, linted.module)  # type: ignore[arg-type]
            if applied and fixed != linted.text:
                what = finding.fix.description or finding.fix_hint or "apply the fix"
                safety = " (unsafe)" if finding.fix.safety.value == "unsafe" else ""
                actions.append(_action(f"{finding.code}: {what}{safety}", uri, linted, fixed, finding, finding.fix.safety.value == "safe"))
        plan = add_noqa(linted.text, [finding])
        if plan.added:
            actions.append(_action(f"{finding.code}: add `# noqa: {finding.code}`", uri, linted, plan.text, finding, False))
    return actions


def hover_text(finding: Finding) -> str:
    rule = catalogue.find(finding.code)
    summary = rule.summary if rule is not None else finding.name
    more = description(finding.code)
    url = rule_url(finding.code, finding.name)
    return f"**{finding.code} {finding.name}**: {summary}\n\n{more}\n\n[Rule page]({url})"


def _contains(r: types.Range, position: types.Position) -> bool:
    return (r.start.line, r.start.character) <= (position.line, position.character) <= (r.end.line, r.end.character)


def build() -> TorchlintServer:
    server = TorchlintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchlintServer, params: types.DidOpenTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchlintServer, params: types.DidSaveTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: TorchlintServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        waiting = ls.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        ls.pending[uri] = asyncio.get_running_loop().call_later(DEBOUNCE_S, publish, ls, uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchlintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.linted.pop(uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        linted = ls.linted.get(params.text_document.uri)
        if linted is None or linted.text != ls.workspace.get_text_document(params.text_document.uri).source:
            return []  # the document changed since it was linted; actions come with the next lint
        return code_actions(linted, params.text_document.uri, params.range)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: TorchlintServer, params: types.HoverParams) -> types.Hover | None:
        linted = ls.linted.get(params.text_document.uri)
        if linted is None:
            return None
        position = linted.from_client(params.position)
        found = [f for f in linted.findings if _contains(_range(f), position)]
        if not found:
            return None
        text = "\n\n---\n\n".join(hover_text(f) for f in found)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text), range=linted.to_client(_range(found[0])))

    return server


def serve() -> None:
    """Serve over stdin and stdout until the editor says exit."""
    build().start_io()
