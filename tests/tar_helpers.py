"""WebDataset shards for the tests, written with Python's ``tarfile`` (not with chute)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import orjson

Sample = tuple[str, dict[str, bytes]]  # (key, {extension: bytes})


def write_shard(path: Path, samples: Iterable[Sample]) -> Path:
    """One tar shard holding ``samples``, members in the given order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for key, members in samples:
            for ext, body in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(body)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(body))
    return path


def id_samples(ids: Sequence[int]) -> list[Sample]:
    """Pre-tokenized samples whose tokens are their id: ``{"input_ids": [i] * (1 + i % 4)}``."""
    return [(f"{i:06d}", {"json": orjson.dumps({"input_ids": [i] * (1 + i % 4)})}) for i in ids]


def id_shards(folder: Path, n: int, per_shard: int) -> list[Path]:
    """``n`` id samples over shards of ``per_shard`` samples: ``train-000000.tar``, ..."""
    return [
        write_shard(folder / f"train-{k:06d}.tar", id_samples(range(lo, min(n, lo + per_shard))))
        for k, lo in enumerate(range(0, n, per_shard))
    ]
