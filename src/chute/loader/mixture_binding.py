"""The Loader over a mixture: binding it, per-dataset counts, and resuming across a mix change.

``Loader(Mixture(...))`` reads the datasets' files with their own recipes;
``Loader(open_cache(DIR))`` reads a preprocessed mixture (``mixture=`` gives other amounts);
``split="val"`` deals the validation hold-outs instead. The plan is the usual one, wrapped in a
``MixturePlanner`` over each epoch's selection, so the resume state is the usual one too; its
``plan.mixture`` records every dataset's amounts. Any other source is one dataset, bound as a
mixture of one (``OpenedMixture.of_one``: its planner is the usual plan unchanged, its state
has no ``plan.mixture``), so the Loader has one path for one dataset and many. A state saved under other amounts is refused,
naming each change, unless ``load_state_dict(state, new_mixture=True)``: then the current epoch
continues with the new mixture's selection minus what the old one already delivered (recorded in
the state as ``mixture_switch``), and later epochs are the new mixture's own.

Example:
    >>> loader = Loader(Mixture([...], recipe={...}), batch_size=8)  # doctest: +SKIP
    >>> loader.summary()["datasets"]["alpaca"]["samples"]  # doctest: +SKIP
    96
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from chute._internal.fields import diff_fields
from chute.errors import ConfigError, StateMismatch
from chute.loader.state import content_identity
from chute.mixture import Mixture, OpenedMixture, open_cached_mixture, open_mixture
from chute.mixture.config import is_mixture_config
from chute.plan import continue_epoch
from chute.plan.mixture_planner import MixturePlanner, Switch
from chute.world import World

__all__ = ["DatasetBooks", "bind_mixture", "mixture_state", "restore_mixture", "switched"]

# What a mixture change may change: the amounts (and the pool sizes they imply).
_AMOUNT = re.compile(
    r"^plan\.mixture\.(epoch_samples|datasets\.[^.]+\.(weight|repeat|samples|max_samples|pool))$"
)


def bind_mixture(source: Any, recipe: Any, mixture: Any, split: str, world: World) -> OpenedMixture:
    """The opened mixture the Loader reads; an ordinary source is a mixture of one.

    Example:
        >>> bound = bind_mixture([{"input_ids": [1]}], None, None, "train", World())
        >>> type(bound).__name__, bound.names
        ('SoleDataset', ['data'])
    """
    from chute.cache.cacheset import CacheSet, is_cache_set, open_cache_set

    if isinstance(source, str | os.PathLike) and is_mixture_config(source):
        source = Mixture.load(source)
    if isinstance(source, str | os.PathLike) and is_cache_set(source):
        from chute.cache import open_cache

        source = open_cache_set(source, open_cache)
    if isinstance(source, Mixture):
        if mixture is not None:
            raise ConfigError(
                "pass the mixture once: as the source, or mixture= over caches", param="mixture"
            )
        if recipe is not None:
            raise ConfigError(
                "a mixture builds each dataset's recipe from its own recipe options; leave "
                "recipe out (set run-wide options in Mixture(recipe=...))",
                param="recipe",
            )
        return open_mixture(source, local_rank=world.local_rank)
    if isinstance(source, CacheSet):
        if recipe is not None:
            raise ConfigError(
                "the caches were built by the mixture's recipes; to check them, pass "
                "mixture=Mixture(..., recipe=...) instead of recipe=",
                param="recipe",
            )
        return open_cached_mixture(source, mixture, local_rank=world.local_rank)
    if mixture is not None:
        raise ConfigError(
            "mixture= chooses the amounts over caches built by `chute preprocess` of a mixture "
            "(Loader(open_cache(DIR), mixture=...)); to read a mixture's files, pass it as the "
            "source: Loader(Mixture(...))",
            param="mixture",
        )
    sole = OpenedMixture.of_one(source, recipe)
    sole.pools(split)  # split="val" refused now, before any file is opened
    return sole


# -- resume ------------------------------------------------------------------------------------


def mixture_state(planner: MixturePlanner, epoch: int) -> dict[str, Any]:
    """The state's ``mixture_switch`` while the epoch of a mixture change runs, else nothing."""
    switch = planner.switch
    return {"mixture_switch": switch.to_json()} if switch and switch.epoch == epoch else {}


