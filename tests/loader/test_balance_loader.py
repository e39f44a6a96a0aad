"""The Loader with ``plan_options={"balance": ...}``: exact resume, elastic resume, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from chute import Loader, StateMismatch, World
from chute.lengths import Lengths
from chute.testing import check_elastic, check_resume, take

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

PLANS = {
    "budget": ("budget", {"max_tokens": 40, "balance": True}),
    "packed": ("packed", {"max_length": 24, "balance": "patches"}),
    # compute, with a model whose attention term matters at these lengths
    "packed_cost": ("packed", {"max_length": 24, "balance": "cost", "cost": {"b": 1, "c": 0.2}}),
    "budget_cost": ("budget", {"max_tokens": 40, "balance": "tokens+cost", "cost": "qwen3-8b"}),
}


class WithImages:
    """``n`` samples whose tokens are their id; every third one "holds an image".

    The lengths the plan sees carry image tokens (as a lengths pass over multimodal records
    would), so balance has patches to share out; the samples are plain token lists.
    """

    def __init__(self, n: int):
        self.n = n
        size = 2 + np.arange(n) % 9
        image = np.where(np.arange(n) % 3 == 0, 2 + np.arange(n) % 5, 0)
        self.lengths = Lengths(size.astype(np.int32), image_tokens=image.astype(np.int32))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": [i] * int(self.lengths.length[i])}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_checkpoint_continues_the_stream_exactly(name: str) -> None:
    source = WithImages(120)
    plan, options = PLANS[name]

    def make(num_workers: int = 0) -> Loader:
        return Loader(
            source,
            batch_size=2,
            seed=5,
            world=World(rank=1, world_size=3),
            num_workers=num_workers,
            plan=plan,
            plan_options=options,
        )

    assert check_resume(make, epochs=2) == 2 * len(make()) + 1


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (4, 1)])
def test_elastic_resume_sees_every_sample_once(name: str, old: int, new: int) -> None:
    source = WithImages(150)
    plan, options = PLANS[name]

    def make(world: World) -> Loader:
        return Loader(source, batch_size=2, seed=3, world=world, plan=plan, plan_options=options)

    steps = len(make(World(rank=0, world_size=old)))
    for k in sorted({0, 1, steps // 2, steps}):
        consumed, delivered = check_elastic(make, old_world_size=old, new_world_size=new, steps=k)
        assert np.sort(np.concatenate([consumed, delivered])).tolist() == list(range(150)), k


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_rank_gets_the_same_steps_and_all_samples_once(name: str) -> None:
    source = WithImages(200)
    plan, options = PLANS[name]
    seen, counts = [], set()
    for rank in range(4):
        loader = Loader(
            source,
            batch_size=2,
            seed=1,
            world=World(rank=rank, world_size=4),
            plan=plan,
            plan_options=options,
        )
        batches = list(loader)
        counts.add(len(batches))
        seen += [int(i) for b in batches for i in b["sample_ids"].tolist() if i >= 0]
    assert len(counts) == 1 and sorted(seen) == list(range(200))


def test_a_state_saved_without_balance_is_refused_with_it() -> None:
    source = WithImages(80)

    def make(options: dict) -> Loader:
        return Loader(source, batch_size=2, world=World(0, 2), plan="packed", plan_options=options)

    plain = make({"max_length": 24})
    take(plain, 2)
    state = plain.state_dict()
    with pytest.raises(StateMismatch, match="balance"):
        make({"max_length": 24, "balance": True}).load_state_dict(state)
    make({"max_length": 24}).load_state_dict(state)  # the same options still resume


def test_a_state_saved_with_another_cost_model_is_refused() -> None:
    source = WithImages(80)

    def make(cost: object) -> Loader:
        options = {"max_length": 24, "balance": "cost", "cost": cost}
        return Loader(source, batch_size=2, world=World(0, 2), plan="packed", plan_options=options)

    first = make({"b": 1, "c": 0.2})
    take(first, 2)
    state = first.state_dict()
    with pytest.raises(StateMismatch, match="balance"):
        make("llama3-8b").load_state_dict(state)
    make({"a": 0, "b": 1, "c": 0.2}).load_state_dict(state)  # the same model resumes
