"""Moved to ``chute._internal.config_checks`` (the recipe's config uses it too); kept here."""

from chute._internal.config_checks import (
    SAME_DEFAULT,
    CliFlag,
    Problems,
    apply_overrides,
    check_fields,
    choice,
    kinds_of,
    option,
    raise_problems,
    unknown_keys,
)

__all__ = [
    "SAME_DEFAULT",
    "CliFlag",
    "Problems",
    "apply_overrides",
    "check_fields",
    "choice",
    "kinds_of",
    "option",
    "raise_problems",
    "unknown_keys",
]
