"""What the main process does with each batch report: count, log once, write rejects, budget.

Reports arrive in stream order (the DataLoader returns batches in task order), so counts, the
consecutive-bad run and the rejects file are the same whatever the number of workers.

Example:
    >>> from chute.sample.budget import ErrorBudget
    >>> from chute.errors import SampleError
    >>> from chute.loader.worker import BatchReport
    >>> books = Accounting(ErrorBudget(), rank=0)
    >>> books.add(BatchReport(0, 0, planned=4))
    >>> bad = SampleError("bad_json", "unexpected end", path="d.jsonl", line=3)
    >>> books.add(BatchReport(0, 1, planned=4, bad=[2], errors=[bad]))
    >>> books.stats, books.counters["valid"], books.counters["rejected"]
    ({'bad_json': 1}, 7, 1)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from chute.errors import RejectTally, SampleError
from chute.loader.worker import BatchReport
from chute.sample.budget import ErrorBudget

__all__ = ["COUNTERS", "Accounting"]

log = logging.getLogger("chute.loader")

COUNTERS = ("batches", "samples", "valid", "rejected", "topped_up", "placeholder_batches")


class Accounting:
    """Counters, the reject tally, the rejects file and the error budget of one rank.

    Args:
        budget: the error budget to charge.
        rank: this rank (for messages).
        rejects_path: append rejected records here (each index once), or ``None``.
    """

    def __init__(self, budget: ErrorBudget, rank: int, rejects_path: Path | None = None):
        self.budget = budget
        self.rank = rank
        self.rejects_path = rejects_path
        self.tally = RejectTally()
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.first_errors: dict[str, SampleError] = {}  # this process's first of each kind
        self._written: set[int] = set()

    @property
    def stats(self) -> dict[str, int]:
        return dict(self.tally.counts)

    def add(self, report: BatchReport) -> None:
        """Account for one batch; raises ``ErrorBudgetExceeded`` when the budget is spent."""
        c = self.counters
        bad = len(report.bad)
        c["batches"] += 1
        c["samples"] += report.planned
        c["valid"] += report.planned - bad
        c["topped_up"] += report.topped_up
        if bad == report.planned:  # no valid sample: the batch is a placeholder row
            c["placeholder_batches"] += 1
        if not bad:  # the common case: nothing to log, write or check
            self.budget.add_good(report.planned)
            return
        c["rejected"] += bad
        for error in report.errors:
            self.first_errors.setdefault(error.kind, error)
            if self.tally.add(error):
                log.warning(
                    "rank %d: skipped a bad sample at %s (%s: %s); further %r samples are "
                    "counted, not logged (loader.stats)",
                    self.rank,
                    error.location,
                    error.kind,
                    error.message,
                    error.kind,
                )
        if report.rejects:
            self._write(report.rejects)
        self.budget.update(report.ok, self.tally, where=f" on rank {self.rank}")

    def _write(self, entries: list[dict[str, Any]]) -> None:
        fresh = [e for e in entries if e["index"] not in self._written]
        if fresh:
            self._append(fresh)

    def write_excluded(self, entries: Iterable[dict[str, Any]]) -> None:
        """Append the records the lengths pass left out of the plan, unless the file has lines.

        A file with lines is a resumed run's (or an earlier one's): the excluded records are
        the same every time, written by the run that started it.
        """
        path = self.rejects_path
        if path is not None and not (path.exists() and path.stat().st_size):
            self._append(entries)

    def _append(self, entries: Iterable[dict[str, Any]]) -> None:
        """Append ``entries`` to the rejects file (if any), each index noted as written."""
        if self.rejects_path is None:
            return
        self.rejects_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.rejects_path, "ab") as out:
            for entry in entries:
                out.write(orjson.dumps(entry) + b"\n")
                self._written.add(int(entry["index"]))

    def state_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget.state_dict(),
            "counters": dict(self.counters),
            "rejects": self.tally.to_json(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget.load_state_dict(state["budget"])
        saved = state.get("counters", {})
        self.counters = {k: int(saved.get(k, 0)) for k in COUNTERS}
        rejects = state.get("rejects", {})
        self.tally = RejectTally()
        self.tally.counts.update(rejects.get("by_reason", {}))
        self.tally.examples = {k: list(v) for k, v in rejects.get("examples", {}).items()}
