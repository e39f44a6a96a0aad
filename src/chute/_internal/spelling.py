"""Moved to ``chute._spelling`` (below ``errors``, which names parameters with it); kept here."""

from chute._spelling import (
    PYTHON,
    Spelling,
    current_spelling,
    spell,
    spell_set,
    spell_value,
    spelled_as,
    spelling,
)

__all__ = [
    "PYTHON",
    "Spelling",
    "current_spelling",
    "spell",
    "spell_set",
    "spell_value",
    "spelled_as",
    "spelling",
]
