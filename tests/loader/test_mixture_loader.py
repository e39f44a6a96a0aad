"""The Loader over a mixture: exact-once, resume, elastic resume, mix changes, splits, caches.

Pre-tokenized id datasets (content = index) check the stream machinery fast; a real mixture of
three formats (alpaca, ShareGPT, multimodal messages with images) checks per-dataset recipes.
Exact-once over a mixture is a multiset equality with the epoch's selection.
"""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from chute import Loader, Mixture, MixtureEntry, StateMismatch, World, open_cache, preprocess
from chute.errors import ConfigError, FingerprintMismatch
from chute.testing import check_elastic, check_resume, take, write_id_jsonl

PLAN_OPTIONS: dict[str, dict[str, Any] | None] = {
    "random": None,
    "grouped": {"group_size": 2},
    "budget": {"max_tokens": 24},
    "packed": {"max_length": 16},
}


@pytest.fixture
def ids_mixture(tmp_path: Path) -> Mixture:
    a = write_id_jsonl(tmp_path / "a.jsonl", 50)
    b = write_id_jsonl(tmp_path / "b.jsonl", 20, broken=[3])
    c = write_id_jsonl(tmp_path / "c.jsonl", 7)
    return Mixture(
        [
            MixtureEntry("a", a, weight=2),
            MixtureEntry("b", b, repeat=1.5),
            MixtureEntry("c", c, samples=11),
        ]
    )


def loader_for(mix: Mixture, plan: str = "random", **kw: Any) -> Loader:
    kw.setdefault("batch_size", 4)
    kw.setdefault("seed", 3)
    return Loader(mix, plan=plan, plan_options=PLAN_OPTIONS[plan], **kw)


def delivered(loader: Loader) -> list[int]:
    return [i for b in loader for i in b["sample_ids"].tolist() if i >= 0]


def selected(loader: Loader, epoch: int) -> Counter[int]:
    return Counter(loader.planner.selection.order(epoch).materialize().tolist())


@pytest.mark.parametrize("plan", sorted(PLAN_OPTIONS))
@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (3, 2)])
def test_every_selected_sample_once_and_equal_batches(
    ids_mixture: Mixture, plan: str, world_size: int, workers: int
) -> None:
    got: Counter[int] = Counter()
    lengths = set()
    for rank in range(world_size):
        loader = loader_for(ids_mixture, plan, world=World(rank, world_size), num_workers=workers)
        batches = list(loader)
        lengths.add(len(batches))
        got.update(i for b in batches for i in b["sample_ids"].tolist() if i >= 0)
    want = selected(loader, 0)
    bad = 50 + 3  # b.jsonl:4, global id 53: rejected by the random plan, excluded by the others
    assert got == Counter({i: n for i, n in want.items() if i != bad})
    assert len(lengths) == 1


@pytest.mark.parametrize("plan", sorted(PLAN_OPTIONS))
def test_exact_resume_and_elastic_resume(ids_mixture: Mixture, plan: str) -> None:
    def make(world: World = World(), num_workers: int = 0) -> Loader:
        return loader_for(ids_mixture, plan, world=world, num_workers=num_workers)

    assert check_resume(make, epochs=2, every=2, num_workers=[0, 2] if plan == "random" else [])
    # the broken record (id 53) is skipped by the random plan, never selected by the others
    want = Counter({i: n for i, n in selected(make(), 0).items() if i != 53})
    for old, new in [(2, 3), (3, 1)]:
        consumed, rest = check_elastic(make, old_world_size=old, new_world_size=new, steps=2)
        assert Counter(consumed.tolist()) + Counter(rest.tolist()) == want


def test_the_same_seed_gives_the_same_stream_and_another_seed_another(ids_mixture: Mixture) -> None:
    a = [b["sample_ids"].tolist() for b in loader_for(ids_mixture, seed=1)]
    b = [b["sample_ids"].tolist() for b in loader_for(ids_mixture, seed=1)]
    c = [b["sample_ids"].tolist() for b in loader_for(ids_mixture, seed=2)]
    assert a == b and a != c


