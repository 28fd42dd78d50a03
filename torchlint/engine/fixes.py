"""Apply fixes: libcst node replacements, validated, written atomically."""

from __future__ import annotations

import difflib
import hashlib
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from torchlint.analysis.edits import comments, with_comments
from torchlint.engine.discover import printable
from torchlint.engine.source import Source, newer_python_syntax, notebook_source
from torchlint.engine.tempfiles import make_temporary, remove_stale_temporaries
from torchlint.findings import Finding, FixSafety
from torchlint.textlines import lines_with_ends


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
        new = fix.new if fix.rewrites_comments else _keeping_comments(fix.old, fix.new)
        if new is None:
            continue  # the fix would lose or copy a comment: reported, not applied
        claimed |= inner
        chosen[id(fix.old)] = new
        fixed.append(finding)
    if not chosen:
        return module.code, []
    return module.visit(_Replace(chosen)).code, fixed


def keep_untouched(original: str, fixed: str, module: cst.Module) -> str:
    """``fixed`` with every line the fixes did not change as it was in ``original``.

    libcst does not give back every byte it parsed: a form feed before a statement's
    indentation and the last ``\r`` of a CR-only file are dropped by ``module.code``.
    Lines equal in ``module.code`` and ``fixed`` are the ones no fix touched; those are
    taken from ``original``, so a fix changes only what it fixes."""
    if "\x0c" not in original and not original.endswith("\r"):
        return fixed  # nothing libcst drops: its code is the original's
    regenerated = lines_with_ends(module.code)
    before = lines_with_ends(original)
    if len(before) != len(regenerated):
        return fixed  # not a line-for-line round trip: nothing can be mapped back safely
    after = lines_with_ends(fixed)
    kept: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, regenerated, after, autojunk=False).get_opcodes():
        if tag == "equal":
            kept.extend(before[i1:i2])
        elif tag == "replace" and i2 - i1 == j2 - j1:  # lines rewritten in place keep their form feeds
            kept.extend(_dropped_prefix(old, new) + fixed_line for old, new, fixed_line in zip(before[i1:i2], regenerated[i1:i2], after[j1:j2]))
        else:
            kept.extend(after[j1:j2])
    text = "".join(kept)
    if original.endswith("\r") and not text.endswith(("\r", "\n")):
        text += "\r"  # a changed last line lost the CR-only file's final line break
    return text


def _dropped_prefix(original: str, regenerated: str) -> str:
    """What libcst dropped from the start of ``original`` (form feeds before a statement)."""
    body, again = original.rstrip("\r\n"), regenerated.rstrip("\r\n")
    prefix = body[: len(body) - len(again)]
    return prefix if len(body) > len(again) and body.endswith(again) and not prefix.strip(" \t\x0c") else ""


