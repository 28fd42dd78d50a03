"""What reports say about a rule: its page's address and its one-paragraph description."""

from __future__ import annotations

import functools
import re

from torchlint import catalogue

# The project's home; rule pages live in its `rules/` folder. One constant, so a move of
# the project changes one line.
HOME = "https://github.com/torchlint/torchlint"
PAGES = f"{HOME}/blob/main/rules/"

SCHEMA_VERSION = 2  # of the JSON finding objects: 2 added `url` and `schema_version`


def rule_url(code: str, name: str) -> str:
    return f"{PAGES}{code}-{name}.md"


@functools.lru_cache(maxsize=None)
def rules_by_code() -> dict[str, catalogue.Rule]:
    return {rule.code: rule for rule in catalogue.all_rules()}


@functools.lru_cache(maxsize=None)
def description(code: str) -> str:
    """The first paragraph of the page's "What it does" section ("What it measures" for a
    runtime rule; the summary without one)."""
    rule = rules_by_code().get(code)
    if rule is None:
        return ""
    page = catalogue.page(rule) or ""
    section = re.search(r"^## What it (?:does|measures)\s*\n+(.+?)(?:\n\s*\n|\Z)", page, re.MULTILINE | re.DOTALL)
    if section is None:
        return rule.summary
    return " ".join(line.strip() for line in section.group(1).splitlines())