def test_proportions_and_per_dataset_summary(ids_mixture: Mixture) -> None:
    loader = loader_for(ids_mixture, plan="grouped", world=World(0, 1))
    list(loader)
    summary = loader.summary()["datasets"]
    # b: 19 valid records x 1.5 = 28.5, rounded half up
    assert {n: s["samples"] for n, s in summary.items()} == {"a": 50, "b": 29, "c": 11}
    # grouped plans know the lengths: tokens per dataset are the lengths' sums
    lens = loader.lengths.length
    sel = loader.planner.selection.order(0).materialize()
    for d, name in enumerate("abc"):
        mine = sel[loader.planner.selection.dataset_of(sel) == d]
        assert summary[name]["tokens"] == int(lens[mine].sum())
    assert abs(sum(s["token_share"] for s in summary.values()) - 1) < 1e-3
    report = loader.dataset_report().splitlines()
    assert report[0].split() == [
        "dataset",
        "samples",
        "valid",
        "rejected",
        "tokens",
        "token",
        "share",
    ]
    assert report[2].split()[:2] == ["a", "50"]


def test_per_dataset_batching_gives_steps_of_one_dataset(ids_mixture: Mixture) -> None:
    mix = Mixture(ids_mixture.datasets, batching="per_dataset")
    for rank in range(2):
        loader = loader_for(mix, world=World(rank, 2))
        for k in range(loader.plan.num_batches):
            step = np.concatenate([loader.plan.batch(r, k) for r in range(2)])
            assert len(set(loader.planner.selection.dataset_of(step).tolist())) == 1


# -- a change of the mix -----------------------------------------------------------------------


def test_a_weight_change_is_refused_naming_what_changed(ids_mixture: Mixture) -> None:
    loader = loader_for(ids_mixture)
    take(loader, 3)
    state = loader.state_dict()
    heavier = ids_mixture.with_amounts(a={"weight": 5})
    with pytest.raises(
        StateMismatch,
        match=r"plan\.mixture\.datasets\.a\.weight: state 2, "
        r"this loader 5(.|\n)*new_mixture=True",
    ):
        loader_for(heavier).load_state_dict(state)
    other = Mixture(ids_mixture.datasets, batching="per_dataset")
    with pytest.raises(StateMismatch, match=r"plan\.mixture\.batching: state 'mixed'"):
        loader_for(other).load_state_dict(state)


@pytest.mark.parametrize("plan", ["random", "packed"])
def test_new_mixture_continues_without_repeating_what_was_delivered(
    ids_mixture: Mixture, plan: str
) -> None:
    old = loader_for(ids_mixture, plan)
    seen = Counter(i for b in take(old, 4) for i in b["sample_ids"].tolist() if i >= 0)
    state = orjson.loads(orjson.dumps(old.state_dict()))
    changed = ids_mixture.with_amounts(a={"weight": 1}, c={"samples": 3})
    new = loader_for(changed, plan)
    new.load_state_dict(state, new_mixture=True)
    assert new.epoch == 0
    rest = Counter(delivered(new))  # the rest of epoch 0
    want = selected(new, 0)
    want.pop(53, None)
    assert rest == want - seen  # the new selection minus what was delivered already
    for i in seen:  # nothing delivered is dealt again unless the new mix takes it more often
        assert rest[i] <= max(0, want[i] - seen[i])
    # the state of the switched loader resumes the same stream (also elsewhere, mid-epoch)
    again = loader_for(changed, plan)
    again.load_state_dict(state, new_mixture=True)
    first = take(again, 2)
    mid = orjson.loads(orjson.dumps(again.state_dict()))
    assert "mixture_switch" in mid
    resumed = loader_for(changed, plan)
    resumed.load_state_dict(mid)
    follow = loader_for(changed, plan)
    follow.load_state_dict(state, new_mixture=True)
    take(follow, 2)
    assert [b["sample_ids"].tolist() for b in take(resumed, 3)] == [
        b["sample_ids"].tolist() for b in take(follow, 3)
    ]
    assert first  # and the next epoch is the new mixture's own selection
    new.set_epoch(1)
    assert Counter(delivered(new)) == Counter(
        {i: n for i, n in selected(new, 1).items() if i != 53}
    )


