"""The error budget: how much bad data a run tolerates before it stops with a summary.

A few bad records in a million are normal and are skipped. A dataset that is 40% broken, or a
stretch of thousands of bad records in a row (a wrong format, a truncated file), must stop the
run early and loudly, not train quietly on what is left.

Example:
    >>> from chute.errors import RejectTally, SampleError
    >>> budget = ErrorBudget(max_bad_fraction=0.5, min_samples=4)
    >>> tally = RejectTally()
    >>> budget.update([True, True, False, True], tally)  # 25% bad: fine
    >>> for _ in range(3):
    ...     _ = tally.add(SampleError("bad_json", "unexpected end", path="d.jsonl", line=9))
    >>> budget.update([False, False, False], tally)
    Traceback (most recent call last):
    ...
    chute.errors.ErrorBudgetExceeded: error budget exceeded: 4 of 7 samples were bad (57.1%), ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute._internal.spelling import current_spelling, spell, spell_set, spell_value
from chute.errors import SAMPLE_ERROR_KINDS, ConfigError, ErrorBudgetExceeded, RejectTally

__all__ = ["FIRST_SAMPLES", "ErrorBudget", "reject_hint"]

# A run whose first samples (over every rank) are all bad stops there, before ``min_samples``:
# a stream with nothing valid in it is broken, not unlucky.
FIRST_SAMPLES = 100


@dataclass
class ErrorBudget:
    """Stops a run when bad samples are too frequent or come in too long a run.

    Counts are per process (per rank in the loader): with a shuffled plan each rank sees a
    random share of the data, so its fraction estimates the dataset's.

    Args:
        max_bad_fraction: the largest tolerated share of bad samples, in ``[0, 1]``; checked
            once ``min_samples`` samples were seen. ``None`` disables the check.
        max_consecutive_bad: the longest tolerated run of bad samples in stream order.
            ``None`` disables the check.
        min_samples: samples to see before the fraction applies (a few early bad records must
            not stop a run). Before that, only a stream with nothing valid in it stops: the
            first ``first_samples`` samples all bad (``stop_if_all_bad``).
    """

    max_bad_fraction: float | None = 0.25
    max_consecutive_bad: int | None = 1000
    min_samples: int = 1000
    seen: int = field(default=0, init=False)
    bad: int = field(default=0, init=False)
    run: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        f = self.max_bad_fraction
        if f is not None and (
            isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f <= 1.0
        ):
            raise ConfigError(
                f"must be a number in [0, 1] or {spell_value(None)} (no limit), got {f!r}",
                param="max_bad_fraction",
            )
        c = self.max_consecutive_bad
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(
                f"max_consecutive_bad must be a positive int or None (no limit), got {c!r}"
            )
        m = self.min_samples
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise ConfigError(f"min_samples must be an int >= 0, got {m!r}")

    def exceeded_by(self, bad: int, total: int) -> bool:
        """Whether ``bad`` of ``total`` is more than ``max_bad_fraction`` allows.

        For counts over a whole dataset (``chute validate``): every sample was seen, so
        ``min_samples`` does not apply.

        Example:
            >>> ErrorBudget().exceeded_by(24, 24), ErrorBudget().exceeded_by(1, 300)
            (True, False)
        """
        f = self.max_bad_fraction
        return f is not None and total > 0 and bad > f * total

    @property
    def fraction(self) -> float:
        return self.bad / self.seen if self.seen else 0.0

    @property
    def first_samples(self) -> int:
        """Samples at the start of a run that, all bad, stop it (0: no such check).

        ``FIRST_SAMPLES``, or ``min_samples`` where that is smaller (the fraction applies from
        there anyway); 0 where ``max_bad_fraction`` tolerates a stream of bad samples only
        (``None`` or 1).

        Example:
            >>> ErrorBudget().first_samples, ErrorBudget(min_samples=20).first_samples
            (100, 20)
            >>> ErrorBudget(max_bad_fraction=None).first_samples
            0
        """
        f = self.max_bad_fraction
        return 0 if f is None or f >= 1 else min(FIRST_SAMPLES, self.min_samples)

    def stop_if_all_bad(
        self, seen: int, bad: int, tally: RejectTally, *, what: str, where: str = "", hint: str = ""
    ) -> None:
        """Raise when every one of ``seen`` samples was bad: nothing in them to train on.

        Applies whatever ``min_samples`` is (a stream that holds no valid sample at all is not
        a few early bad records), unless ``max_bad_fraction`` is ``None`` or 1.

        Args:
            seen: samples counted (over every rank, where the caller summed them).
            bad: how many of them were bad.
            tally: the rejects by reason, for the summary.
            what: which samples, for the message (``"the first 100 samples of this run"``).
            where: added to the message, e.g. ``" on rank 3"``.
            hint: the likely fix (``reject_hint``), or ``""``.

        Raises:
            ErrorBudgetExceeded: naming the samples, the hint and the rejects by reason.

        Example:
            >>> from chute.errors import SampleError
            >>> tally = RejectTally()
            >>> _ = tally.add(SampleError("bad_json", "unexpected end", path="d.jsonl", line=2))
            >>> ErrorBudget().stop_if_all_bad(3, 2, tally, what="epoch 0")  # one was good
            >>> ErrorBudget().stop_if_all_bad(3, 3, tally, what="the 3 samples of epoch 0")
            Traceback (most recent call last):
            ...
            chute.errors.ErrorBudgetExceeded: error budget exceeded: the 3 samples of epoch 0 were all bad: ...
        """
        f = self.max_bad_fraction
        if f is None or seen <= 0 or bad < seen or bad <= f * seen:
            return
        fix = f" {hint[:1].upper()}{hint[1:]}." if hint else ""
        raise ErrorBudgetExceeded(
            f"error budget exceeded{where}: {what} were all bad: nothing to train on."
            f"{fix}\nBy reason:\n{tally.summary()}\nFix or filter "
            f"the data (`chute validate PATH` lists every bad record with its line), or pass "
            f"the Loader max_bad_fraction=None if this is expected.",
            tally,
        )

    def update(
        self, ok: Sequence[bool] | np.ndarray, tally: RejectTally, *, where: str = ""
    ) -> None:
        """Count samples in stream order (``True`` = good); raise when the budget is spent.

        Args:
            ok: one flag per sample, in the order the samples were planned.
            tally: every reject so far, for the summary by reason.
            where: added to the message, e.g. ``" on rank 3"``.

        Raises:
            ErrorBudgetExceeded: with counts, the limit that was crossed and a summary by reason.
        """
        flags = np.asarray(ok, dtype=bool)
        if flags.size == 0:
            return
        good = np.flatnonzero(flags)
        longest = self._longest_bad_run(flags, good)
        self.seen += int(flags.size)
        self.bad += int(flags.size - good.size)
        limit = self.max_consecutive_bad
        if limit is not None and longest >= limit:
            raise ErrorBudgetExceeded(
                f"error budget exceeded{where}: {longest} bad samples in a row, reaching "
                f"max_consecutive_bad={limit} ({self.bad} of {self.seen} samples bad so far)."
                f"{self._advice(tally, 'max_consecutive_bad')}",
                tally,
            )
        f = self.max_bad_fraction
        if f is not None and self.seen >= self.min_samples and self.bad > f * self.seen:
            raise ErrorBudgetExceeded(
                f"error budget exceeded{where}: {self.bad} of {self.seen} samples were bad "
                f"({self.fraction:.1%}), above max_bad_fraction={f} (checked once "
                f"min_samples={self.min_samples} samples were seen)."
                f"{self._advice(tally, 'max_bad_fraction')}",
                tally,
            )

    def add_good(self, n: int) -> None:
        """Count ``n`` good samples in a row (the common case; nothing to check)."""
        if n:
            self.seen += n
            self.run = 0

    def _longest_bad_run(self, flags: np.ndarray, good: np.ndarray) -> int:
        if good.size == 0:
            self.run += int(flags.size)
            return self.run
        longest = self.run + int(good[0])  # the run carried in, plus the bad ones leading here
        if good.size > 1:
            longest = max(longest, int(np.diff(good).max()) - 1)
        self.run = int(flags.size - 1 - good[-1])
        return max(longest, self.run)

    @staticmethod
    def _advice(tally: RejectTally, knob: str) -> str:
        return (
            f"\nBy reason:\n{tally.summary()}\nFix or filter the data (`chute validate PATH` "
            f"lists every bad record with its line), or raise {knob} if this is expected."
        )

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen, "bad": self.bad, "run": self.run}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen, self.bad, self.run = int(state["seen"]), int(state["bad"]), int(state["run"])


def reject_hint(kind: str, *, field: str | None = None, recipe: bool = True) -> str:
    """The likely fix for data whose rejects are mostly of ``kind`` (``""`` when none is known).

    Args:
        kind: the dominant reject kind (``SAMPLE_ERROR_KINDS``).
        field: the field the rejects name, when known (``input_ids``).
        recipe: whether a recipe made the samples (``False``: records were read as samples).

    Example:
        >>> reject_hint("missing_field", field="input_ids", recipe=False)
        'the records are not tokenized: pass a Recipe (recipe=Recipe(tokenizer=...)) to build input_ids and labels from them'
        >>> reject_hint("image_missing")
        'the images are not where the records point: check media_root (the folder they are relative to)'
    """
    if kind == "missing_field" and not recipe and field in ("input_ids", None):
        how = (
            "a Recipe (recipe=Recipe(tokenizer=...))"
            if current_spelling().front == "python"
            else spell("tokenizer")
        )
        return f"the records are not tokenized: pass {how} to build input_ids and labels from them"
    if kind in ("missing_field", "unknown_format") and recipe:
        return (
            f"the records' keys do not fit the format: check {spell('format')} (and "
            f"{spell('columns')} for other key names) against a record"
        )
    if kind in ("bad_json", "bad_utf8", "not_an_object", "nul_byte", "empty_record"):
        return "the file is not JSON lines (or a JSON array) of objects: check the path"
    if kind == "image_missing":
        return (
            f"the images are not where the records point: check {spell('media_root')} (the "
            f"folder they are relative to)"
        )
    if kind == "unsafe_path":
        return (
            f"media paths leave the media root: set {spell('media_root')} to the folder above them"
        )
    if kind == "too_long":
        return (
            f"the samples are longer than {spell('max_length')}: raise it, or keep them with "
            f"{spell_set('overflow', 'truncate')} or {spell_set('overflow', 'split')}"
        )
    if kind == "media_too_long_for_row":
        return (
            f"the samples with media are longer than a packed row: raise the plan's "
            f"{spell('max_length')}, or the recipe's truncation to it keeps images whole"
        )
    if kind == "no_trainable_tokens":
        return (
            f"no token is left to train on: check {spell('train_on')} and the template's roles, "
            f"or raise {spell('max_length')} where truncation cut the answers"
        )
    meaning = SAMPLE_ERROR_KINDS.get(kind)
    return f"most were {kind}: {meaning}" if meaning else ""