def _keeping_comments(old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode | None:
    """``new`` with every comment of ``old`` that it dropped put back (each on a line of its
    own); None when ``new`` would hold a comment twice or cannot take the dropped ones."""
    before, after = Counter(comments(old)), Counter(comments(new))
    if after - before:
        return None
    missing = before - after
    lost = []
    for text in comments(old):
        if missing[text]:
            missing[text] -= 1
            lost.append(text)
    return with_comments(new, lost)


def _subtree(node: cst.CSTNode) -> list[cst.CSTNode]:
    from torchlint.analysis.tree import children

    nodes, stack = [], [node]
    while stack:
        current = stack.pop()
        nodes.append(current)
        stack.extend(children(current))
    return nodes


def is_valid_python(code: str) -> bool:
    return python_problem(code) is None


def python_problem(code: str) -> str | None:
    """Why ``code`` (a file as fixed) must not be written, in a few words; None when
    libcst and this Python both accept it (or this Python rejects only syntax of a newer
    Python that libcst parses: PEP 695, PEP 701)."""
    try:
        cst.parse_module(code)
    except cst.ParserSyntaxError as error:
        return f"libcst cannot parse the fixed code (line {error.raw_line}: {error.message})"
    except (RecursionError, MemoryError) as error:
        return f"libcst cannot parse the fixed code ({type(error).__name__})"
    try:
        compile(code, "<fixed>", "exec", flags=0x400, dont_inherit=True)
    except SyntaxError as error:
        if newer_python_syntax(code, error):
            return None
        return f"the fixed code is not valid Python (line {error.lineno}: {error.msg})"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"Python cannot compile the fixed code ({type(error).__name__}: {error})"
    return None


class ChangedOnDiskError(Exception):
    """The file changed between reading and writing: it is left as it is."""


class RefusedWriteError(OSError):
    """The file must not be rewritten (read-only, or a symlink leading out of the tree)."""


@dataclass(frozen=True, slots=True)
class Edit:
    path: Path
    display: str
    before: str
    after: str
    encoding: str
    digest: str
    fixed: int
    original: tuple[Finding, ...] = ()  # the file's findings before fixing, kept if the write fails
    # A notebook's edit: before and after are the file's JSON; cells are (number, old
    # source, new source) of each changed code cell, which is what diff shows.
    cells: tuple[tuple[int, str, str], ...] | None = None
    notes: tuple[str, ...] = ()  # why some fixes were not applied (a notebook's cells)

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def source_before(self) -> Source:
        """What was checked before the fixes: the text, or a notebook's code cells."""
        if self.cells is None:
            return Source(self.display, self.before)
        read = notebook_source(self.display, self.before)
        return read if isinstance(read, Source) else Source(self.display, "")

    def diff(self) -> str:
        if self.cells is None:
            return _unified(self.before, self.after, _patch_name(f"a/{self.display}"), _patch_name(f"b/{self.display}"))
        return "".join(
            _unified(_ended(old), _ended(new), _cell_name(f"a/{self.display}", number), _cell_name(f"b/{self.display}", number))
            for number, old, new in self.cells
        )


def _unified(before: str, after: str, old_name: str, new_name: str) -> str:
    """A unified diff in Python's line model (a form feed or U+2028 does not end a line),
    that patch and git apply read back: a last line without a line end is marked so."""
    old, new = (lines_with_ends(text) if text else [] for text in (before, after))
    out = []
    for line in difflib.unified_diff(old, new, fromfile=old_name, tofile=new_name):
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _ended(cell: str) -> str:
    """A cell's source with a final line end, so its last line reads as a line in a diff."""
    return cell if not cell or cell.endswith(("\n", "\r")) else cell + "\n"


def _cell_name(name: str, number: int) -> str:
    """``a/nb.ipynb:cell 3``, as ruff names a notebook cell in a diff."""
    return _patch_name(name).rstrip("\t") + f":cell {number}"


def _patch_name(name: str) -> str:
    """A diff header name that GNU patch reads back whole: C-quoted (as git does) when it
    holds quotes, backslashes or control characters; ended by a tab when it holds spaces."""
    if any(c in name for c in '"\\') or any(ord(c) < 32 or ord(c) == 127 for c in name):
        escapes = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}
        return '"' + "".join(escapes.get(c, c if ord(c) >= 32 and ord(c) != 127 else f"\\{ord(c):03o}") for c in name) + '"'
    return name + "\t" if any(c.isspace() for c in name) else name


def write_atomically(edit: Edit, roots: tuple[Path, ...] | None = None) -> str | None:
    """Write the fixed text over the file in one rename, keeping its mode and owner;
    returns a note to show when the file had other hard links (they keep the old text).

    Raises ChangedOnDiskError (and writes nothing) when the file no longer holds the
    bytes that were linted, RefusedWriteError for a read-only file or for a symlink
    whose target lies outside ``roots`` (the checked trees), OSError when writing fails.
    """
    target = _target(edit, roots)
    info = os.stat(target)  # before the bytes are read: a later change shows in one or the other
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise RefusedWriteError(f"{edit.display} is read-only; not fixed")
    _unchanged(target, info, edit)
    data = edit.after.encode(edit.encoding)
    remove_stale_temporaries(target.parent)
    # A hard-linked file is replaced too: no write through the shared inode is atomic (a
    # kill between write and truncate left fixed text followed by the old tail), so this
    # name gets the fixed file and the other links keep the old text, whole.
    _replace(target, data, info, lambda: _unchanged(target, info, edit))
    if info.st_nlink > 1:
        others = info.st_nlink - 1
        return f"{edit.display} had {others} other hard link{'s' if others > 1 else ''}: the fixed file replaces this name only, the other{'s keep' if others > 1 else ' keeps'} the old text"
    return None


