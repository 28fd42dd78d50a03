"""Apply fixes: libcst node replacements, validated, written atomically."""

from __future__ import annotations

import difflib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from torchlint.findings import Finding, FixSafety


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def, override]
        return self.replacements.get(id(original_node), updated_node)


def applicable(findings: list[Finding], unsafe: bool) -> list[Finding]:
    """Findings whose fix may be applied under the chosen safety level."""
    allowed = {FixSafety.SAFE, FixSafety.UNSAFE} if unsafe else {FixSafety.SAFE}
    return [f for f in findings if f.fix is not None and f.fix.safety in allowed]


def apply_fixes(module: cst.Module, findings: list[Finding]) -> tuple[str, list[Finding]]:
    """New source with the fixes of ``findings`` applied, and the findings fixed.

    Fixes whose nodes overlap an earlier fix are left for the next round.
    """
    chosen: dict[int, cst.CSTNode] = {}
    claimed: set[int] = set()
    fixed: list[Finding] = []
    for finding in findings:
        fix = finding.fix
        assert fix is not None
        inner = {id(n) for n in _subtree(fix.old)}
        if inner & claimed:
            continue
        claimed |= inner
        chosen[id(fix.old)] = fix.new
        fixed.append(finding)
    if not chosen:
        return module.code, []
    return module.visit(_Replace(chosen)).code, fixed


def _subtree(node: cst.CSTNode) -> list[cst.CSTNode]:
    from torchlint.analysis.tree import children

    nodes, stack = [], [node]
    while stack:
        current = stack.pop()
        nodes.append(current)
        stack.extend(children(current))
    return nodes


def is_valid_python(code: str) -> bool:
    try:
        cst.parse_module(code)
        compile(code, "<fixed>", "exec", flags=0x400, dont_inherit=True)
    except (cst.ParserSyntaxError, SyntaxError, ValueError):
        return False
    return True


class ChangedOnDiskError(Exception):
    """The file changed between reading and writing: it is left as it is."""


@dataclass(frozen=True, slots=True)
class Edit:
    path: Path
    display: str
    before: str
    after: str
    encoding: str
    digest: str
    fixed: int

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=f"a/{self.display}",
                tofile=f"b/{self.display}",
            )
        )


def write_atomically(edit: Edit) -> None:
    """Replace the file's content in one rename, keeping its permissions.

    Raises ChangedOnDiskError (and writes nothing) when the file no longer holds
    the bytes that were linted.
    """
    path = edit.path
    current = path.read_bytes()
    if hashlib.sha256(current).hexdigest() != edit.digest:
        raise ChangedOnDiskError(str(path))
    mode = os.stat(path).st_mode
    directory = path.resolve().parent
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".torchlint", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(edit.after.encode(edit.encoding))
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path.resolve())
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
