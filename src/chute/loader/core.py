"""``Loader``: runs a plan in DataLoader workers, skips bad samples, resumes exactly.

Design (see ``docs/loader.md`` for pictures): the plan lives in the main process only. A
sampler turns it into ``BatchTask``s (epoch, step, the batch's global ids); torch's DataLoader
deals tasks to its workers round-robin and returns their results in task order; each worker
builds a whole batch (read, recipe, collate) and sends it back with a ``BatchReport`` of its
rejects. The main process merges the reports, keeps the error budget, and counts the batches
it yields, which is all a resume needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np

from chute._internal.lazy_torch import require_torch
from chute.errors import ConfigError, LoaderTimeout, RejectTally
from chute.loader.accounting import Accounting
from chute.loader.collectives import check_lockstep, check_same_start, sum_over_ranks
from chute.loader.delivery import DeliveryCheck
from chute.loader.dispatch import TaskSampler, make_dataloader, next_batch, shutdown_workers
from chute.loader.mixture_binding import (
    DatasetBooks,
    bind_mixture,
    mixture_state,
    restore_mixture,
    switched,
)
from chute.loader.options import (
    PathLike,
    as_source,
    check_augment,
    check_tokenized,
    fingerprint_of,
    geometry_follows_stage,
    lengths_recipe,
    media_guard,
    media_stage_for,
    pad_id_from,
    planning_inputs,
    rejects_path_for,
)
from chute.loader.planning import (
    check_collate,
    check_excluded,
    check_packed_collate,
    excluded_entries,
    resolve_plan,
    slice_collate,
    slice_options,
    split_source,
    task_of,
    with_positions,
)
from chute.loader.state import (
    STATE_FORMAT,
    STATE_VERSION,
    check_compatible,
    read_position,
    recipe_changes,
    recipe_fingerprint,
)
from chute.loader.worker import BatchBuilder, BatchReport
from chute.loader.workers import WorkerOptions
from chute.plan import Plan, Planner, continue_epoch
from chute.recipe.contract import as_recipe
from chute.sample.budget import ErrorBudget
from chute.world import World

__all__ = ["Loader"]

log = logging.getLogger("chute.loader")


class Loader:
    """Batches of tensors for this rank: every sample once per epoch, the same count on every rank.

    Args:
        source: a ``JsonlSource``, a path / glob / list of paths (opened as one), a chute
            cache (``open_cache(DIR)``, or its directory), or any map-style dataset (``len``
            and ``dataset[i]``).
        recipe: a ``Recipe``, or any recipe meeting ``chute.recipe.contract.RecipeContract``
            (``task``, ``overflow``, ``max_length``, ``stride``, ``media``: what plans, lengths
            and collate read), or a plain function ``recipe(record) -> sample`` (a dict with
            ``input_ids``, optional ``labels``), read as an SFT recipe without a length limit
            or media; a callable declaring part of the contract is a ``ConfigError``. Raises
            ``SampleError`` for a bad record. ``None``: records are pre-tokenized samples
            (``{"input_ids": [...], "labels": [...]}``). With a cache, the recipe is only
            checked against the one that built it (``FingerprintMismatch`` if it differs).
        batch_size: samples per batch on each rank.
        shuffle: a new shuffle every epoch (``False``: source order).
        seed: the shuffle's seed; the same seed gives the same stream.
        drop_last: deal only full steps of ``dp_size * batch_size`` samples.
        wrap: with ``drop_last=False``, fill the last step with samples from the start of the
            epoch so every batch is full (those samples are seen twice that epoch).
        num_workers: DataLoader worker processes (0: build batches in this process).
        pin_memory: pin batches in page-locked memory for fast ``.to(device, non_blocking=True)``.
        persistent_workers: keep workers alive between epochs.
        prefetch_factor: batches each worker prepares ahead (default 2).
        world: this process's place (default ``World.detect()``). Plans deal over its
            ``dp_size`` data-parallel ranks: every rank of one context-, sequence-, tensor- or
            pipeline-parallel group gets the same batches.
        collate: ``collate(samples) -> dict of tensors`` (default ``Collate``); must accept ``[]``.
        pad_id: the padding token (default: the recipe's ``pad_id`` if it has one, else 0).
        pad_to_multiple_of: round padded lengths up to a multiple (e.g. 8).
        max_bad_fraction: stop when more than this share of samples is bad (``None``: never).
        max_consecutive_bad: stop after this many bad samples in a row (``None``: never).
        budget_min_samples: samples to see before ``max_bad_fraction`` applies. Before that
            only data with nothing valid in it stops the run, on every rank at the same step:
            the first 100 samples (over every rank) all bad, or a whole epoch all bad.
        rejects: append rejected records to this JSONL file (per rank: ``name.rank3.jsonl``,
            or put ``{rank}`` in the name).
        top_up: refill batches that lost samples with repeats of their valid samples (counted
            in ``summary()["topped_up"]``); off by default so valid samples stay exactly-once.
        timeout: seconds to wait for one batch from the workers before ``LoaderTimeout``
            (``0``: wait forever; only with ``num_workers > 0``).
        sample_timeout: seconds one sample may take before it is skipped as
            ``sample_timeout`` (``None``: no limit).
        plan: the batching strategy: ``"random"``, ``"grouped"`` (length-grouped batches),
            ``"budget"`` (token-budget batches), ``"packed"`` (several samples per row), or a
            ``Planner``. Length-aware plans get every sample's length once, before the first
            batch (``chute.lengths.lengths_of``: cached; see ``docs/padding.md``).
        plan_options: options of a named plan, e.g. ``{"max_length": 4096}`` for ``packed``
            (default: the recipe's ``max_length``) or ``{"max_tokens": 16384}`` for ``budget``.
        multiprocessing_context: start method for workers (default: torch's).
        workers: the worker keywords above as one ``WorkerOptions`` value (then leave them
            out): ``workers=WorkerOptions(num_workers=8, prefetch_factor=4)``.
        budget: ``max_bad_fraction``, ``max_consecutive_bad`` and ``budget_min_samples`` as
            one ``ErrorBudget`` (its limits; the Loader counts in a fresh one).
        media: load each sample's images (videos, audio) in the workers, after the recipe: a
            ``chute.media.MediaStage``, or a transform (``ImageTransform``,
            ``DynamicResolution``) used with default decoding. Bad media are counted skips;
            batches gain ``pixel_values``, ``image_counts`` (and ``image_grid_thw``); the
            collate is wrapped in ``MediaCollate``. See docs/media.md. Over a cache built
            with ``--pixels`` the default is the cache's own stage (``False``: none).
        mixture: over the caches of a preprocessed mixture (``open_cache(DIR)``), the
            ``Mixture`` whose amounts to use (default: the one they were built from); its
            datasets' recipe options are checked against their caches. To read a mixture's
            files, pass the ``Mixture`` (or its YAML file) as ``source``. See docs/mixtures.md.
        split: over a mixture, ``"train"`` (default) or ``"val"``: the datasets' validation
            hold-outs, each once per epoch, never overlapping train.
        slices: with ``plan="packed"``, give each rank its slice of every batch instead of the
            whole: ``"cp"``, the zig-zag slice of ``world.cp_rank`` (samples padded to
            ``2 * cp``: ring attention, TransformerEngine THD), or ``"sp"``, the contiguous
            slice of ``world.sp_rank`` (DeepSpeed Ulysses). Labels come shifted
            (``shift_labels``). See ``chute.collate.slices`` and docs/long-context.md.

    Example:
        >>> data = [{"input_ids": [i] * (1 + i % 3)} for i in range(10)]
        >>> loader = Loader(data, batch_size=4, world=World(rank=1, world_size=2), seed=0)
        >>> len(loader), [b["sample_ids"].tolist() for b in loader]
        (2, [[4, 8, 0, 1], [9]])
    """

    def __init__(
        self,
        source: Any,
        recipe: Callable[[Any], Any] | None = None,
        *,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        wrap: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        world: World | None = None,
        collate: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        pad_id: int | None = None,
        pad_to_multiple_of: int | None = None,
        max_bad_fraction: float | None = 0.25,
        max_consecutive_bad: int | None = 1000,
        budget_min_samples: int = 1000,
        rejects: PathLike | None = None,
        top_up: bool = False,
        timeout: float = 300.0,
        sample_timeout: float | None = 60.0,
        plan: str | Planner = "random",
        plan_options: Mapping[str, Any] | None = None,
        multiprocessing_context: Any = None,
        media: Any = None,
        mixture: Any = None,
        split: str = "train",
        slices: str | None = None,
        workers: WorkerOptions | None = None,
        budget: ErrorBudget | None = None,
    ):
        require_torch()
        self.world = world if world is not None else World.detect()
        if not isinstance(self.world, World):
            raise ConfigError(f"world must be a chute.World, got {type(world).__name__}")
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last), ("wrap", wrap)):
            if not isinstance(flag, bool | np.bool_):  # "no" or "false" from a config is truthy
                raise ConfigError(f"{name} must be True or False, got {flag!r}", param=name)
        # one dataset is a mixture of one: its source and recipe as given, its plan unchanged
        self.mixture = bind_mixture(source, recipe, mixture, split, self.world)
        source, recipe = self.mixture.source, self.mixture.recipe
        recipe = as_recipe(recipe)  # checked once: what plans, lengths and collate read of it
        self.split = split
        self.source = as_source(source)
        recipe = geometry_follows_stage(recipe, media, self.source)  # boxes moved as pixels are
        self.num_samples = len(self.source)
        if self.num_samples == 0:
            raise ConfigError(f"the source {self.source!r} has no samples; nothing to load")
        self.recipe = recipe
        error_budget = budget_of(budget, max_bad_fraction, max_consecutive_bad, budget_min_samples)
        check_recipe = getattr(self.source, "check_recipe", None)
        if (
            recipe is None
            and not callable(check_recipe)
            and error_budget.max_bad_fraction is not None
        ):
            # before a lengths pass reads them all; a cache holds samples, tokenized already
            check_tokenized(self.source)
        if recipe is not None and callable(check_recipe):
            # A cache holds the recipe's samples already: check it is this recipe's, then read.
            check_recipe(recipe)
            recipe = None
        # overflow="split": the samples are the documents' windows, each with its own id
        # (its windows counted from the lengths the plan uses: the widest under crops, below)
        self.source = split_source(
            self.source, lengths_recipe(recipe, media), self.world.local_rank
        )
        self.num_samples = len(self.source)
        check_collate(collate, pad_id, pad_to_multiple_of)
        self.slices = slices
        plan_options = slice_options(
            slices, self.world, plan, plan_options, task_of(self.source, recipe)
        )
        setup = resolve_plan(
            *planning_inputs(self.source, recipe, media),
            plan,
            plan_options,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            wrap=wrap,
            pad_id=pad_id_from(self.recipe, pad_id),
            pad_to_multiple_of=pad_to_multiple_of,
            local_rank=self.world.local_rank,
        )
        if setup.packed and top_up:
            raise ConfigError("top_up=True cannot refill packed rows; drop it with plan='packed'")
        # setup.planner stays the inner one: setup.packed and the collate checks read it
        self.planner = self.mixture.planner(setup.planner, split=split, seed=seed, shuffle=shuffle)
        self.lengths, self.excluded = setup.lengths, setup.excluded
        self.datasets = DatasetBooks(self.mixture, setup.lengths)
        self.workers = WorkerOptions.of(
            workers,
            {
                "num_workers": num_workers,
                "pin_memory": pin_memory,
                "persistent_workers": persistent_workers,
                "prefetch_factor": prefetch_factor,
                "multiprocessing_context": multiprocessing_context,
                "timeout": timeout,
                "sample_timeout": sample_timeout,
            },
        )
        self.num_workers = self.workers.num_workers
        self.pin_memory = self.workers.pin_memory
        self.persistent_workers = self.workers.persistent_workers
        self.prefetch_factor = self.workers.prefetch_factor
        self.timeout = self.workers.timeout
        self.sample_timeout = self.workers.sample_timeout
        self.multiprocessing_context = self.workers.multiprocessing_context
        check_packed_collate(setup, collate)
        self.collate = with_positions(collate, setup) or setup.collate
        # bound to the recipe itself (also for a cache, whose samples it made)
        self.media, self.collate = media_stage_for(
            media, self.recipe, self.collate, self.source, setup.lengths
        )
        self.collate = slice_collate(self.collate, slices, self.world)
        check_augment(self.media, recipe)
        self.rejects_path = rejects_path_for(rejects, self.world) if rejects is not None else None
        self.books = Accounting(
            error_budget,
            self.world.rank,
            self.rejects_path,
        )
        self._delivery = DeliveryCheck(self.books, self.world, recipe=self.recipe is not None)
        self._delivery.check_lengths(setup.lengths)  # every record rejected by the lengths pass
        check_excluded(setup, self.books.budget)
        lengths = setup.lengths
        # excluded from every rank's plan: rank 0's file lists them
        if lengths is not None and lengths.num_rejected and self.world.rank == 0:
            self.books.write_excluded(excluded_entries(self.source, recipe, lengths))
        self._builder = BatchBuilder(
            self.source,
            recipe,
            self.collate,
            sample_timeout=self.sample_timeout,
            top_up=bool(top_up),
            keep_rejects=self.rejects_path is not None,
            media=self.media,
            media_guard=self.media is None and media_guard(media, self.recipe, self.source),
            seed=seed,
        )
        self._fingerprint = fingerprint_of(self.source)
        self._recipe_fingerprint = recipe_fingerprint(self.recipe)
        self._epoch, self._consumed = 0, 0
        self._segments: list[tuple[int, int]] = []
        # a loaded state that had finished its epoch: that epoch (``epoch`` names the next
        # one, where the stream goes on), and whether the next iteration yields nothing
        # (see set_epoch)
        self._done_epoch: int | None = None
        self._empty_pass = False
        self._plan_key: tuple[Any, ...] | None = None
        self._plan_cache: Plan | None = None
        self._sampler = TaskSampler()
        self._dataloader: Any = None
        self._generation = 0
        self._started = False  # whether a pass began (the ranks' starts were compared)
        if self.plan.num_batches == 0:
            raise ConfigError(
                f"this plan yields no batches: {self.num_samples} samples, batch_size="
                f"{batch_size} x dp_size={self.world.dp_size} with drop_last=True; lower "
                f"batch_size or set drop_last=False"
            )

    # -- the stream --------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the loader is in (or has just finished).

        Right after ``load_state_dict`` of a state saved after an epoch's last batch, the next
        epoch: where the stream goes on (the loop ``for epoch in range(loader.epoch, ...)``
        starts there).
        """
        return self._epoch if self._done_epoch is None else self._done_epoch + 1

    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, batches yielded in it)``: where the stream stands, as ``state_dict`` says.

        After a state saved at an epoch's end this is that epoch, finished, while ``epoch``
        names the next one (where the stream goes on).
        """
        return self._epoch, self._consumed

    @property
    def plan(self) -> Plan:
        """The plan of the current epoch over the data-parallel ranks (``plan.batch(dp_rank, k)``)."""
        key = (self._epoch, tuple(self._segments), self.world.dp_size)
        if key != self._plan_key or self._plan_cache is None:
            self._plan_cache = continue_epoch(
                self.planner,
                self.num_samples,
                epoch=self._epoch,
                segments=self._segments,
                world_size=self.world.dp_size,
            )
            self._plan_key = key
        return self._plan_cache

    @property
    def batches_per_epoch(self) -> int:
        """Batches per rank in a fresh epoch on the current data-parallel size."""
        fresh = self.planner.build(
            self.num_samples, epoch=self._epoch, world_size=self.world.dp_size
        )
        return fresh.num_batches

    @property
    def batches_left(self) -> int:
        """Batches of the current epoch not yet yielded on this rank (0 when it is finished)."""
        return self.plan.num_batches - self._consumed

    def __len__(self) -> int:
        """Batches the next ``iter(loader)`` yields on this rank (equal on every rank)."""
        if self._empty_pass:
            return 0  # set_epoch named the epoch a loaded state had finished
        left = self.plan.num_batches - self._consumed
        if left > 0:
            return left
        nxt = self.planner.build(
            self.num_samples, epoch=self._epoch + 1, world_size=self.world.dp_size
        )
        return nxt.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (from its start); the current epoch keeps its position.

        Calling ``set_epoch(e)`` with the epoch the loader is already in is a no-op, so a
        resumed loader continues mid-epoch inside the usual ``for epoch in ...:
        loader.set_epoch(epoch)`` loop. Without ``set_epoch``, iterating a finished epoch
        starts the next one.

        A state saved after an epoch's last batch goes on with the next epoch
        (``loader.epoch`` names it). A loop that counts epochs itself may still name the
        finished one first: ``set_epoch`` of that epoch then makes the next iteration yield
        nothing, so neither loop repeats an epoch or runs one more.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise ConfigError(f"epoch must be an int >= 0, got {epoch!r}")
        done, self._done_epoch = self._done_epoch, None
        self._empty_pass = done is not None and int(epoch) == done
        if self._empty_pass:
            self._done_epoch = done  # named again before iterating: still nothing of it left
            return
        if int(epoch) != self._epoch:
            self._epoch, self._consumed, self._segments = int(epoch), 0, []
            self._generation += 1  # an iterator still running belongs to the old position

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._generation += 1
        return self._run(self._generation)

    def _run(self, generation: int) -> Iterator[dict[str, Any]]:
        if not self._started:  # once, before anything that could differ between ranks
            self._started = True
            check_same_start(self._start_of_pass(), self.world)
        empty, self._empty_pass, self._done_epoch = self._empty_pass, False, None
        if empty:  # set_epoch named the epoch a loaded state had finished
            return
        if self._consumed >= self.plan.num_batches:  # a finished epoch: on to the next
            self._epoch, self._consumed, self._segments = self._epoch + 1, 0, []
        plan, start = self.plan, self._consumed
        if start >= plan.num_batches:
            return
        rank = self.world.dp_rank  # computed from the layout on each read: once per epoch
        self._sampler.set(plan, rank, self._epoch, start)
        if self._dataloader is None:
            self._dataloader = make_dataloader(
                self._builder,
                self._sampler,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                timeout=self.timeout,
                prefetch_factor=self.prefetch_factor,
                persistent_workers=self.persistent_workers,
                multiprocessing_context=self.multiprocessing_context,
                seed=int(self.planner.params().get("seed", 0)),
            )
        it = iter(self._dataloader)
        try:
            for k in range(start, plan.num_batches):
                if generation != self._generation:
                    raise RuntimeError(
                        "this iterator is stale: the loader was re-positioned since it started "
                        "(a newer iter(loader), set_epoch() to another epoch, or "
                        "load_state_dict()); a Loader is one stream with one position"
                    )
                batch, report = self._next(it, plan, k)
                self.books.add(report)
                self._delivery.after(plan, k, report, epoch=self._epoch, fresh=not self._segments)
                ids_of = partial(plan.batch, rank, k)  # read only when the books need them
                self.datasets.add(ids_of, report.planned, report.bad, batch)
                self._consumed = k + 1
                yield batch
        finally:
            if not self.persistent_workers:
                shutdown_workers(it)

    def _start_of_pass(self) -> dict[str, Any]:
        """What every rank's first pass must agree on (``check_same_start``)."""
        finished = self._consumed >= self.plan.num_batches
        return {
            "samples": self.num_samples,
            "batches": self.plan.num_batches,
            "epoch": self._epoch + 1 if finished and not self._empty_pass else self._epoch,
            "consumed": 0 if finished else self._consumed,
            "planner": repr(sorted(self.planner.params().items())),
        }

    def _next(self, it: Iterator[Any], plan: Plan, k: int) -> tuple[dict[str, Any], BatchReport]:
        try:
            return next_batch(it, plan, self.world.dp_rank, self._epoch, k, self.timeout)
        except LoaderTimeout:
            self._dataloader = None  # persistent workers may hold the stuck sample: start anew
            raise

    # -- reports -----------------------------------------------------------------------------

    @property
    def stats(self) -> dict[str, int]:
        """Rejected samples on this rank by reason (``{"bad_json": 3, ...}``)."""
        return self.books.stats

    @property
    def tally(self) -> RejectTally:
        """The rejects on this rank by reason, with the first few examples of each."""
        return self.books.tally

    @property
    def budget(self) -> ErrorBudget:
        """The error budget of this rank (raises ``ErrorBudgetExceeded`` when spent)."""
        return self.books.budget

    def summary(self) -> dict[str, Any]:
        """Counts on this rank: batches, samples planned, valid, rejected by reason, top-ups."""
        out = {
            "rank": self.world.rank,
            "epoch": self._epoch,
            **self.books.counters,
            "excluded": sum(self.excluded.values()),
            "excluded_by_reason": dict(self.excluded),
            "by_reason": self.stats,
            "examples": self.tally.examples,
            # per dataset (one dataset read alone: "data"): samples, valid, rejected, tokens
            "datasets": self.datasets.summary(),
        }
        return out

    def dataset_report(self) -> str:
        """Per dataset of a mixture, on this rank: samples, valid, rejected, tokens, token share.

        A text table for training logs (``summary()["datasets"]`` has the numbers); one dataset
        read alone is one row, ``data``.
        """
        return self.datasets.table()

    def stats_all_ranks(self) -> dict[str, int]:
        """``stats`` summed over every rank; a collective: call it on all ranks at once.

        Ranks that share a data-parallel rank (``cp``, ``sp``, ``tp``, ``pp``) read the same
        samples: only the first of each group counts, so every sample counts once.
        """
        return sum_over_ranks(self.stats, self.world)

    def check_lockstep(self) -> None:
        """Verify every rank stands at the same position (a collective: call it on all ranks).

        Raises:
            LockstepError: naming each rank's position, when they differ.
        """
        check_lockstep((self._epoch, self._consumed, [list(s) for s in self._segments]))

    # -- resume ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands and what shaped it: small, JSON-serialisable, per rank.

        Every rank's state has the same position (ranks consume batches in lockstep), so any
        rank's state resumes any rank, including on a different world size. ``world_size`` is
        the data-parallel size the plan dealt over (``World.dp_size``); ``layout`` records the
        other parallel sizes, for information.
        """
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "batches": self._consumed,
            "world_size": self.world.dp_size,
            "segments": [[w, k] for w, k in self._segments],
            "rank": self.world.rank,
            **_layout_of(self.world),
            "plan": self.planner.params(),
            "source": self._fingerprint,
            "recipe": self._recipe_fingerprint,
            **self.books.state_dict(),
            **mixture_state(self.planner, self._epoch),
            "datasets": self.datasets.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], *, new_mixture: bool = False) -> None:
        """Continue exactly where ``state`` left off (any ``num_workers``, any world size).

        With the world size the state was saved on, the stream continues with the batches that
        would have come next. With another world size, what the epoch still owes is re-planned
        over the new ranks, so the epoch still sees every sample exactly once.

        Args:
            state: a ``state_dict()`` of this loader's configuration (any rank's).
            new_mixture: over a mixture whose amounts (weight, repeat, samples, max_samples,
                epoch_samples) changed since the state was saved: continue with the new
                amounts from the current step; the rest of the epoch is the new selection
                minus what was already delivered in it (docs/mixtures.md). Without it such a
                state is refused.

        Raises:
            StateMismatch: the state belongs to another plan or dataset (names what differs).
        """
        planner, previous = restore_mixture(self.planner, state, new_mixture=new_mixture)
        expected = planner.params()
        if previous is not None:  # the amounts may differ; everything else must not
            expected = {**expected, "mixture": state["plan"]["mixture"]}
        check_compatible(state, {"plan": expected, "source": self._fingerprint})
        changed = recipe_changes(state, self._recipe_fingerprint)
        if changed is not None:
            log.warning(
                "the loader state was saved with another recipe (%s): the run goes on from the "
                "saved position, its samples made by this recipe",
                changed,
            )
        self._generation += 1  # an iterator still running belongs to the old position
        self._delivery.restart()
        self._done_epoch, self._empty_pass = None, False
        self.planner, self._plan_cache, self._plan_key = planner, None, None
        position = read_position(state)
        epoch, batches, saved_world, segments = position
        if previous is not None:
            self.planner, finished = switched(planner, previous, self.num_samples, position)
            self._epoch, self._segments = epoch, []
            self._consumed = self.plan.num_batches if finished else 0
            self._load_books(state)
            self._past_a_finished_epoch()
            return
        saved = continue_epoch(
            self.planner, self.num_samples, epoch=epoch, segments=segments, world_size=saved_world
        )
        if batches > saved.num_batches:
            raise ConfigError(
                f"the loader state says {batches} batches of epoch {epoch} were consumed, but "
                f"that epoch has {saved.num_batches} on {saved_world} ranks; was it edited?"
            )
        self._epoch = epoch
        if saved_world == self.world.dp_size:
            self._segments, self._consumed = segments, batches
        elif batches == saved.num_batches:  # the epoch is complete: nothing to re-plan
            self._segments = []
            self._consumed = self.plan.num_batches
        elif batches == 0 and not segments:
            self._segments, self._consumed = [], 0
        else:  # elastic: the rest of the epoch over the new ranks
            self._segments, self._consumed = [*segments, (saved_world, batches)], 0
        self._load_books(state)
        self._past_a_finished_epoch()

    def _past_a_finished_epoch(self) -> None:
        """A state saved after an epoch's last batch goes on with the next epoch's start.

        ``loader.epoch`` then names the next epoch. Naming the finished one, the usual loop
        (``for epoch in range(loader.epoch, epochs): loader.set_epoch(epoch); ...``) iterated
        it, which starts the next one: every later epoch one slot early, and one more in all.
        """
        if self._consumed >= self.plan.num_batches:
            self._done_epoch = self._epoch

    def _load_books(self, state: dict[str, Any]) -> None:
        # The counts (samples, rejects, the budget's tally) are the saving rank's own: restored
        # only from this rank's own state. Every rank loading rank 0's state (the usual
        # checkpoint), or a rank new after an elastic resume, would count rank 0's samples
        # again; those start from zero (the position is any rank's, as before).
        saved_rank = state.get("rank")
        if saved_rank is not None and int(saved_rank) != self.world.rank:
            return
        self.books.load_state_dict(state)
        # absent from the states one-dataset loaders saved before they had per-dataset counts
        self.datasets.load_state_dict(state.get("datasets"))

    def __repr__(self) -> str:
        return (
            f"Loader({self.source!r}, {self.planner!r}, rank={self.world.rank}/"
            f"{self.world.world_size}{_layout_text(self.world)}, num_workers={self.num_workers}, epoch={self._epoch}, "
            f"batch={self._consumed}/{self.plan.num_batches})"
        )


def _layout_of(world: World) -> dict[str, Any]:
    """The parallel sizes beside data parallelism, for the state (only when any is set)."""
    sizes = {n: getattr(world, n) for n in ("cp", "sp", "tp", "pp") if getattr(world, n) > 1}
    return {"layout": {**sizes, "order": world.order}} if sizes else {}


def _layout_text(world: World) -> str:
    shown = [f"{n}={getattr(world, n)}" for n in ("cp", "sp", "tp", "pp") if getattr(world, n) > 1]
    return f" ({', '.join(shown)}, dp_size={world.dp_size})" if shown else ""


def budget_of(
    budget: ErrorBudget | None,
    max_bad_fraction: float | None,
    max_consecutive_bad: int | None,
    min_samples: int,
) -> ErrorBudget:
    """A fresh ``ErrorBudget`` with ``budget``'s limits, or the loose keywords' (never both).

    Raises:
        ConfigError: ``budget`` and a budget keyword set to other than its default.
    """
    loose = ErrorBudget(max_bad_fraction, max_consecutive_bad, min_samples)
    if budget is None:
        return loose
    if not isinstance(budget, ErrorBudget):
        raise ConfigError(
            f"budget must be a chute.ErrorBudget, got {type(budget).__name__}", param="budget"
        )
    given = [
        name
        for name, value, default in (
            ("max_bad_fraction", max_bad_fraction, 0.25),
            ("max_consecutive_bad", max_consecutive_bad, 1000),
            ("budget_min_samples", min_samples, 1000),
        )
        if value != default
    ]
    if given:
        raise ConfigError(
            f"error budget given twice: budget=ErrorBudget(...) and {', '.join(given)}; set "
            f"them in the ErrorBudget",
            param="budget",
        )
    return ErrorBudget(budget.max_bad_fraction, budget.max_consecutive_bad, budget.min_samples)
