"""``LengthPolicy``: what a recipe does about long samples and large records, as one value.

The options that decide a sample's length travel together and are checked together (a
``stride`` needs ``overflow="split"``, which needs ``max_length``)::

    Recipe(tokenizer=..., length=LengthPolicy(max_length=4096, overflow="split", stride=256))
    Recipe(tokenizer=..., max_length=4096, overflow="split", stride=256)   # the same

Example:
    >>> LengthPolicy(max_length=8, overflow="split", stride=2).stride
    2
    >>> LengthPolicy(stride=2)
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: stride=2 is the overlap of split windows; it needs overflow='split' (got overflow='truncate')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from chute._spelling import spell_value
from chute.errors import ConfigError
from chute.recipe.choices import OVERFLOW
from chute.recipe.truncate import check_policies
from chute.recipe.windows import check_stride
from chute.sources.record import MAX_RECORD_BYTES

__all__ = ["LENGTH_KEYWORDS", "OVERFLOW", "LengthPolicy"]


@dataclass(frozen=True)
class LengthPolicy:
    """How long a sample may be, what happens to a longer one, and how large a record may be.

    Args:
        max_length: longest sample in tokens, or ``None``.
        overflow: ``truncate``, ``drop`` (rejected as ``too_long``) or ``split`` (windows of
            ``max_length`` tokens, every token kept).
        truncation: with ``truncate``: ``right`` (keep the start), ``left`` (keep the end) or
            ``turns`` (drop whole earliest exchanges).
        stride: with ``split``: tokens each window repeats from the one before, as context.
        max_record_bytes: a larger record (its raw JSON) is rejected as ``record_too_large``
            before it is parsed (``None``: no limit).
    """

    max_length: int | None = None
    overflow: str = "truncate"
    truncation: str = "right"
    stride: int = 0
    max_record_bytes: int | None = MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        limit = self.max_length
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise ConfigError(
                f"expected a positive integer or {spell_value(None)}, got {spell_value(limit)}",
                param="max_length",
            )
        if self.overflow not in OVERFLOW:
            raise ConfigError(
                f"expected one of {', '.join(OVERFLOW)}, got {spell_value(self.overflow)}",
                param="overflow",
            )
        check_policies(limit, self.overflow, self.truncation, "sft")
        object.__setattr__(self, "stride", check_stride(self.stride, limit, self.overflow))
        size = self.max_record_bytes
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ConfigError(
                f"expected a positive number of bytes or {spell_value(None)} (no limit), got "
                f"{spell_value(size)}",
                param="max_record_bytes",
            )

    @classmethod
    def of(cls, length: LengthPolicy | None, keywords: dict[str, Any]) -> LengthPolicy:
        """``length``, or the policy the Recipe's loose keywords give (never both).

        Raises:
            ConfigError: ``length`` and a length keyword set to other than its default.
        """
        if length is None:
            return cls(**keywords)
        if not isinstance(length, LengthPolicy):
            raise ConfigError(
                f"expected a chute.recipe.LengthPolicy, got {type(length).__name__}",
                param="length",
            )
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        given = sorted(k for k, v in keywords.items() if v != defaults[k])
        if given:
            raise ConfigError(
                f"length options given twice: length=LengthPolicy(...) and {', '.join(given)}; "
                f"set them in the LengthPolicy",
                param="length",
            )
        return length


# the Recipe keywords (and config keys) a LengthPolicy stands for: its fields' names
LENGTH_KEYWORDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(LengthPolicy))
