"""A mixture of long documents split into windows (``overflow: split``), as one dataset is.

Each dataset's samples are its documents' windows: the amounts, the plans, exact-once and resume
count windows, a validation hold-out takes whole documents, and the duplicate check compares
documents, not the windows of one document with each other.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cache_helpers import write_tokenizer
from chute import JsonlSource, Loader, Mixture, MixtureEntry, World
from chute.lengths import lengths_of
from chute.mixture.opened import open_mixture
from chute.mixture.overlap import find_duplicates
from chute.testing import check_elastic, check_resume

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "owls"]
MAX_LENGTH = 64


def write_docs(path: Path, sizes: list[int], seed: int, copy_of: str | None = None) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        if copy_of is not None:  # the same document as another dataset's first
            f.write(copy_of)
        for i, n in enumerate(sizes):
            words = [f"{path.stem}{i}", *(WORDS[k] for k in rng.integers(0, len(WORDS), n))]
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
    return path


@pytest.fixture
def mix(tmp_path: Path) -> Mixture:
    tok = write_tokenizer(tmp_path / "tok")
    a = write_docs(tmp_path / "a.jsonl", [5, 300, 40, 700, 120, 15, 260], seed=1)
    first_of_a = a.read_text().splitlines(keepends=True)[1]  # a long one: several windows
    b = write_docs(tmp_path / "b.jsonl", [90, 10, 450, 30, 200], seed=2, copy_of=first_of_a)
    recipe = {"tokenizer": str(tok), "format": "text", "max_length": MAX_LENGTH}
    return Mixture(
        [MixtureEntry("a", str(a), weight=2), MixtureEntry("b", str(b), repeat=1.5)],
        recipe={**recipe, "overflow": "split"},
    )


def alone(mix: Mixture, name: str) -> Any:
    """Dataset ``name``'s per-window lengths when it is read alone."""
    config = mix.recipe_config(name)
    return lengths_of(JsonlSource(mix[name].sources), config.build())


def test_a_datasets_samples_are_its_windows(mix: Mixture) -> None:
    opened = open_mixture(mix)
    for d, name in enumerate(mix.names):
        own = alone(mix, name)
        assert len(opened.source.sources[d]) == len(own) > len(JsonlSource(mix[name].sources))
    assert opened.records == [len(alone(mix, n)) for n in mix.names]
    assert (
        opened.source.lengths().length.tolist()
        == np.concatenate([alone(mix, n).length for n in mix.names]).tolist()
    )