def test_other_datasets_are_refused_even_with_new_mixture(ids_mixture: Mixture) -> None:
    state = loader_for(ids_mixture).state_dict()
    fewer = Mixture(ids_mixture.datasets[:2])
    with pytest.raises(StateMismatch, match=r"plan\.mixture\.names"):
        loader_for(fewer).load_state_dict(state, new_mixture=True)


# -- validation split --------------------------------------------------------------------------


def _alpaca_files(tmp_path: Path, n: int, shards: int, seed: int) -> list[Path]:
    rows = [{"instruction": f"question {i}", "output": f"answer {i}"} for i in range(n)]
    order = np.random.default_rng(seed).permutation(n)
    paths = []
    for s in range(shards):
        path = tmp_path / f"shard{seed}-{s}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(rows[i]) + b"\n" for i in order[s::shards]))
        paths.append(path)
    return paths


def _texts(loader: Loader) -> set[str]:
    tok = loader.recipe.tokenizer  # type: ignore[union-attr]
    out = set()
    for batch in loader:
        for row, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True):
            out.add(tok.decode(row[mask.bool()].tolist()))
    return out


def test_val_split_never_overlaps_train_and_is_stable_under_resharding(
    tmp_path: Path, shared_data: Path
) -> None:
    recipe = {
        "tokenizer": str(shared_data / "tokenizers/qwen3/tokenizer.json"),
        "template": "qwen3",
    }
    texts = {}
    for seed, shards in [(0, 1), (1, 3)]:
        files = _alpaca_files(tmp_path, 300, shards, seed)
        mix = Mixture([MixtureEntry("qa", files, val=0.1, format="alpaca")], recipe=recipe)
        train = _texts(Loader(mix, batch_size=16))
        val = _texts(Loader(mix, batch_size=16, split="val"))
        assert train and val and not train & val
        assert 15 <= len(val) <= 45 and len(train) + len(val) == 300
        texts[seed] = val
    assert texts[0] == texts[1]  # the same records, however the files are ordered and split
    counted = Mixture([MixtureEntry("qa", files, val=25, format="alpaca")], recipe=recipe)
    assert len(_texts(Loader(counted, batch_size=16, split="val"))) == 25


def test_split_val_needs_a_hold_out(ids_mixture: Mixture) -> None:
    with pytest.raises(ConfigError, match="split='val' needs a validation hold-out"):
        loader_for(ids_mixture, split="val")


# -- real data: three formats, their own recipes -----------------------------------------------

MLLM_TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
}


def real_mixture(shared_data: Path, **amounts: Any) -> Mixture:
    d = shared_data
    return Mixture(
        [
            MixtureEntry(
                "alpaca",
                d / "llama-factory/alpaca_en_demo.json",
                weight=0.5,
                val=0.05,
                format="alpaca",
            ),
            MixtureEntry(
                "chat",
                d / "fastchat/dummy_conversation.json",
                weight=0.3,
                system="Answer briefly.",
                format="sharegpt",
            ),
            MixtureEntry(
                "vision",
                d / "llama-factory/mllm_demo.json",
                samples=20,
                format="sharegpt",
                columns={"messages": "messages", "images": "images"},
                tags=MLLM_TAGS,
            ),
            # LLaVA-style records whose image paths resolve under their own media root
            MixtureEntry(
                "llava",
                d / "qwen3-vl/demo/single_images.json",
                repeat=4,
                format="llava",
                media_root=str(d / "qwen3-vl"),
            ),
        ],
        recipe={
            "tokenizer": str(d / "tokenizers/qwen3/tokenizer.json"),
            "template": "qwen3",
            "max_length": 512,
            "image_tokens": "qwen2-vl",
        },
        **amounts,
    )


