"""Check discovery: every module under ``torchlint.checks.<family>`` holds one Check."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from torchlint.checks.base import Check

FAMILIES = {
    "sync": "TL1",
    "data": "TL2",
    "autograd": "TL3",
    "arch": "TL4",
    "precision": "TL5",
    "distributed": "TL6",
}


@lru_cache(maxsize=1)
def all_checks() -> tuple[type[Check], ...]:
    """Every check class, sorted by code."""
    found: list[type[Check]] = []
    for family in FAMILIES:
        package = importlib.import_module(f"{__name__}.{family}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, Check) and value is not Check and value.__module__ == module.__name__:
                    found.append(value)
    return tuple(sorted(found, key=lambda c: c.code))


def by_code() -> dict[str, type[Check]]:
    return {check.code: check for check in all_checks()}
