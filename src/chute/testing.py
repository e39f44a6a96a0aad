"""Helpers to test loaders and plans: datasets whose content is their index, and resume checks.

``check_resume`` is the one resume contract every plan and loader configuration must pass:
checkpoint after every step, restore into a fresh loader, and the rest of the stream must equal
the uninterrupted one (also with a different ``num_workers``, and when resumed twice).
``check_elastic`` does the same across a change of world size: what the old ranks consumed plus
what the new ranks deliver is every sample exactly once. With parallel groups (``old_layout=
{"cp": 2}``) it also checks that every rank of a group got the same samples, and counts each
data-parallel rank once.

Example:
    >>> import tempfile, pathlib
    >>> from chute import Loader, World
    >>> path = write_id_jsonl(pathlib.Path(tempfile.mkdtemp()) / "ids.jsonl", 30)
    >>> make = lambda world=World(), num_workers=0: Loader(
    ...     path, batch_size=4, world=world, num_workers=num_workers, seed=1)
    >>> check_resume(make, epochs=2)  # checkpoints verified
    17
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute.world import World

__all__ = ["BROKEN_KINDS", "check_elastic", "check_resume", "snapshot", "take", "write_id_jsonl"]

# What write_id_jsonl plants at a broken index, cycling, with the kind the loader reports.
BROKEN_KINDS = (
    (b'{"input_ids": [1, 2', "bad_json"),
    (b'{"labels": [1, 2]}', "missing_field"),
    (b'{"input_ids": "12"}', "wrong_type"),
    (b"[1, 2, 3]", "not_an_object"),
)


def write_id_jsonl(
    path: str | os.PathLike[str],
    n: int,
    *,
    broken: Iterable[int] = (),
    max_len: int = 7,
) -> Path:
    """Write ``n`` pre-tokenized records whose tokens are their own index.

    Record ``i`` is ``{"input_ids": [i] * (1 + i % max_len)}``, so any batch can be checked
    against its ``sample_ids``. Indexes in ``broken`` get a broken line instead (cycling
    through ``BROKEN_KINDS``).
    """
    bad = sorted(set(broken))
    kinds = {i: BROKEN_KINDS[j % len(BROKEN_KINDS)][0] for j, i in enumerate(bad)}
    path = Path(path)
    with open(path, "wb") as f:
        for i in range(n):
            line = kinds.get(i) or orjson.dumps({"input_ids": [i] * (1 + i % max_len)})
            f.write(line + b"\n")
    return path


def snapshot(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """A batch as numpy arrays, for comparing streams."""
    return {k: np.asarray(v).copy() for k, v in batch.items() if hasattr(v, "shape")}


def take(loader: Any, count: int) -> list[dict[str, np.ndarray]]:
    """The next ``count`` batches of ``loader``, continuing into later epochs as needed."""
    out: list[dict[str, np.ndarray]] = []
    while len(out) < count:
        before = len(out)
        for batch in loader:
            out.append(snapshot(batch))
            if len(out) == count:
                break
        if len(out) == before:
            raise AssertionError(f"the loader stopped after {before} of {count} batches")
    return out


def _same(
    got: Sequence[dict[str, np.ndarray]], want: Sequence[dict[str, np.ndarray]], what: str
) -> None:
    if len(got) != len(want):
        raise AssertionError(f"{what}: {len(got)} batches, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.keys() != w.keys():
            raise AssertionError(f"{what}: batch {i} has keys {sorted(g)}, expected {sorted(w)}")
        for key in w:
            if g[key].shape != w[key].shape or not np.array_equal(g[key], w[key]):
                raise AssertionError(
                    f"{what}: batch {i} differs in {key!r}: got {g[key].tolist()}, expected "
                    f"{w[key].tolist()}"
                )


def _roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """States must survive JSON (checkpoints are often JSON or torch.save of plain data)."""
    return orjson.loads(orjson.dumps(state))


def check_resume(
    make_loader: Callable[..., Any],
    *,
    epochs: int = 2,
    every: int = 1,
    num_workers: Sequence[int] = (),
    twice: bool = True,
) -> int:
    """Checkpoint after every ``every``-th step; each restore must continue the stream exactly.

    Args:
        make_loader: ``make_loader(num_workers=...) -> Loader`` (called without arguments for
            the reference run); every call must build the same configuration.
        epochs: epochs in the reference stream (checkpoints span epoch boundaries).
        every: check every ``every``-th checkpoint (1: all of them).
        num_workers: restore also into loaders with these worker counts (cycled over the
            checkpoints, so each count is tried at several positions).
        twice: from each checkpoint, also resume a second time halfway through the rest.

    Returns:
        The number of checkpoints verified.

    Raises:
        AssertionError: naming the checkpoint and the first differing batch.
    """
    loader = make_loader()
    reference: list[dict[str, np.ndarray]] = []
    checkpoints: list[tuple[int, dict[str, Any]]] = [(0, _roundtrip(loader.state_dict()))]
    for _ in range(epochs):
        for batch in loader:
            reference.append(snapshot(batch))
            checkpoints.append((len(reference), _roundtrip(loader.state_dict())))
    counts: list[int | None] = [*num_workers] or [None]
    checked = 0
    for i, (pos, state) in enumerate(checkpoints[::every]):
        workers = counts[i % len(counts)]
        fresh = make_loader() if workers is None else make_loader(num_workers=workers)
        fresh.load_state_dict(copy.deepcopy(state))
        rest = len(reference) - pos
        half = rest // 2 if twice else rest
        what = f"resume after {pos} batches (num_workers={workers})"
        _same(take(fresh, half), reference[pos : pos + half], what)
        if twice and rest - half:
            again = make_loader() if workers is None else make_loader(num_workers=workers)
            again.load_state_dict(_roundtrip(fresh.state_dict()))
            _same(take(again, rest - half), reference[pos + half :], f"second {what}")
        checked += 1
    return checked


def check_elastic(
    make_loader: Callable[[World], Any],
    *,
    old_world_size: int,
    new_world_size: int,
    steps: int,
    old_layout: Mapping[str, Any] | None = None,
    new_layout: Mapping[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``steps`` steps on ``old_world_size`` ranks, resume the epoch on ``new_world_size``.

    Each new rank loads the state of old rank ``new_rank % old_world_size`` (any rank's state
    works: ranks step in lockstep). Also checks that every new rank yields the same number of
    batches, and that the ranks of one data-parallel rank get the same samples.

    Args:
        make_loader: ``make_loader(world) -> Loader``.
        old_world_size: ranks (processes) before the resume.
        new_world_size: ranks after it.
        steps: steps run before the resume.
        old_layout: the parallel groups before: ``World`` keywords such as ``{"cp": 2}``.
        new_layout: the parallel groups after.

    Returns:
        ``(consumed, delivered)``: the sample ids the old data-parallel ranks consumed and the
        ids the new ones delivered for the rest of the epoch (placeholder rows, id -1, removed).
    """
    states, consumed = [], []
    old_firsts: dict[int, list[np.ndarray]] = {}
    for rank in range(old_world_size):
        world = World(rank=rank, world_size=old_world_size, **dict(old_layout or {}))
        loader = make_loader(world)
        batches = take(loader, steps) if steps else []
        consumed += _dp_share(world, batches, old_firsts)
        states.append(_roundtrip(loader.state_dict()))
    delivered, lengths = [], set()
    firsts: dict[int, list[np.ndarray]] = {}
    for rank in range(new_world_size):
        world = World(rank=rank, world_size=new_world_size, **dict(new_layout or {}))
        loader = make_loader(world)
        loader.load_state_dict(states[rank % old_world_size])
        batches = take(loader, loader.batches_left)
        lengths.add(len(batches))
        delivered += _dp_share(world, batches, firsts)
    if len(lengths) > 1:
        raise AssertionError(f"new ranks yield different batch counts: {sorted(lengths)}")

    def ids(parts: list[np.ndarray]) -> np.ndarray:
        flat = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return flat[flat >= 0]

    return ids(consumed), ids(delivered)


def _dp_share(
    world: World, batches: list[dict[str, np.ndarray]], firsts: dict[int, list[np.ndarray]]
) -> list[np.ndarray]:
    """The sample ids of a data-parallel rank's first rank; the others must repeat them."""
    ids = [b["sample_ids"] for b in batches]
    if world.is_dp_leader:
        firsts[world.dp_rank] = ids
        return ids
    first = firsts.get(world.dp_rank)
    if first is not None and (
        len(first) != len(ids)
        or not all(np.array_equal(a, b) for a, b in zip(first, ids, strict=True))
    ):
        raise AssertionError(
            f"rank {world.rank} (dp_rank {world.dp_rank}) got other samples than rank "
            f"{world.dp_peers[0]} of the same data-parallel rank"
        )
    return []
