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
