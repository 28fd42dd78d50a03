"""The words of a branch that runs once per finished sequence (``guard_sequence_ends``), apart from
its libcst test: the settling step reads them on the light path, which imports no libcst."""

from __future__ import annotations

_ONCE_PER_SEQUENCE = "once per finished sequence, when a beam ends"


def sequence_end_words(shown: str) -> str:
    """How often a branch on ``shown`` (``guard_sequence_ends.sequence_end_test``) runs."""
    return f"{_ONCE_PER_SEQUENCE} (`{shown}`)"


def per_finished_sequence(words: str) -> bool:
    """Are ``words`` a guard's (``EveryN.words``) that runs once per finished sequence, no log line's period?"""
    return words.startswith(_ONCE_PER_SEQUENCE)