def _target(edit: Edit, roots: tuple[Path, ...] | None) -> Path:
    """The file to write: a symlink's target, when that lies inside one of ``roots``."""
    target = Path(os.path.realpath(edit.path))
    if roots is None or target == Path(os.path.abspath(edit.path)):
        return target
    if not any(target == root or root in target.parents for root in roots):
        raise RefusedWriteError(f"{edit.display} is a symlink to {printable(str(target))}, outside the checked tree; not fixed")
    return target


def checked_roots(paths: list[Path]) -> tuple[Path, ...]:
    """The trees a run checks: each directory named, and the directory of each file named."""
    return tuple(Path(os.path.realpath(p if p.is_dir() else (p.parent if str(p.parent) else Path(".")))) for p in paths)


def _unchanged(target: Path, info: os.stat_result, edit: Edit) -> None:
    """ChangedOnDiskError unless ``target`` is still the file ``info`` describes (same
    inode, size and modification time) holding the bytes that were linted."""
    now = os.stat(target)
    same = (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    # The hash too: a save within the file system's timestamp granularity keeps size and mtime.
    if not same or hashlib.sha256(target.read_bytes()).hexdigest() != edit.digest:
        raise ChangedOnDiskError(str(edit.path))


def _replace(target: Path, data: bytes, info: os.stat_result, unchanged: Callable[[], None]) -> None:
    """Write a temporary file beside ``target`` and rename it over it, in one step.
    ``unchanged`` raises if the file changed while the temporary was written: it runs
    last, right before the rename, so an edit saved meanwhile is never overwritten."""
    handle, temporary = make_temporary(target)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        _copy_owner_and_mode(temporary, info)
        unchanged()
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _copy_owner_and_mode(temporary: str, info: os.stat_result) -> None:
    if hasattr(os, "chown") and (info.st_uid, info.st_gid) != (os.getuid(), os.getgid()):
        try:
            os.chown(temporary, info.st_uid, info.st_gid)
        except PermissionError:  # only root may give a file away: keep the group at least
            try:
                os.chown(temporary, -1, info.st_gid)
            except PermissionError:
                pass
    os.chmod(temporary, info.st_mode & 0o7777)


def say_notes(edits: list[Edit], say) -> None:  # type: ignore[no-untyped-def]
    """Say why fixes were left out (a notebook change that cannot go back into its cells)."""
    for edit in edits:
        for note in edit.notes:
            say(f"torchlint: {note}")


def write_edits(edits: list[Edit], findings: list[Finding], roots: tuple[Path, ...], say, config=None) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Write each edit; ``(problems fixed, files not written)``. A file that cannot be
    written is said (``say``) and its findings go back into ``findings``, as read."""
    fixed = failed = 0
    for edit in edits:
        if not edit.changed:  # a notebook none of whose fixes could be put back in its cells
            continue
        try:
            note = write_atomically(edit, roots)
            if note is not None:
                say(f"torchlint: {note}")
            fixed += edit.fixed
            continue
        except ChangedOnDiskError:
            say(f"torchlint: {edit.display} changed on disk while it was being checked; not fixed")
        except RefusedWriteError as error:
            say(f"torchlint: {error}")
        except OSError as error:
            say(f"torchlint: cannot write {edit.display}: {error.strerror or error}; not fixed")
        failed += 1
        findings[:] = [f for f in findings if f.location.path != edit.display] + _unfixed(edit, config)
    findings.sort(key=Finding.sort_key)
    return fixed, failed


def _unfixed(edit: Edit, config) -> list[Finding]:  # type: ignore[no-untyped-def]
    """The file's findings as it still is on disk (the fixes were not written)."""
    if edit.original or edit.cells is not None:  # a notebook's edit always has them
        return list(edit.original)
    from torchlint.engine import lint_source  # the engine imports this module

    return lint_source(edit.before, edit.display, config)
