"""What the Language Server shows and offers for a document's findings: diagnostics (the
impact as the severity), code actions (a rule's fix, "add ``# noqa: CODE``", a fix-all of
kind ``source.fixAll.torchlint`` that honours a client's ``only``) and hover text."""

from __future__ import annotations

from lsprotocol import types

from torchlint import catalogue
from torchlint.engine.add_noqa import add_noqa
from torchlint.engine.fixes import apply_fixes, keep_untouched
from torchlint.engine.source import line_and_column
from torchlint.findings import LOW, MEDIUM, Finding
from torchlint.report.rule_info import description, rule_url
from torchlint.server.lint import Linted, fix_all

FIX_ALL = "source.fixAll.torchlint"


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


def _action(title: str, uri: str, linted: Linted, after: str, finding: Finding | None, preferred: bool, kind: str = types.CodeActionKind.QuickFix) -> types.CodeAction:
    edit = text_edit(linted.text, after)
    edit.range = linted.to_client(edit.range)
    return types.CodeAction(
        title=title,
        kind=kind,
        diagnostics=[diagnostic(finding, linted)] if finding is not None else None,
        edit=types.WorkspaceEdit(changes={uri: [edit]}),
        is_preferred=preferred,
    )


def _wanted(only: list[str] | None, kind: str) -> bool:
    """Whether a client that asked for the kinds ``only`` wants an action of ``kind``
    (kinds are hierarchical: ``source`` takes ``source.fixAll.torchlint``)."""
    return only is None or any(kind == asked or kind.startswith(asked + ".") for asked in only)


def code_actions(linted: Linted, uri: str, wanted: types.Range, only: list[str] | None = None) -> list[types.CodeAction]:
    """A fix (where the rule has one) and "add # noqa" for each finding in ``wanted``, and
    one action that applies every safe fix of the document (``source.fixAll.torchlint``)."""
    actions = []
    wanted = types.Range(linted.from_client(wanted.start), linted.from_client(wanted.end))
    for finding in linted.findings if _wanted(only, types.CodeActionKind.QuickFix) else []:
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
    if _wanted(only, FIX_ALL):
        after = fix_all(linted)
        if after is not None:
            actions.append(_action("torchlint: apply every safe fix", uri, linted, after, None, False, FIX_ALL))
    return actions


def hover_text(finding: Finding) -> str:
    rule = catalogue.find(finding.code)
    summary = rule.summary if rule is not None else finding.name
    more = description(finding.code)
    url = rule_url(finding.code, finding.name)
    return f"**{finding.code} {finding.name}**: {summary}\n\n{more}\n\n[Rule page]({url})"


def _contains(r: types.Range, position: types.Position) -> bool:
    return (r.start.line, r.start.character) <= (position.line, position.character) <= (r.end.line, r.end.character)