def packed_segments(batch: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The samples of a packed batch and their tokens, from ``cu_seqlens`` row by row."""
    segments = iter(np.diff(batch["cu_seqlens"].numpy()).tolist())
    order, sizes = [], []
    width = batch["input_ids"].shape[1]
    for row in batch["row_sample_ids"].tolist():
        filled = 0
        for i in (i for i in row if i >= 0):
            order.append(i)
            sizes.append(next(segments))
            filled += sizes[-1]
        if filled < width:
            assert next(segments) == width - filled  # the row's padding
    return order, sizes


@pytest.mark.parametrize("plan", ["random", "packed"])
@pytest.mark.parametrize("world_size", [1, 2])
def test_every_selected_window_once_with_its_tokens(
    mix: Mixture, plan: str, world_size: int
) -> None:
    got: Counter[int] = Counter()
    tokens: Counter[int] = Counter()
    counts = set()
    for rank in range(world_size):
        loader = Loader(
            mix, batch_size=3, plan=plan, world=World(rank, world_size), seed=4,
            plan_options={"max_length": MAX_LENGTH} if plan == "packed" else None,
        )  # fmt: skip
        batches = list(loader)
        counts.add(len(batches))
        for batch in batches:
            seen = [i for i in batch["sample_ids"].tolist() if i >= 0]
            if plan == "packed":  # each row's segments, then its padding's (if any)
                order, sizes = packed_segments(batch)
            else:
                order = batch["sample_ids"].tolist()
                sizes = batch["attention_mask"].sum(dim=1).tolist()
            for i, n in zip(order, sizes, strict=True):
                if i >= 0:
                    tokens[i] += int(n)
            got.update(seen)
    want = Counter(loader.planner.selection.order(0).materialize().tolist())
    assert got == want and len(counts) == 1
    lengths = loader.mixture.source.lengths().length
    for i, n in tokens.items():
        assert n == got[i] * int(lengths[i]), i  # a window's tokens are its length


def test_resume_over_a_mixtures_windows(mix: Mixture) -> None:
    def make(world: World = World(), num_workers: int = 0) -> Loader:
        return Loader(
            mix, batch_size=2, plan="packed", plan_options={"max_length": MAX_LENGTH},
            world=world, num_workers=num_workers, seed=5,
        )  # fmt: skip

    assert check_resume(make, epochs=2, every=3, num_workers=[2, 0]) > 3
    state = make().state_dict()
    kinds = [d["source"]["kind"] for d in state["source"]["datasets"]]
    assert kinds == ["pieces", "pieces"]
    want = Counter(make().planner.selection.order(0).materialize().tolist())
    for old, new in [(2, 3), (3, 1)]:
        consumed, rest = check_elastic(make, old_world_size=old, new_world_size=new, steps=2)
        assert Counter(consumed.tolist()) + Counter(rest.tolist()) == want


def test_a_hold_out_takes_whole_documents(mix: Mixture) -> None:
    held = Mixture(
        [MixtureEntry("a", mix["a"].sources, val=0.4), MixtureEntry("b", mix["b"].sources)],
        recipe=mix.recipe,
    )
    opened = open_mixture(held)
    table = opened.source.sources[0].table
    train, val = opened.pools("train")[0], opened.pools("val")[0]
    assert len(val) and len(train)
    assert sorted([*train.tolist(), *val.tolist()]) == list(range(len(table)))
    doc = np.searchsorted(table.first, np.arange(len(table)), side="right") - 1
    assert not set(doc[train].tolist()) & set(doc[val].tolist())
    loader = Loader(held, batch_size=2, split="val", seed=1)
    seen = sorted(i for b in loader for i in b["sample_ids"].tolist() if i >= 0)
    assert seen == sorted(val.tolist())


def test_the_duplicate_check_compares_documents_not_windows(
    mix: Mixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Mixture(
        [MixtureEntry("a", mix["a"].sources, val=0.4), MixtureEntry("b", mix["b"].sources)],
        recipe=mix.recipe,
    )
    windowed = open_mixture(held)  # a mixture opened for training: its samples are windows
    assert windowed.source.windowed
    from_windows = find_duplicates(windowed, workers=1, progress=False)

    def no_lengths(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the duplicate check tokenized the documents")

    monkeypatch.setattr("chute.lengths.lengths_of", no_lengths)
    report = find_duplicates(held, workers=1, progress=False)  # compares records: no windows
    assert report.records == {"a:train": 3, "a:val": 4, "b": 6}  # documents
    assert report.within == {"a:train": 0, "a:val": 0, "b": 0}  # windows are no copies
    shared = report.between["a:train|b"]["contents"] + report.between["a:val|b"]["contents"]
    assert shared == 1  # b's first document is a's second
    assert from_windows.to_json() | {"seconds": 0, "records_per_s": 0} == report.to_json() | {
        "seconds": 0,
        "records_per_s": 0,
    }


def test_stats_of_the_yaml_with_split_equal_those_of_its_caches(
    mix: Mixture, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from chute.cli import app

    plain = Mixture(list(mix), recipe={k: v for k, v in mix.recipe.items() if k != "overflow"})
    config = tmp_path / "mix.yaml"
    config.write_text(plain.to_yaml())
    runner = CliRunner()
    args = ["--batch-size", "4", "--max-length", str(MAX_LENGTH), "--json"]
    from_yaml = runner.invoke(app, ["stats", str(config), *args, "--overflow", "split"])
    assert from_yaml.exit_code == 0, from_yaml.output
    split = tmp_path / "split.yaml"
    split.write_text(mix.to_yaml())
    built = runner.invoke(app, ["preprocess", str(split), "--out", str(tmp_path / "caches")])
    assert built.exit_code == 0, built.output
    from_caches = runner.invoke(app, ["stats", str(tmp_path / "caches"), *args])
    assert from_caches.exit_code == 0, from_caches.output
    a, b = json.loads(from_yaml.stdout), json.loads(from_caches.stdout)

    def plans(result: dict[str, Any]) -> dict[str, Any]:
        return {
            name: {k: v for k, v in plan.items() if k != "seconds"}
            for name, plan in result["plans"].items()
        }

    assert plans(a) == plans(b)
    # records are the documents, samples their windows, as chute stats says of one dataset
    assert {n: d["records"] for n, d in a["datasets"].items()} == {"a": 7, "b": 6}
    assert a["records"] == 13 and a["samples"] == sum(len(alone(mix, n)) for n in mix.names)
    assert a["split"] == sum(
        int(np.count_nonzero(np.diff(alone(mix, n).pieces.first) > 1)) for n in mix.names
    )
    assert a["epoch"] == b["epoch"]
    refused = runner.invoke(app, ["stats", str(tmp_path / "caches"), *args, "--overflow", "split"])
    assert refused.exit_code == 2 and "give the mixture YAML" in refused.output
