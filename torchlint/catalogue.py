"""The rule catalogue: every rule's metadata, and its hand-written page in rules/."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from torchlint.checks import FAMILIES, all_checks
from torchlint.findings import SYNTAX_ERROR, FixSafety

FAMILY_TITLES = {
    "TL0": "parse problems",
    "TL1": "host/device synchronization and transfers",
    "TL2": "data loading and tensor creation",
    "TL3": "autograd and memory",
    "TL4": "model architecture",
    "TL5": "precision and compilation",
    "TL6": "multi-GPU and distributed",
}
assert set(FAMILIES.values()) <= set(FAMILY_TITLES)


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    name: str
    summary: str
    default: bool
    fix: FixSafety

    @property
    def family(self) -> str:
        return self.code[:3]


def rules() -> list[Rule]:
    """Every rule, TL000 first, sorted by code."""
    code, name = SYNTAX_ERROR
    found = [Rule(code, name, "A file that cannot be read or parsed", True, FixSafety.NONE)]
    for check in all_checks():
        found.append(Rule(check.code, check.name, check.summary(), check.default, check.fix_safety))
    return found


def defaults() -> dict[str, bool]:
    """Every code mapped to whether it runs without configuration."""
    return {rule.code: rule.default for rule in rules()}


def find(code_or_name: str) -> Rule | None:
    wanted = code_or_name.strip()
    for rule in rules():
        if rule.code == wanted.upper() or rule.name == wanted.lower():
            return rule
    return None


def _pages_dir() -> Path | None:
    packaged = resources.files("torchlint") / "_rules"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "rules"
    return checkout if checkout.is_dir() else None


def page_path(rule: Rule) -> Path | None:
    directory = _pages_dir()
    if directory is None:
        return None
    candidate = directory / f"{rule.code}-{rule.name}.md"
    return candidate if candidate.is_file() else None


def page(rule: Rule) -> str | None:
    """The rule's Markdown page from the installed wheel or the checkout."""
    path = page_path(rule)
    return path.read_text(encoding="utf-8") if path is not None else None