def restore_mixture(
    planner: MixturePlanner, state: Mapping[str, Any], *, new_mixture: bool
) -> tuple[MixturePlanner, MixturePlanner | None]:
    """``(planner to resume with, the state's planner)``; the second only after a mix change.

    Applies the state's own ``mixture_switch``. When only amounts differ from the state's
    mixture: refuses (``StateMismatch`` naming each change and the option) unless
    ``new_mixture``; then returns the state's planner too, so the caller can continue the
    epoch from where it stood.
    """
    selection = planner.selection
    if selection is None:
        # one dataset: nothing of a mixture to restore (a mixture's state is refused by
        # check_compatible, naming plan.mixture)
        return planner, None
    saved = (state.get("plan") or {}).get("mixture")
    switch = state.get("mixture_switch")
    if switch is not None and int(switch.get("epoch", -1)) == int(state.get("epoch", -2)):
        planner = planner.with_switch(Switch.from_json(switch))
    if not isinstance(saved, Mapping):
        return planner, None
    diffs = diff_fields(
        content_identity(saved), content_identity(planner.identity()), "plan.mixture"
    )
    if not diffs or not all(_AMOUNT.match(path) for path, _, _ in diffs):
        return planner, None  # the same, or more than amounts: check_compatible names it
    if not new_mixture:
        lines = "\n".join(f"  {path}: state {a!r}, this loader {b!r}" for path, a, b in diffs)
        raise StateMismatch(
            f"cannot resume: the mixture changed since the state was saved:\n{lines}\n"
            f"Resume with the mixture the state was saved with, or continue this run with the "
            f"new one from the current step: loader.load_state_dict(state, new_mixture=True) "
            f"(the rest of this epoch is the new mixture's selection minus the samples already "
            f"delivered in it; later epochs are the new mixture's own)."
        )
    previous = planner.with_selection(selection.with_amounts(saved))
    if planner.switch is not None:
        previous = previous.with_switch(planner.switch)
    return planner.with_switch(None), previous


def switched(
    planner: MixturePlanner,
    previous: MixturePlanner,
    num_samples: int,
    position: tuple[int, int, int, list[tuple[int, int]]],
) -> tuple[MixturePlanner, bool]:
    """``planner`` continuing ``previous``'s epoch; ``True`` when that epoch was finished."""
    epoch, batches, saved_world, segments = position
    old = continue_epoch(
        previous, num_samples, epoch=epoch, segments=segments, world_size=saved_world
    )
    if batches > old.num_batches:
        raise ConfigError(
            f"the loader state says {batches} batches of epoch {epoch} were consumed, but that "
            f"epoch has {old.num_batches} on {saved_world} ranks; was it edited?"
        )
    if batches == old.num_batches:
        return planner, True
    before = previous.switch.to_json() if previous.switch is not None else None
    switch = Switch(
        epoch, {**previous.identity(), "switch": before}, (*segments, (saved_world, batches))
    )
    return planner.with_switch(switch), False


# -- reporting ---------------------------------------------------------------------------------


