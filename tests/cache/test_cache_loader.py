"""The Loader over a cache yields what it yields over the source and the recipe; resume works."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import FingerprintMismatch, JsonlSource, Loader, Recipe, World, open_cache, preprocess
from chute.errors import StateMismatch
from chute.testing import check_resume, take

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("loader")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 250)
    cfg = config(data, tok, max_length=200)
    preprocess(cfg, out=root / "c")
    return {"root": root, "cfg": cfg, "data": data, "out": root / "c"}


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert np.array_equal(x[key], y[key]), key


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_over_cache_equals_loader_over_source_and_recipe(setup: dict, workers: int):
    cache = open_cache(setup["out"])
    recipe = Recipe(**setup["cfg"]["recipe"])
    assert len(cache) == 250  # nothing rejected, so sample ids are record ids
    for rank in range(2):
        world = World(rank=rank, world_size=2)
        common = {"batch_size": 8, "seed": 3, "world": world, "num_workers": workers}
        from_cache = Loader(cache, **common)
        from_source = Loader(JsonlSource(setup["data"]), recipe, **common)
        assert len(from_cache) == len(from_source) == 16
        _same(take(from_cache, 32), take(from_source, 32))  # two epochs


def test_loader_takes_a_cache_directory_and_checks_a_recipe(setup: dict) -> None:
    recipe = Recipe(**setup["cfg"]["recipe"])
    by_path = take(Loader(str(setup["out"]), batch_size=16, seed=0), 5)
    by_cache = take(Loader(open_cache(setup["out"]), recipe, batch_size=16, seed=0), 5)
    _same(by_path, by_cache)
    other = Recipe(**{**setup["cfg"]["recipe"], "max_length": 64})
    with pytest.raises(FingerprintMismatch, match="max_length differs: cache 200, recipe 64"):
        Loader(open_cache(setup["out"]), other, batch_size=4)


def test_resume_over_a_cache_and_a_state_of_another_cache_is_refused(setup: dict) -> None:
    cache = open_cache(setup["out"])

    def make(world: World = World(), num_workers: int = 0) -> Loader:
        return Loader(cache, batch_size=16, seed=1, world=world, num_workers=num_workers)

    assert check_resume(make, epochs=2, every=4, num_workers=(2,)) >= 8
    state = make().state_dict()
    assert state["source"] == cache.fingerprint()
    other = setup["root"] / "other"
    cfg = {**setup["cfg"], "recipe": {**setup["cfg"]["recipe"], "max_length": 96}}
    preprocess(cfg, out=other)
    with pytest.raises(StateMismatch, match="source.data_digest"):
        Loader(open_cache(other), batch_size=16, seed=1).load_state_dict(state)


@pytest.mark.parametrize(
    ("plan", "options"),
    [("grouped", {}), ("packed", {"max_length": 256}), ("budget", {"max_tokens": 512})],
)
def test_length_aware_plans_read_the_cache_lengths(setup: dict, plan: str, options: dict):
    cache = open_cache(setup["out"])
    recipe = Recipe(**setup["cfg"]["recipe"])
    common = {"batch_size": 4, "seed": 5, "world": World(rank=0, world_size=2)}
    common |= {"plan": plan, "plan_options": options}
    from_cache = Loader(cache, **common)
    assert np.array_equal(from_cache.lengths.length, cache.lengths)  # no lengths pass ran
    from_source = Loader(JsonlSource(setup["data"]), recipe, **common)
    _same(take(from_cache, len(from_cache)), take(from_source, len(from_source)))


def test_stats_reads_a_cache(setup: dict) -> None:
    from typer.testing import CliRunner

    from chute.cli import app

    args = ["stats", str(setup["out"]), "--max-length", "128", "--batch-size", "8", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    lengths = open_cache(setup["out"]).lengths
    assert out["samples"] == 250 and out["tokens"] == int(np.minimum(lengths, 128).sum())
    assert set(out["efficiency"]) == {"random", "grouped", "budget", "packed"}
    tok = setup["cfg"]["recipe"]["tokenizer"]
    result = CliRunner().invoke(app, [*args, "--tokenizer", tok])
    assert result.exit_code == 2 and "is a cache" in result.output


def test_packed_plan_over_a_cache_takes_the_caches_max_length(setup: dict) -> None:
    cache = open_cache(setup["out"])
    assert cache.max_length == 200
    loader = Loader(cache, batch_size=4, seed=0, plan="packed")  # no plan_options needed
    assert loader.planner.inner.max_length == 200
    assert next(iter(loader))["input_ids"].shape == (4, 200)
