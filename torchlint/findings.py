"""Locations, findings and fixes: the vocabulary both halves of torchlint share."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar

_Plain = TypeVar("_Plain", bound=type)


SYNTAX_ERROR = ("TL000", "syntax-error")  # the rules the engine reports itself, not a check
UNUSED_NOQA = ("TL001", "unused-noqa")  # from the `# noqa` comments, once the checks have run
ENGINE_CODES = frozenset({SYNTAX_ERROR[0], UNUSED_NOQA[0]})


# What fixing a finding is worth (analysis/impact.py has the model, docs/impact.md the table).
HIGH, MEDIUM, LOW = "high", "medium", "low"
IMPACTS = (HIGH, MEDIUM, LOW)
IMPACT_RANK = {HIGH: 0, MEDIUM: 1, LOW: 2}
DEFAULT_MIN_IMPACT = MEDIUM  # what `check` shows unless told: what is worth acting on


def at_least(impact: str, floor: str) -> bool:
    """Whether ``impact`` is ``floor`` or higher (``--min-impact``); a finding without an
    impact (a runtime one, an old cache entry) is always shown."""
    return IMPACT_RANK.get(impact, 0) <= IMPACT_RANK[floor]


def pickled_by_fields(cls: _Plain) -> _Plain:
    """``cls`` (a slotted dataclass: plain data) pickled as its constructor and the tuple of
    its fields' values.

    A worker's results and every cache entry are tens of thousands of such objects, and the
    ``__getstate__``/``__setstate__`` that ``dataclass(frozen=True, slots=True)`` writes look
    the fields up again for each object: unpickling a run's results spent two thirds of its
    time there. Apply it above ``@dataclass``."""
    every = fields(cls)
    if hasattr(cls, "__post_init__") or not all(f.init for f in every):
        # rebuilding through the constructor would run, or miss, what the dataclass's own __init__ does
        raise TypeError(f"{cls.__name__}: only a dataclass whose __init__ takes every field, and does nothing more, is pickled by its fields")
    names = tuple(f.name for f in every)
    values = attrgetter(*names) if len(names) > 1 else (lambda obj: (getattr(obj, names[0]),))

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls


class FixSafety(enum.Enum):
    """How much a fix can be trusted to keep behaviour (ruff's fix safety)."""

    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Location:
    """A place in a source file; lines and columns are 1-based."""

    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None
    cell: int | None = None  # the notebook cell, for .ipynb files (lines count within it)

    def key(self) -> tuple[str, int]:
        """The (file, line) pair findings and measurements are joined on."""
        return (self.path, self.line)

    def __str__(self) -> str:
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.line}:{self.column}"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Fix:
    """A rewrite of one CST node: ``old`` replaced by ``new`` (libcst nodes)."""

    old: Any
    new: Any
    safety: FixSafety = FixSafety.SAFE
    description: str = ""
    rewrites_comments: bool = False  # the fix is to a comment itself (TL001's): its comments are not kept as they were


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in the source (or, with no rule page, at run time).

    ``related`` holds other places where the finding's cost shows up, e.g. the
    lines where a flagged ``DataLoader`` is iterated.
    """

    code: str
    name: str
    message: str
    location: Location
    fix_hint: str = ""
    fix: Fix | None = field(default=None, compare=False)
    related: tuple[Location, ...] = ()
    impact: str = field(default="", compare=False)  # HIGH, MEDIUM or LOW ("": not assessed)
    impact_reason: str = field(default="", compare=False)  # one line: how often, and what it costs

    @property
    def path(self) -> str:
        return self.location.path

    @property
    def line(self) -> int:
        return self.location.line

    def sort_key(self) -> tuple[str, int, int, int, str]:
        """By path, notebook cell, line, column and code."""
        loc = self.location
        return (loc.path, loc.cell or 0, loc.line, loc.column, self.code)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of a finding (stable; documented in docs/output.md)."""
        loc = self.location
        return {
            "path": loc.path,
            "line": loc.line,
            "column": loc.column,
            "end_line": loc.end_line if loc.end_line is not None else loc.line,
            "end_column": loc.end_column if loc.end_column is not None else loc.column,
            "cell": loc.cell,
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "fix_hint": self.fix_hint,
            "fixable": self.fix is not None,
            "fix_safety": self.fix.safety.value if self.fix else None,
            "impact": self.impact or None,
            "impact_reason": self.impact_reason or None,
            "related": [
                {"path": r.path, "line": r.line, "column": r.column, "cell": r.cell} for r in self.related
            ],
        }