@pytest.mark.parametrize(
    ("plan", "world_size", "workers"), [("random", 3, 2), ("grouped", 2, 0), ("packed", 2, 1)]
)
def test_a_real_three_format_mixture_delivers_its_selection(
    shared_data: Path, plan: str, world_size: int, workers: int
) -> None:
    mix = real_mixture(shared_data)
    got: Counter[int] = Counter()
    images = Counter()
    for rank in range(world_size):
        loader = Loader(
            mix,
            batch_size=8,
            plan=plan,
            world=World(rank, world_size),
            num_workers=workers,
            plan_options={"max_length": 1024} if plan == "packed" else None,
        )
        for batch in loader:
            ids = batch["sample_ids"].tolist()
            got.update(ids)
            images.update(loader.planner.selection.dataset_of(ids).tolist())
    assert got == selected(loader, 0)
    assert images[2] == 20  # the image dataset, 20 samples drawn from its 6 records
    assert images[3] == 12  # 3 LLaVA records x 4, their images under their own media root
    tok = loader.recipe.tokenizer  # type: ignore[union-attr]
    chat = loader.source[int(loader.source.offsets[1])]
    assert "Answer briefly." in tok.decode(loader.recipe(chat)["input_ids"].tolist())  # type: ignore[misc]


def test_a_preprocessed_mixture_reads_the_same_and_a_new_mix_builds_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    mix = real_mixture(shared_data)
    out = tmp_path / "cache"
    chunks = ["cache.chunk_size=400"]
    report = preprocess(mix, out=out, overrides=chunks, workers=2)
    assert sorted(report.datasets) == ["alpaca", "chat", "llava", "vision"]
    raw = [b["sample_ids"].tolist() for b in Loader(mix, batch_size=8, plan="grouped")]
    cached = Loader(open_cache(out), batch_size=8, plan="grouped")
    assert [b["sample_ids"].tolist() for b in cached] == raw
    # other amounts: read from the same caches, nothing tokenized again
    other = mix.with_amounts(alpaca={"weight": 0.1}, vision={"repeat": 2})
    again = preprocess(other, out=out, overrides=chunks, workers=2)
    assert all(r.built == 0 for r in again.datasets.values())
    reweighted = Loader(open_cache(out), mixture=other, batch_size=8)
    assert Counter(delivered(reweighted)) == selected(reweighted, 0)
    # a per-dataset recipe option differs from its cache: named with the dataset
    changed = Mixture.from_dict(mix.to_dict(), ["datasets.chat.system=Answer at length."])
    with pytest.raises(FingerprintMismatch, match=r"dataset 'chat'(.|\n)*system differs"):
        Loader(open_cache(out), mixture=changed, batch_size=8)
    # the command it names runs (without --overwrite it refuses, as the next lines check)
    with pytest.raises(FingerprintMismatch, match=rf"--out {out} --overwrite \(with these"):
        Loader(open_cache(out), mixture=changed, batch_size=8)
    with pytest.raises(FingerprintMismatch, match=r"dataset 'chat'"):
        preprocess(changed, out=out, overrides=chunks)
    rebuilt = preprocess(changed, out=out, overrides=chunks, overwrite=True, workers=2)
    assert [n for n, r in rebuilt.datasets.items() if r.built] == ["chat"]


def test_loader_reads_a_mixture_yaml(shared_data: Path, tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text(real_mixture(shared_data).to_yaml())
    loader = Loader(path, batch_size=8)
    assert [n for n in loader.summary()["datasets"]] == ["alpaca", "chat", "vision", "llava"]
    assert sum(len(b["sample_ids"]) for b in itertools.islice(loader, 2)) == 16
    # what each DataLoader worker receives: the sources' indexes are files, the recipes share
    # one tokenizer, no lengths or pools travel (about 10 KB for four datasets)
    assert len(pickle.dumps(loader._builder)) < 32_000
