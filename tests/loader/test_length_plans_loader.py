"""The Loader with grouped, budget and packed plans: exact resume, elastic, packed rows, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from chute import (
    Collate,
    ConfigError,
    ErrorBudgetExceeded,
    Loader,
    PackedCollate,
    RandomPlanner,
    StateMismatch,
    World,
)
from chute.testing import check_elastic, check_resume, take

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

PLANS = {
    "grouped": ("grouped", {"group_size": 2}),
    "budget": ("budget", {"max_tokens": 16}),
    "packed": ("packed", {"max_length": 12}),
    "split": ("packed", {"max_length": 12, "split": True}),
}
BROKEN = (3, 17)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_checkpoint_continues_the_stream_exactly(id_source, name: str) -> None:
    source = id_source(45, broken=BROKEN)
    plan, options = PLANS[name]

    def make(num_workers: int = 0, world: World = World(rank=1, world_size=3)) -> Loader:
        return Loader(
            source,
            batch_size=2,
            seed=5,
            world=world,
            num_workers=num_workers,
            plan=plan,
            plan_options=options,
        )

    assert check_resume(make, epochs=2) == 2 * len(make()) + 1


def test_packed_resume_with_workers_continues_the_same_stream(id_source) -> None:
    source = id_source(45, broken=BROKEN)

    def make(num_workers: int = 0) -> Loader:
        return Loader(
            source,
            batch_size=2,
            seed=1,
            world=World(rank=0, world_size=2),
            num_workers=num_workers,
            plan="packed",
            plan_options={"max_length": 10},
        )

    assert check_resume(make, epochs=2, every=3, num_workers=[2, 0]) > 0


@pytest.mark.parametrize("name", ["grouped", "budget", "packed"])
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (3, 1)])
def test_elastic_resume_sees_every_valid_sample_once(id_source, name: str, old, new) -> None:
    source = id_source(61, broken=BROKEN)
    plan, options = PLANS[name]

    def make(world: World) -> Loader:
        return Loader(source, batch_size=2, seed=3, world=world, plan=plan, plan_options=options)

    steps = len(make(World(rank=0, world_size=old)))
    valid = [i for i in range(61) if i not in BROKEN]
    for k in sorted({0, 1, steps // 2, steps}):
        consumed, delivered = check_elastic(make, old_world_size=old, new_world_size=new, steps=k)
        assert np.sort(np.concatenate([consumed, delivered])).tolist() == valid, k


def test_packed_batches_hold_whole_samples_in_rows(id_source) -> None:
    # record i is [i] * (1 + i % 7), so every token names the sample it belongs to
    source = id_source(200, broken=BROKEN)
    seen = []
    for rank in range(2):
        loader = Loader(
            source,
            batch_size=3,
            world=World(rank=rank, world_size=2),
            plan="packed",
            plan_options={"max_length": 16},
        )
        for batch in loader:
            assert batch["input_ids"].shape[1] == 16 and batch["input_ids"].shape[0] <= 3
            for row, ids in enumerate(batch["row_sample_ids"].tolist()):
                tokens = batch["input_ids"][row].tolist()
                positions = batch["position_ids"][row].tolist()
                at = 0
                for i in (x for x in ids if x >= 0):
                    n = 1 + i % 7
                    assert tokens[at : at + n] == [i] * n
                    assert positions[at : at + n] == list(range(n))
                    assert batch["labels"][row, at] == -100
                    at += n
                    seen.append(i)
            flat_ids = batch["row_sample_ids"].reshape(-1)
            assert batch["sample_ids"].tolist() == flat_ids[flat_ids >= 0].tolist()
    assert sorted(seen) == [i for i in range(200) if i not in BROKEN]


class Shaky:
    """Ten samples with known lengths; item 4 breaks when read (after its length was known)."""

    lengths = np.array([3, 5, 2, 4, 6, 1, 3, 2, 5, 4])

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict:
        if i == 4:
            return {"input_ids": "broken"}
        return {"input_ids": [i] * int(self.lengths[i])}


def test_a_sample_that_fails_at_load_time_leaves_a_gap_in_its_row_not_in_the_stream() -> None:
    loader = Loader(Shaky(), batch_size=1, plan="packed", plan_options={"max_length": 8})
    batches = take(loader, len(loader))
    ids = sorted(i for b in batches for i in b["sample_ids"].tolist())
    assert ids == [0, 1, 2, 3, 5, 6, 7, 8, 9] and loader.stats == {"wrong_type": 1}
    assert all(int(b["cu_seqlens"][-1]) == b["input_ids"].size for b in batches)


def test_rejected_samples_are_excluded_up_front_and_reported(id_source) -> None:
    loader = Loader(
        id_source(40, broken=BROKEN), batch_size=4, plan="grouped", world=World(), seed=0
    )
    ids = [i for b in take(loader, len(loader)) for i in b["sample_ids"].tolist()]
    assert sorted(ids) == [i for i in range(40) if i not in BROKEN]
    summary = loader.summary()
    assert summary["excluded"] == 2 and summary["rejected"] == 0  # never dealt, never re-read
    assert summary["excluded_by_reason"] == {"bad_json": 1, "missing_field": 1}


def test_a_mostly_broken_source_stops_before_the_first_batch(id_source) -> None:
    source = id_source(30, broken=range(0, 30, 2))
    with pytest.raises(ErrorBudgetExceeded, match="15 of 30 samples were rejected .* lengths"):
        Loader(source, batch_size=2, plan="packed", plan_options={"max_length": 8},
               budget_min_samples=10)  # fmt: skip


def test_a_state_saved_with_other_lengths_is_refused(id_source) -> None:
    source = id_source(30)

    class FirstThree:
        def __call__(self, item):  # type: ignore[no-untyped-def]
            return {"input_ids": item.data["input_ids"][:3]}

    loader = Loader(source, batch_size=2, plan="grouped", world=World())
    take(loader, 2)
    other = Loader(source, FirstThree(), batch_size=2, plan="grouped", world=World())
    with pytest.raises(StateMismatch, match=r"plan.lengths.hash: state '[0-9a-f]+'"):
        other.load_state_dict(loader.state_dict())


def test_packed_takes_max_length_from_the_recipe_and_its_own_collate(id_source) -> None:
    class Truncating:
        max_length = 6

        def __call__(self, item):  # type: ignore[no-untyped-def]
            return {"input_ids": item.data["input_ids"][: self.max_length]}

    loader = Loader(id_source(20), Truncating(), batch_size=2, plan="packed", world=World())
    assert loader.planner.inner.max_length == 6 and isinstance(loader.collate, PackedCollate)
    assert next(iter(loader))["input_ids"].shape[1] == 6


def test_plan_settings_that_cannot_work_are_refused(id_source) -> None:
    source = id_source(10)
    with pytest.raises(ConfigError, match="top_up=True cannot refill packed rows"):
        Loader(source, plan="packed", plan_options={"max_length": 8}, top_up=True)
    with pytest.raises(ConfigError, match=r"plan='random' takes no plan_options"):
        Loader(source, plan="random", plan_options={"max_length": 8})
    with pytest.raises(ConfigError, match="set the options on the Planner instance"):
        Loader(source, plan=RandomPlanner(2), plan_options={"group_size": 2})
    with pytest.raises(ConfigError, match=r"plan='packed' needs max_length .*plan_options="):
        Loader(source, plan="packed")
    for name in ("shuffle", "drop_last", "wrap"):  # a config's "no" is a true string
        with pytest.raises(ConfigError, match=f"{name} must be True or False, got 'no'"):
            Loader(source, **{name: "no"})
    with pytest.raises(ConfigError, match="but Collate takes no rows argument"):
        Loader(source, plan="packed", plan_options={"max_length": 8}, collate=Collate())


def test_packed_rows_carry_images_whose_features_match_their_tokens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from PIL import Image

    from chute import DynamicResolution, Recipe
    from recipe_helpers import tiny_tokenizer

    tok = tiny_tokenizer()
    pad = tok.token_to_id("<|image_pad|>")
    rng = np.random.default_rng(0)
    for name, (w, h) in {"a.png": (300, 168), "b.png": (90, 120)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(tmp_path / name)
    rows = []
    for i in range(12):
        images = [["a.png"], ["b.png"], [], ["a.png", "b.png"]][i % 4]
        question = "<image>" * len(images) + "What is this? " * (1 + i % 3)
        rows.append(
            {
                "images": images,
                "messages": [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": "A picture." * (1 + i % 2)},
                ],
            }
        )
    data = tmp_path / "mm.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = Recipe(tokenizer=tok, template="chatml", image_tokens="qwen2-vl", max_length=512)
    loader = Loader(data, recipe, batch_size=2, plan="packed", media=DynamicResolution(),
                    world=World())  # fmt: skip
    assert loader.lengths.image_tokens.sum() > 0
    seen = []
    for batch in loader:
        counts = batch["image_counts"].tolist()  # images per packed row, as documented
        assert len(counts) == batch["input_ids"].shape[0]
        feats = (batch["image_grid_thw"].prod(dim=1) // 4).tolist() if sum(counts) else []
        k = 0
        for row, ids in enumerate(batch["row_sample_ids"].tolist()):
            tokens = int((batch["input_ids"][row] == pad).sum())
            assert tokens == sum(feats[k : k + counts[row]])
            k += counts[row]
            seen += [i for i in ids if i >= 0]
    assert sorted(seen) == list(range(12))
