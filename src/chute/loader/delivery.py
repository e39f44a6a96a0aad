"""Stop a run that delivers nothing: its first samples all bad, or a whole epoch all bad.

The error budget's fraction waits for ``min_samples`` samples (1,000 by default) and its run
limit for ``max_consecutive_bad`` in a row; a smaller dataset whose every record is bad (raw
records read without a recipe, say) would otherwise yield placeholder batches to the end. Two
checks close that gap, both with the budget's ``stop_if_all_bad``:

* **the first samples**: the first ``budget.first_samples`` samples planned after the loader
  starts or is restored, over every rank; all bad stops the run (a few bad records at the start
  of a good dataset do not: one valid sample among them is enough);
* **an epoch**: an epoch iterated from its first batch in which no rank got a valid sample.

Every rank must stop at the same step, or the others wait in their next all-reduce until it
times out. So both checks decide on counts summed over the ranks (one ``all_gather`` where the
first samples are complete, one at the end of each epoch), at steps that every rank computes
alike from the plan: every rank raises at that step, or none does. Without a process group
(one process, or ranks simulated as ``World`` values) each loader decides on its own counts.

Example:
    >>> from chute.loader.accounting import Accounting
    >>> from chute.loader.worker import BatchReport
    >>> from chute.plan import RandomPlanner
    >>> from chute.sample.budget import ErrorBudget
    >>> from chute.errors import SampleError
    >>> plan = RandomPlanner(batch_size=2, shuffle=False).build(4, epoch=0, world_size=1)
    >>> books = Accounting(ErrorBudget(), rank=0)
    >>> check = DeliveryCheck(books, World(), recipe=False)
    >>> bad = SampleError("missing_field", "no input_ids", path="d.jsonl", line=1, field="input_ids")
    >>> for k in range(2):
    ...     report = BatchReport(0, k, planned=2, bad=[0, 1], errors=[bad, bad])
    ...     books.add(report)
    ...     check.after(plan, k, report, epoch=0, fresh=True)
    Traceback (most recent call last):
    ...
    chute.errors.ErrorBudgetExceeded: error budget exceeded on rank 0: the 4 samples of epoch 0 were all bad: ...
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chute.lengths import Lengths
from chute.loader.accounting import Accounting
from chute.loader.collectives import all_gather, dp_shares
from chute.loader.worker import BatchReport
from chute.plan import Plan
from chute.sample.budget import reject_hint
from chute.world import World

__all__ = ["DeliveryCheck"]


class DeliveryCheck:
    """The first-samples and whole-epoch checks of one rank (see the module docstring).

    Args:
        books: this rank's accounting (its budget, tally and first error of each kind).
        world: this rank's place; the checks gather over ``world.world_size`` ranks and count
            each data-parallel rank once (the ranks of a ``cp`` group read the same samples).
        recipe: whether a recipe makes the samples (for the hint: without one, a missing
            ``input_ids`` means the records are not tokenized).
    """

    def __init__(self, books: Accounting, world: World, *, recipe: bool):
        self.books = books
        self.world = world
        self.recipe = recipe
        f = books.budget.max_bad_fraction
        self.enabled = f is not None and f < 1  # otherwise stop_if_all_bad never stops
        self.restart()

    def check_lengths(self, lengths: Lengths | None) -> None:
        """Stop before the first batch when the lengths pass rejected every record.

        Length-aware plans leave the records the lengths pass rejected out of the plan; with
        every record rejected there is nothing to plan. The lengths are the same on every rank,
        so every rank stops here alike.
        """
        if lengths is None or not self.enabled or lengths.num_rejected < len(lengths):
            return
        tally = lengths.tally
        kind = tally.counts.most_common(1)[0][0] if tally.counts else ""
        self.books.budget.stop_if_all_bad(
            len(lengths),
            lengths.num_rejected,
            tally,
            what=f"the {len(lengths)} records the lengths pass read",
            hint=reject_hint(kind, recipe=self.recipe) if kind else "",
        )

    def restart(self) -> None:
        """A new start (the loader made or restored): a new first-samples window, no epoch."""
        # [samples planned over every rank, samples here, bad here]; None once decided
        self._first: list[int] | None = [0, 0, 0] if self.books.budget.first_samples else None
        self._epoch: list[int] | None = None  # [samples here, bad here] of a whole epoch

    def after(self, plan: Plan, k: int, report: BatchReport, *, epoch: int, fresh: bool) -> None:
        """Count batch ``k`` of ``plan``; at a deciding step, raise if nothing was valid.

        Args:
            plan: the plan being run (the same on every rank).
            k: the batch just accounted for.
            report: its report.
            epoch: the epoch it belongs to (for the message).
            fresh: ``plan`` is a whole epoch (not the rest of one re-planned after an elastic
                resume), so batch 0 starts one.

        Raises:
            ErrorBudgetExceeded: on every rank alike, when the first samples or the epoch held
                no valid sample on any rank.
        """
        if not self.enabled:
            return
        bad = len(report.bad)
        if k == 0 and fresh:
            self._epoch = [0, 0]
        first_done = epoch_done = False
        if self._first is not None:
            self._first[0] += sum(len(plan.batch(r, k)) for r in range(plan.world_size))
            self._first[1] += report.planned
            self._first[2] += bad
            first_done = self._first[0] >= self.books.budget.first_samples
        if self._epoch is not None:
            self._epoch[0] += report.planned
            self._epoch[1] += bad
            epoch_done = k == plan.num_batches - 1
        if first_done or epoch_done:
            self._decide(epoch, first_done, epoch_done)

    def _decide(self, epoch: int, first_done: bool, epoch_done: bool) -> None:
        first, whole = self._first or [0, 0, 0], self._epoch or [0, 0]
        mine = (first[1], first[2], whole[0], whole[1], dict(self.books.tally.counts))
        gathered = all_gather(mine, self.world.world_size) if self.world.world_size > 1 else None
        parts: list[Any] = dp_shares(gathered, self.world) if gathered is not None else [mine]
        seen, bad, epoch_seen, epoch_bad = (sum(p[i] for p in parts) for i in range(4))
        kinds: Counter[str] = Counter()
        for part in parts:
            kinds.update(part[4])
        ranks = f" (over {len(parts)} ranks)" if len(parts) > 1 else ""
        if first_done:
            self._first = None
            self._stop(seen, bad, kinds, f"the first {seen} samples of this run{ranks}")
        if epoch_done:
            self._epoch = None
            self._stop(
                epoch_seen, epoch_bad, kinds, f"the {epoch_seen} samples of epoch {epoch}{ranks}"
            )

    def _stop(self, seen: int, bad: int, kinds: Counter[str], what: str) -> None:
        if not seen or bad < seen:
            return
        hint = ""
        if kinds:
            kind = kinds.most_common(1)[0][0]
            first = self.books.first_errors.get(kind)
            hint = reject_hint(kind, field=first.field if first else None, recipe=self.recipe)
        self.books.budget.stop_if_all_bad(
            seen, bad, self.books.tally, what=what, where=f" on rank {self.world.rank}", hint=hint
        )
