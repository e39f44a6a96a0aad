"""The lengths pass: equal to the recipe sample by sample, parallel, cached by content, shared."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

import chute.lengths.measure as lengths_mod
from chute import ConfigError, JsonlSource, Recipe
from chute.lengths import STATUS_TRUNCATED, Lengths, lengths_of
from chute.lengths.store import cache_paths
from chute.testing import write_id_jsonl
from recipe_helpers import tiny_tokenizer

ROWS = [
    {"instruction": "Hello there", "output": "Hi!"},
    {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
    {"instruction": "only a prompt"},  # missing_field
    {  # cut by max_length, after the first answer
        "conversations": [
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello"},
            {"from": "human", "value": "the quick brown fox " * 30},
            {"from": "gpt", "value": "ok"},
        ]
    },
    {"instruction": "What is six times seven?", "output": "42"},
]


def write_rows(path: Path, rows: list) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + b"{broken\n")
    return path


def recipe(max_length: int = 60) -> Recipe:
    return Recipe(tokenizer=tiny_tokenizer(), template="chatml", max_length=max_length)


def test_lengths_equal_the_recipe_record_by_record(tmp_path: Path) -> None:
    source = JsonlSource(write_rows(tmp_path / "d.jsonl", ROWS))
    lens = lengths_of(source, recipe(), workers=1)
    expected = []
    for record in source:
        try:
            expected.append(len(recipe()(record)["input_ids"]))
        except Exception:
            expected.append(-1)
    assert lens.length.tolist() == expected
    assert expected[3] == 60 and lens.status[3] == STATUS_TRUNCATED and lens.num_truncated == 1
    assert lens.rejected == {"missing_field": 1, "bad_json": 1}
    assert lens.tally.examples["bad_json"][0].startswith(f"{source.paths[0]}:6: bad_json")
    assert lens.tokens == sum(x for x in expected if x > 0) and lens.num_valid == 4


def test_a_parallel_pass_equals_a_single_process_pass(tmp_path: Path) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 9000, broken=range(5, 9000, 700)))
    one = lengths_of(source, workers=1, cache=False)
    two = lengths_of(source, workers=2, cache=False)
    assert np.array_equal(one.length, two.length) and np.array_equal(one.status, two.status)
    assert one.rejected == two.rejected and sum(one.rejected.values()) == 13
    assert one.length[0] == 1 and one.length[6] == 7 and one.length[5] == -1


def test_the_cache_answers_the_second_time_and_is_keyed_by_recipe_and_content(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_rows(tmp_path / "d.jsonl", ROWS)
    first = lengths_of(JsonlSource(path), recipe(), workers=1)
    array, meta = cache_paths(first.key)
    assert array.is_file() and meta.is_file()
    left = [p.suffix for p in array.parent.iterdir()]
    assert sorted(left) == [".json", ".npy"]  # no temp left, nor the lock it held

    def no_pass(*args, **kwargs):
        raise AssertionError("the lengths pass ran although the cache holds the lengths")

    monkeypatch.setattr(lengths_mod, "compute_lengths", no_pass)
    again = lengths_of(JsonlSource(path), recipe(), workers=1)
    assert isinstance(again.length.base, np.memmap) or isinstance(again.length, np.memmap)
    assert again.key == first.key and np.array_equal(again.length, first.length)
    assert again.rejected == first.rejected and again.tally.examples == first.tally.examples
    monkeypatch.undo()
    other_recipe = lengths_of(JsonlSource(path), recipe(max_length=20), workers=1)
    assert other_recipe.key != first.key and other_recipe.length.max() == 20
    with open(path, "ab") as f:
        f.write(orjson.dumps(ROWS[0]) + b"\n")
    changed = lengths_of(JsonlSource(path), recipe(), workers=1)
    assert changed.key not in (first.key, other_recipe.key) and len(changed) == len(first) + 1


def test_a_half_written_cache_entry_is_never_read(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "d.jsonl", ROWS)
    first = lengths_of(JsonlSource(path), recipe(), workers=1)
    expected, key = np.array(first.length), first.key
    del first  # drop the memory map before tearing the file under it
    array, _ = cache_paths(key)
    torn = array.read_bytes()[:140]  # the header and a few values under a complete sidecar
    array.unlink()
    array.write_bytes(torn)
    again = lengths_of(JsonlSource(path), recipe(), workers=1)
    assert np.array_equal(again.length, expected)


def test_a_source_that_knows_its_lengths_is_asked_instead_of_tokenizing() -> None:
    class Cached:
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> dict:
            raise AssertionError("no record should be read")

        def lengths(self) -> np.ndarray:
            return np.array([4, -1, 9])

    lens = lengths_of(Cached(), recipe=None)
    assert lens.length.tolist() == [4, -1, 9] and lens.rejected == {"rejected": 1}

    class Wrong(Cached):
        lengths = np.array([1, 2])  # type: ignore[assignment]

    with pytest.raises(ConfigError, match=r"Wrong.lengths has 2 entries but the source has 3"):
        lengths_of(Wrong())


def test_data_without_a_fingerprint_is_measured_in_process_and_not_cached(cache_dir: Path) -> None:
    lens = lengths_of([{"input_ids": [1, 2]}, {"input_ids": []}])
    assert lens.length.tolist() == [2, -1] and lens.rejected == {"empty_sample": 1}
    assert lens.key is None and not (cache_dir / "lengths").exists()


def test_other_local_ranks_wait_for_local_rank_zero(tmp_path: Path) -> None:
    source = JsonlSource(write_id_jsonl(tmp_path / "ids.jsonl", 50))
    got: list[Lengths] = []
    waiter = threading.Thread(
        target=lambda: got.append(lengths_of(source, local_rank=1, wait_timeout=30))
    )
    waiter.start()
    time.sleep(0.3)
    mine = lengths_of(source, workers=1)
    waiter.join(timeout=30)
    assert got and np.array_equal(got[0].length, mine.length)
    fresh = JsonlSource(write_id_jsonl(tmp_path / "other.jsonl", 5))
    with pytest.raises(ConfigError, match=r"waited wait_timeout=0.2 s for local rank 0"):
        lengths_of(fresh, local_rank=3, wait_timeout=0.2)


RANK_ZERO = r"""
import sys, time
import chute.lengths.measure as measure
real = measure.compute_lengths
def slow(*args, **kwargs):
    print("computing", flush=True)
    time.sleep(120)
    return real(*args, **kwargs)