class DatasetBooks:
    """Samples, valid, rejected and tokens per dataset on this rank (``summary()["datasets"]``).

    Counted in the main process from each batch's planned ids, its rejected positions and (for
    tokens) the lengths when the plan has them, else the batch's attention mask.
    """

    def __init__(self, opened: OpenedMixture, lengths: Any = None):
        self.names = opened.names
        self.offsets = opened.offsets
        self.lengths = None if lengths is None else np.asarray(getattr(lengths, "length", lengths))
        n = len(self.names)
        self.counts = {
            k: np.zeros(n, dtype=np.int64) for k in ("samples", "valid", "rejected", "tokens")
        }

    def add(self, ids_of: Callable[[], Any], planned: int, bad: list[int], batch: Any) -> None:
        """Count one batch.

        ``ids_of()`` gives its planned ids (asked only when needed), ``planned`` how many,
        ``bad`` the positions rejected, ``batch`` what the collate made of the rest.
        """
        n = len(self.names)
        if n == 1:  # one dataset (most loaders): sums, no search, no ids without lengths
            self._add_to_one(ids_of, planned, bad, batch)
            return
        ids = np.asarray(ids_of(), dtype=np.int64)
        dataset = np.searchsorted(self.offsets, ids, side="right") - 1
        ok = np.ones(len(ids), dtype=bool)
        ok[bad] = False
        self.counts["samples"] += np.bincount(dataset, minlength=n)
        self.counts["valid"] += np.bincount(dataset[ok], minlength=n)
        self.counts["rejected"] += np.bincount(dataset[~ok], minlength=n)
        self.counts["tokens"] += self._tokens(ids[ok], dataset[ok], batch)

    def _add_to_one(
        self, ids_of: Callable[[], Any], planned: int, bad: list[int], batch: Any
    ) -> None:
        counts, rejected = self.counts, len(bad)
        counts["samples"][0] += planned
        counts["valid"][0] += planned - rejected
        counts["rejected"][0] += rejected
        if self.lengths is not None:
            ids = np.asarray(ids_of(), dtype=np.int64)
            valid = np.delete(ids, bad) if rejected else ids
            counts["tokens"][0] += int(self.lengths[valid].sum())
            return
        mask, sample_ids = _mask_rows(batch)
        if mask is not None:  # numpy views of the tensors: small torch ops cost more
            tokens, rows = np.asarray(mask), np.asarray(sample_ids) >= 0
            counts["tokens"][0] += int(tokens.sum() if rows.all() else tokens[rows].sum())

    def _tokens(self, ids: np.ndarray, dataset: np.ndarray, batch: Any) -> Any:
        n = len(self.names)
        if self.lengths is not None:
            return np.bincount(dataset, weights=self.lengths[ids], minlength=n).astype(np.int64)
        mask, sample_ids = _mask_rows(batch)
        if mask is None:
            return np.zeros(n, dtype=np.int64)
        rows = np.asarray(sample_ids)
        keep = rows >= 0
        per_row = np.asarray(mask).sum(axis=1)[keep]
        where = np.searchsorted(self.offsets, rows[keep], side="right") - 1
        return np.bincount(where, weights=per_row, minlength=n).astype(np.int64)

    def summary(self) -> dict[str, dict[str, Any]]:
        tokens = int(self.counts["tokens"].sum())
        out = {}
        for d, name in enumerate(self.names):
            row: dict[str, Any] = {k: int(v[d]) for k, v in self.counts.items()}
            row["token_share"] = round(row["tokens"] / tokens, 4) if tokens else None
            out[name] = row
        return out

    def table(self) -> str:
        """The summary as a text table, one row per dataset (for training logs)."""
        from chute._internal.tables import table

        rows = [
            [
                name,
                r["samples"],
                r["valid"],
                r["rejected"],
                r["tokens"],
                "-" if r["token_share"] is None else f"{100 * r['token_share']:.1f}%",
            ]
            for name, r in self.summary().items()
        ]
        return table(["dataset", "samples", "valid", "rejected", "tokens", "token share"], rows)

    def state_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), **{k: v.tolist() for k, v in self.counts.items()}}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        if not state or list(state.get("names", [])) != list(self.names):
            return  # another mixture's counts (a mix change keeps the datasets: same names)
        for k in self.counts:
            if k in state:
                self.counts[k] = np.asarray(state[k], dtype=np.int64)


def _mask_rows(batch: Any) -> tuple[Any, Any]:
    """``(attention_mask, sample_ids)`` of a padded batch as they are, else ``(None, None)``.

    Packed rows (``row_sample_ids``) hold several samples, and a custom collate's own shape
    says nothing: their tokens are counted from the lengths when the plan has them, else not.
    """
    if not isinstance(batch, Mapping) or "row_sample_ids" in batch:
        return None, None
    mask, sample_ids = batch.get("attention_mask"), batch.get("sample_ids")
    if mask is None or sample_ids is None:
        return None, None
    return mask, sample_ids
