"""The Loader over data in S3: every sample exactly once per epoch, DataLoader workers included.

Record ``i`` holds tokens ``[i] * k`` (``chute.testing.write_id_jsonl``), so exact-once is set
equality of the sample ids over ranks, and every row is checked against its id.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import Loader, ParquetSource, World
from chute.testing import write_id_jsonl
from remote_helpers import Bucket

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

N = 61


def seen_ids(source: object, world_size: int, num_workers: int) -> list[int]:
    ids: list[int] = []
    for rank in range(world_size):
        loader = Loader(
            source, batch_size=4, world=World(rank, world_size), seed=3, num_workers=num_workers
        )
        for batch in loader:
            got = batch["sample_ids"].numpy()
            real = got >= 0  # -1: the placeholder row of a rank with one sample fewer
            assert np.array_equal(batch["input_ids"][:, 0].numpy()[real], got[real])
            ids.extend(got[real].tolist())
    return ids


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_over_s3_jsonl_is_exact_once(s3: Bucket, tmp_path: Path, num_workers: int) -> None:
    url = s3.upload(write_id_jsonl(tmp_path / "ids.jsonl", N))
    ids = seen_ids(url, world_size=3, num_workers=num_workers)
    assert sorted(ids) == list(range(N))


def test_loader_over_s3_parquet_is_exact_once(s3: Bucket, tmp_path: Path) -> None:
    table = pa.table({"input_ids": [[i] * (1 + i % 5) for i in range(N)]})
    pq.write_table(table, tmp_path / "ids.parquet", row_group_size=8)
    url = s3.upload(tmp_path / "ids.parquet")
    source = ParquetSource(url)
    assert source.files[0].row_groups == 8
    assert sorted(seen_ids(source, world_size=2, num_workers=2)) == list(range(N))
