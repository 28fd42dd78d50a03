"""Source variants: one finding fixed in a private copy of the user's module.

Never writes the user's files. The copy is written under the experiment's own
directory and served to the window in place of the original by an import hook
(:mod:`torchlint.profiler.measure`); the script keeps its path, ``__file__``
and working directory, so relative data paths still work.

A finding with an autofix (safe or unsafe) is fixed by the engine's own
machinery (``Linter.lint`` + ``apply_fixes``, exactly what ``torchlint --fix``
does, for that one finding). Rules without a written fix get a mechanical
rewrite that an experiment can make even if a user would write it differently:

- TL301: the statement holding the evaluation call goes under ``with torch.no_grad():``;
- TL302: the stored loss becomes ``(...).detach()``;
- TL203: ``torch.tensor(array)`` becomes ``torch.from_numpy(array)`` (no ``dtype``/``device``);
- TL101/TL102: a value read back every step only to be accumulated or appended stays on
  the device, and is read where it is used (:mod:`torchlint.experiment.deferred`).

Each rewrite is applied through ``apply_fixes`` as a one-node replacement, then the
result must parse and compile, and must differ from the original.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from torchlint.config import Config
from torchlint.engine import Linter
from torchlint.engine.fixes import apply_fixes, is_valid_python
from torchlint.engine.source import read_source
from torchlint.experiment.deferred import Refused, deferred_fixes
from torchlint.findings import Finding, Fix, FixSafety
from torchlint.textlines import python_lines

MECHANICAL = frozenset({"TL301", "TL302", "TL203"})
DEFERRED = frozenset({"TL101", "TL102"})  # several replacements: the call and every read


class VariantError(Exception):
    """No variant can be made for this finding; the message says why."""


@dataclass(frozen=True, slots=True)
class SourceVariant:
    original: str  # absolute path of the user's file (never written)
    copy: str  # the private copy with the one change
    description: str  # what changed, for the report ("autofix (unsafe): ...")
    before: str
    after: str
    line: int | None = None  # the finding's line: its change is the one the report shows

    def summary(self) -> str:
        """The changed line at the finding (else the first changed line) as it reads after the fix."""
        old, new = python_lines(self.before), python_lines(self.after)
        changes = [op for op in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if op[0] != "equal"]
        at = [op for op in changes if self.line is not None and op[1] < self.line <= max(op[2], op[1] + 1)]
        for tag, i1, _i2, j1, j2 in at + changes:
            if j2 > j1:
                text = " / ".join(line.strip() for line in new[j1:j2])
                text = text if len(text) <= 80 else text[:77] + "..."
                return f"`{text}` at {Path(self.original).name}:{i1 + 1}"
        return Path(self.original).name


def _same_place(a: Finding, code: str, line: int, column: int | None) -> bool:
    return a.code == code and a.line == line and (column is None or a.location.column == column)


def _node_at(wrapper: MetadataWrapper, finding: Finding, types: tuple[type, ...]) -> cst.CSTNode:
    positions = wrapper.resolve(PositionProvider)
    loc = finding.location
    want = (loc.line, loc.column - 1)
    end = (loc.end_line, (loc.end_column or 1) - 1) if loc.end_line is not None else None
    matches = []
    for node, rng in positions.items():
        if not isinstance(node, types) or (rng.start.line, rng.start.column) != want:
            continue
        if end is not None and (rng.end.line, rng.end.column) != end:
            continue
        matches.append(node)
    if not matches:
        raise VariantError(f"no {'/'.join(t.__name__ for t in types)} at {loc.line}:{loc.column}")
    return matches[0]


def _torch_spelling(module: cst.Module) -> str:
    """``torch`` when the module binds it at top level, else an import expression."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if alias.asname is None and cst.helpers.get_full_name_for_node(alias.name) == "torch":
                            return "torch"
    return '__import__("torch")'