measure.compute_lengths = slow
from chute.lengths import lengths_of
from chute.sources import JsonlSource
lengths_of(JsonlSource(sys.argv[1]), workers=1)
"""


def test_a_waiting_rank_stops_at_once_when_local_rank_zero_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under SLURM (no torchrun agent to end the job) a killed local rank 0 left the others
    waiting for wait_timeout (an hour); they see its lock let go and stop with why."""
    import signal
    import subprocess
    import sys

    from waiting_helpers import seen_at_work

    seen = seen_at_work(monkeypatch)  # the waiter has seen rank 0 at work (its lock held)
    data = write_id_jsonl(tmp_path / "ids.jsonl", 50)
    zero = subprocess.Popen(
        [sys.executable, "-c", RANK_ZERO, str(data)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert zero.stdout is not None and zero.stdout.readline().strip() == "computing"
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                lengths_of(JsonlSource(data), local_rank=1, wait_timeout=300)
            except BaseException as exc:
                errors.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        assert seen.wait(60) and waiter.is_alive()
        zero.send_signal(signal.SIGKILL)
        waiter.join(timeout=120)
        assert not waiter.is_alive()  # stopped, where it waited out wait_timeout=300
    finally:
        zero.kill()
        zero.wait()
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "local rank 0 stopped computing the lengths cache" in str(errors[0])
    assert len(lengths_of(JsonlSource(data))) == 50  # run again: computed


def test_lengths_values_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"lengths must be a 1-D array of ints"):
        Lengths.of(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ConfigError, match="image_tokens has 1 entries but length has 2"):
        Lengths(np.array([1, 2]), image_tokens=np.array([0]))
    with pytest.raises(ConfigError, match="lengths must be a chute Lengths or an array"):
        Lengths.of("12")


def test_counts_over_slices_equal_the_whole_array(monkeypatch: pytest.MonkeyPatch) -> None:
    from chute.lengths import base

    rng = np.random.default_rng(3)
    length = rng.integers(-1, 500, 10_001).astype(np.int32)  # -1: rejected
    monkeypatch.setattr(base, "_SLICE", 1000)  # eleven slices, the last one short
    lens = Lengths(length)
    assert lens.num_valid == int(np.count_nonzero(length >= 0))
    assert lens.tokens == int(length[length >= 0].sum(dtype=np.int64))
    assert lens.num_rejected == int(np.count_nonzero(length < 0))


def test_a_caches_lengths_carry_its_image_tokens(tmp_path: Path) -> None:
    """Plans balance image patches and ``chute stats`` shows them: from a cache too, as from
    its data read with the recipe (the cache's lengths dropped them)."""
    from cache_helpers import write_image_records, write_tokenizer
    from chute import open_cache, preprocess

    data = write_image_records(tmp_path, 12)
    with open(data, "a") as f:
        f.write('{"instruction": "text only", "output": "no image"}\n')
    recipe = {"tokenizer": str(write_tokenizer(tmp_path / "tok")), "template": "chatml"}
    recipe["image_tokens"] = 16
    preprocess({"sources": [str(data)], "recipe": recipe}, out=tmp_path / "c", progress=False)
    cached = lengths_of(open_cache(tmp_path / "c"))
    direct = lengths_of(JsonlSource(data), Recipe(**recipe), cache=False, workers=1)
    assert direct.image_tokens is not None
    assert cached.image_tokens is not None
    assert cached.image_tokens.tolist() == direct.image_tokens.tolist() == [16] * 12 + [0]
