"""A state saved after an epoch's last batch resumes with the next epoch, in either training loop.

Before, the resumed loader named the finished epoch: the documented loop
(``for epoch in range(loader.epoch, epochs): loader.set_epoch(epoch)``) iterated it, which
started the next one, so every later epoch ran one slot early and one more epoch ran in all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

pytest.importorskip("torch")

from chute import Loader, World

EPOCHS = 3
DATA = [{"input_ids": [i + 1]} for i in range(12)]  # 3 batches of 4 per epoch on one rank


def make(world: World = World(0, 1), **kw: Any) -> Loader:
    return Loader(DATA, batch_size=4, seed=0, world=world, **kw)


Stream = list[tuple[int, list[int]]]


def loop_on_loader_epoch(loader: Loader, stop_after: int | None = None) -> tuple[Stream, Any]:
    """docs/loader.md's loop: the first epoch is the loader's."""
    seen: Stream = []
    for epoch in range(loader.epoch, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.append((epoch, batch["sample_ids"].tolist()))
            if len(seen) == stop_after:
                return seen, orjson.loads(orjson.dumps(loader.state_dict()))
    return seen, None


def loop_on_own_counter(
    loader: Loader, stop_after: int | None = None, start: int = 0
) -> tuple[Stream, Any]:
    """A loop that keeps its own epoch counter (saved beside the loader's state)."""
    seen: Stream = []
    for epoch in range(start, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.append((epoch, batch["sample_ids"].tolist()))
            if len(seen) == stop_after:
                return seen, (epoch, orjson.loads(orjson.dumps(loader.state_dict())))
    return seen, None


@pytest.mark.parametrize("stop_after", [2, 3, 4, 6, 9])  # 3, 6, 9: an epoch's last batch
def test_the_loaders_own_loop_resumes_the_same_stream(stop_after: int) -> None:
    whole, _ = loop_on_loader_epoch(make())
    first, state = loop_on_loader_epoch(make(), stop_after)
    resumed = make()
    resumed.load_state_dict(state)
    rest, _ = loop_on_loader_epoch(resumed)
    assert first + rest == whole  # the same batches under the same epochs
    assert len(whole) == 9


@pytest.mark.parametrize("stop_after", [2, 3, 6])
def test_a_loop_with_its_own_epoch_counter_resumes_the_same_stream(stop_after: int) -> None:
    whole, _ = loop_on_own_counter(make())
    first, (epoch, state) = loop_on_own_counter(make(), stop_after)
    resumed = make()
    resumed.load_state_dict(state)
    rest, _ = loop_on_own_counter(resumed, start=epoch)  # names the finished epoch first
    assert first + rest == whole


def test_a_finished_epoch_resumes_elastically_with_workers() -> None:
    """Saved at epoch 0's end on 2 ranks, resumed on 3 ranks with 2 workers: each sample twice."""
    run: Callable[..., Any] = loop_on_loader_epoch
    states = []
    for rank in range(2):
        _, state = run(make(World(rank, 2)), stop_after=2)  # 12 samples: 2 batches a rank
        states.append(state)
    assert states[0]["epoch"] == 0 and states[0]["batches"] == 2
    delivered: list[int] = []
    for rank in range(3):
        loader = make(World(rank, 3), num_workers=2)
        loader.load_state_dict(states[0])
        assert loader.epoch == 1
        for epoch in range(loader.epoch, 2):  # two epochs in all
            loader.set_epoch(epoch)
            delivered += [i for b in loader for i in b["sample_ids"].tolist()]
    assert sorted(delivered) == list(range(12))  # epoch 1 once, not epochs 1 and 2


def test_what_a_finished_state_reports_before_the_next_epoch_runs() -> None:
    whole = make()
    for _ in whole:
        pass
    state = orjson.loads(orjson.dumps(whole.state_dict()))
    assert (state["epoch"], state["batches"]) == (0, 3)
    loader = make()
    loader.load_state_dict(state)
    assert loader.epoch == 1 and loader.position == (0, 3) and loader.batches_left == 0
    assert len(loader) == 3  # the next iteration: epoch 1
    from chute.integrations.hf_trainer import trainer_epoch

    assert trainer_epoch(loader) == 1.0  # epoch 0 done (it said 2.0)
    loader.set_epoch(0)
    loader.set_epoch(0)  # named twice: still the finished epoch, nothing of it left
    assert len(loader) == 0 and list(loader) == []
    loader.set_epoch(1)
    assert [b["sample_ids"].tolist() for b in loader] == [
        b["sample_ids"].tolist() for b in _epoch_of(1)
    ]


def _epoch_of(epoch: int) -> list[dict[str, Any]]:
    loader = make()
    loader.set_epoch(epoch)
    return list(loader)