def _parenthesised(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _mechanical(finding: Finding, wrapper: MetadataWrapper) -> Fix:
    module = wrapper.module
    if finding.code == "TL301":
        call = _node_at(wrapper, finding, (cst.Call,))
        parents = wrapper.resolve(ParentNodeProvider)
        stmt: cst.CSTNode = call
        while not isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            stmt = parents[stmt]
        if not isinstance(stmt, cst.SimpleStatementLine):
            raise VariantError("the evaluation call is in a compound statement's header")
        wrapped = cst.With(
            items=[cst.WithItem(cst.parse_expression(f"{_torch_spelling(module)}.no_grad()"))],
            body=cst.IndentedBlock(body=[stmt.with_changes(leading_lines=[])]),
            leading_lines=stmt.leading_lines,
        )
        return Fix(stmt, wrapped, FixSafety.UNSAFE, "with torch.no_grad(): around the evaluation statement")
    if finding.code == "TL302":
        node = _node_at(wrapper, finding, (cst.Call, cst.AugAssign, cst.Assign))
        value = node.args[0].value if isinstance(node, cst.Call) else node.value  # type: ignore[attr-defined]
        detached = cst.Call(func=cst.Attribute(value=_parenthesised(value), attr=cst.Name("detach")))
        return Fix(value, detached, FixSafety.UNSAFE, "the stored loss .detach()ed")
    if finding.code == "TL203":
        call = _node_at(wrapper, finding, (cst.Call,))
        if any(arg.keyword is not None for arg in call.args) or len(call.args) != 1:
            raise VariantError("torch.from_numpy takes the array alone (the call passes dtype/device)")
        new = call.with_changes(func=cst.parse_expression(f"{_torch_spelling(module)}.from_numpy"))
        return Fix(call, new, FixSafety.UNSAFE, "torch.from_numpy instead of the copy")
    raise VariantError(f"{finding.code} has no autofix and no mechanical rewrite")


def make_variant(finding: Finding, out_dir: Path, config: Config | None = None) -> SourceVariant:
    """The file of ``finding`` (an absolute path) with only that finding fixed, written
    to ``out_dir``; :class:`VariantError` when no such variant can be made."""
    path = Path(finding.path)
    source = read_source(path, str(path))
    if isinstance(source, Finding) or source.cells is not None:
        raise VariantError(f"{path.name}: not a readable Python file")
    linter = Linter(config or Config(), debug=False)
    result = linter.lint(source, path)
    if result.module is None:
        raise VariantError(f"{path.name}: does not parse")
    column = finding.location.column if finding.location.column > 1 else None
    found = [f for f in result.findings if _same_place(f, finding.code, finding.line, column)]
    if not found:
        raise VariantError(f"{finding.code} is no longer reported at {path.name}:{finding.line}")
    target = found[0]
    if target.fix is not None:
        description = f"autofix ({target.fix.safety.value})" + (f": {target.fix.description}" if target.fix.description else "")
        new_text, fixed = apply_fixes(result.module, [target])
    elif target.code in MECHANICAL:
        wrapper = MetadataWrapper(result.module, unsafe_skip_copy=True)
        fix = _mechanical(target, wrapper)
        description = f"mechanical: {fix.description}"
        new_text, fixed = apply_fixes(wrapper.module, [dataclasses.replace(target, fix=fix)])
    elif target.code in DEFERRED:
        wrapper = MetadataWrapper(result.module, unsafe_skip_copy=True)
        try:
            fixes = deferred_fixes(target, wrapper)
        except Refused as exc:
            raise VariantError(str(exc)) from None
        description = f"mechanical: {fixes[0].description}"
        new_text, fixed = apply_fixes(wrapper.module, [dataclasses.replace(target, fix=fix) for fix in fixes])
        if len(fixed) != len(fixes):
            raise VariantError("not every read of the kept value could be rewritten")
    else:
        raise VariantError(f"{target.code} has no autofix and no mechanical rewrite")
    if not fixed or new_text == source.text:
        raise VariantError("the fix changed nothing")
    if not is_valid_python(new_text):
        raise VariantError("the fixed file does not compile")
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / path.name
    copy.write_text(new_text, encoding=source.encoding)
    return SourceVariant(str(path), str(copy), description, source.text, new_text, finding.line)
