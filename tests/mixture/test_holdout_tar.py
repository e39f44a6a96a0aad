"""Hold-outs and duplicate checks over tar shards follow the samples, not where they lie.

A tar member's reference names its shard and offset; the content hash takes the member by
its name, so shards moved to another folder or written again with another number of samples
per shard keep their validation split, and byte-identical copies are duplicates.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cache_helpers import write_tokenizer
from chute import Mixture, MixtureEntry, TarSource
from chute.mixture.opened import open_mixture
from chute.mixture.overlap import find_duplicates
from tar_helpers import write_shard

N = 120


def shards(folder: Path, per_shard: int) -> str:
    """The same ``N`` caption + image samples, ``per_shard`` to a shard."""
    samples = [
        (f"{i:06d}", {"txt": f"caption {i}".encode(), "png": b"p%d" % (i % 3)}) for i in range(N)
    ]
    for k, lo in enumerate(range(0, N, per_shard)):
        write_shard(folder / f"train-{k:06d}.tar", samples[lo : lo + per_shard])
    return str(folder / "train-*.tar")


def held_out(glob: str, tokenizer: Path) -> set[str]:
    mix = Mixture(
        [MixtureEntry("caps", glob, val=0.25)],
        recipe={"tokenizer": str(tokenizer), "format": "text"},
    )
    (ids,) = open_mixture(mix).pools("val")
    assert ids is not None
    source = TarSource(glob)
    return {source[int(i)].data["text"] for i in ids}


def test_moved_and_resharded_shards_hold_out_the_same_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    tok = write_tokenizer(tmp_path / "tok")
    two = shards(tmp_path / "two", 60)
    shutil.copytree(tmp_path / "two", tmp_path / "moved")
    four = shards(tmp_path / "four", 30)
    val = held_out(two, tok)
    assert 0 < len(val) < N
    assert held_out(str(tmp_path / "moved" / "train-*.tar"), tok) == val
    assert held_out(four, tok) == val
    report = find_duplicates(
        {"train": two, "copy": str(tmp_path / "moved" / "train-*.tar")},
        workers=1,
        progress=False,
    )
    assert report.between["train|copy"]["contents"] == N


def test_shards_chute_wrote_hold_out_and_repeat_as_their_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``chute shard`` names each record's media by its key (``000000004.0.png``); the
    ``.refs`` member keeps what it replaced, so a sample hashes as its source record: the
    same hold-out, exact copies (one image in three records) on one side, and the loose file
    and its shards sharing every content."""
    from cache_helpers import write_image_records
    from chute import JsonlSource
    from chute.recipe.shards import write_shards

    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    tok = write_tokenizer(tmp_path / "tok")
    lines = write_image_records(tmp_path, 8).read_bytes().splitlines(keepends=True)
    loose = tmp_path / "copies.jsonl"
    loose.write_bytes(b"".join(line for line in lines for _ in range(3)))  # each thrice
    write_shards(JsonlSource(loose), tmp_path / "shards", shard_size=2000)
    shards = str(tmp_path / "shards" / "train-*.tar")
    assert len(TarSource(shards).files) > 1

    def val_ids(path: str) -> list[int]:
        recipe = {"tokenizer": str(tok), "template": "chatml", "image_tokens": 4}
        mix = Mixture([MixtureEntry("d", path, val=0.5)], recipe=recipe)
        (ids,) = open_mixture(mix).pools("val")
        assert ids is not None
        return sorted(ids.tolist())

    val = val_ids(str(loose))
    assert 0 < len(val) < 24 and val == val_ids(shards)
    assert all(len([i for i in val if i // 3 == g]) in (0, 3) for g in range(8))  # whole groups
    report = find_duplicates({"loose": str(loose), "shards": shards}, workers=1, progress=False)
    assert report.between["loose|shards"]["contents"] == 8
    assert report.within == {"loose": 16, "shards": 16}
