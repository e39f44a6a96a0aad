"""A bounded local cache of remote files, and shard-window shuffling over it, on a real S3 server.

Record ``i`` holds tokens ``[i] * k`` and a 200-byte filler, spread over 8 files, so exact-once is
set equality of sample ids, and the folder's disk use is sampled while the loader reads.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import JsonlSource, Loader, ParquetSource, RemoteOptions, World
from chute._internal.files import cache_root
from chute.errors import ConfigError
from chute.remote_options import options_from_env
from chute.sources.file_cache import FileCache
from chute.testing import check_elastic, check_resume
from remote_helpers import Bucket, DiskSampler, folder_bytes

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

FILES, PER_FILE = 8, 30
N = FILES * PER_FILE


def write_shards(s3: Bucket, tmp_path: Path) -> list[str]:
    urls = []
    for f in range(FILES):
        path = tmp_path / f"part-{f:03d}.jsonl"
        with open(path, "wb") as out:
            for i in range(f * PER_FILE, (f + 1) * PER_FILE):
                out.write(orjson.dumps({"input_ids": [i] * (1 + i % 5), "pad": "x" * 200}) + b"\n")
        urls.append(s3.upload(path, f"shards/{path.name}"))
    return urls


def file_size(s3: Bucket) -> int:
    return max(len(s3.get(k)) for k in s3.list_keys("shards/"))


def test_an_epoch_larger_than_the_limit_completes_under_it(s3: Bucket, tmp_path: Path) -> None:
    urls = write_shards(s3, tmp_path)
    limit = 3 * file_size(s3)  # 3 of the 8 files fit
    source = JsonlSource(urls, remote=RemoteOptions(cache_limit=limit))
    folder = cache_root() / "remote-files"
    ids: list[int] = []
    with DiskSampler(folder) as sampler:
        for rank in range(2):
            loader = Loader(
                source,
                batch_size=4,
                world=World(rank, 2),
                num_workers=2,
                seed=1,
                plan="shards",
                plan_options={"shard_window": 2},
            )
            for batch in loader:
                sampler.sample()  # after each batch too, not only from the thread
                got = batch["sample_ids"].numpy()
                real = got >= 0
                assert np.array_equal(batch["input_ids"][:, 0].numpy()[real], got[real])
                ids.extend(got[real].tolist())
    assert sorted(ids) == list(range(N))  # every sample exactly once over 2 ranks x 2 workers
    assert sampler.samples > 20 and 0 < sampler.peak <= limit
    assert len(sampler.seen) == FILES  # every file went through the folder, evicted in turn


def test_the_limit_takes_units_from_python_and_the_environment() -> None:
    assert RemoteOptions(cache_limit="20GB").cache_limit == 20 * 10**9
    assert options_from_env({"CHUTE_REMOTE_CACHE_LIMIT": "512MiB"}).cache_limit == 512 << 20
    assert options_from_env({}).cache_limit is None
    with pytest.raises(ConfigError, match="CHUTE_REMOTE_CACHE_LIMIT: expected a size such as"):
        options_from_env({"CHUTE_REMOTE_CACHE_LIMIT": "lots"})
    with pytest.raises(ConfigError, match=r"remote.cache_limit: expected a number of bytes >= 1"):
        RemoteOptions(cache_limit=0)


def test_a_file_in_use_is_not_evicted(s3: Bucket, tmp_path: Path) -> None:
    """Reader A holds file 0; reader B reads all the others under a limit of two files."""
    urls = write_shards(s3, tmp_path)
    options = RemoteOptions(cache_limit=2 * file_size(s3))
    folder = cache_root() / "remote-files"
    a, b = JsonlSource(urls, remote=options), JsonlSource(urls, remote=options)
    assert a[0].data["input_ids"][0] == 0
    _, held = folder_bytes(folder)
    (key,) = held
    for i in range(PER_FILE, N):  # B: files 1..7, each needs room
        assert b[i].data["input_ids"][0] == i
        used, names = folder_bytes(folder)
        assert key in names and used <= options.cache_limit
    for i in range(PER_FILE):  # A reads on from its copy, which never vanished
        assert a[i].data["input_ids"][0] == i
    reader = a._readers[0].io
    assert reader.files.downloads == 1  # type: ignore[union-attr]


def _hold(folder: str, ready: multiprocessing.synchronize.Event) -> None:
    cache = FileCache(Path(folder), limit=100)
    cache.acquire("held", 60, lambda dst: dst.write(b"h" * 60))
    ready.set()
    time.sleep(60)


def test_a_pin_of_another_process_holds_until_that_process_is_gone(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=_hold, args=(str(tmp_path), ready))
    child.start()
    try:
        assert ready.wait(30)
        cache = FileCache(tmp_path, limit=100)
        assert cache.acquire("other", 60, lambda dst: dst.write(b"o" * 60)) is None
        assert (tmp_path / "data" / "held").exists()
    finally:
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join()
    # the holder was killed: its pin is stale, and the file goes to make room
    assert cache.acquire("other", 60, lambda dst: dst.write(b"o" * 60)) is not None
    assert not (tmp_path / "data" / "held").exists()
    assert [p.name[:6] for p in (tmp_path / "pins").iterdir()] == ["other."]


def test_parquet_shards_read_under_the_limit(s3: Bucket, tmp_path: Path) -> None:
    urls = []
    for f in range(4):
        rows = range(f * 20, (f + 1) * 20)
        table = pa.table({"input_ids": [[i] * 3 for i in rows], "pad": ["y" * 300 for _ in rows]})
        pq.write_table(table, tmp_path / f"p{f}.parquet", row_group_size=5)
        urls.append(s3.upload(tmp_path / f"p{f}.parquet", f"pq/p{f}.parquet"))
    size = max(len(s3.get(f"pq/p{f}.parquet")) for f in range(4))
    source = ParquetSource(urls, remote=RemoteOptions(cache_limit=2 * size), cache_bytes=1)
    folder = cache_root() / "remote-files"
    order = np.random.default_rng(0).permutation(80)
    for i in order.tolist():
        assert source[i].data["input_ids"][0] == i
        used, _ = folder_bytes(folder)
        assert used <= 2 * size
    assert folder_bytes(folder)[1]  # the copies were used, not only ranged reads


def shard_loader(urls: list[str], limit: int, world: World | None = None, **kw: object) -> Loader:
    return Loader(
        JsonlSource(urls, remote=RemoteOptions(cache_limit=limit)),
        batch_size=3,
        world=world or World(0, 1),
        seed=4,
        plan="shards",
        plan_options={"shard_window": 3},
        **kw,  # type: ignore[arg-type]
    )


def test_shard_order_is_identical_on_every_rank_and_resumes(s3: Bucket, tmp_path: Path) -> None:
    urls = write_shards(s3, tmp_path)
    limit = 4 * file_size(s3)
    orders = [shard_loader(urls, limit, World(r, 2)).plan.order.materialize() for r in range(2)]
    assert np.array_equal(orders[0], orders[1])
    assert check_resume(lambda **kw: shard_loader(urls, limit, **kw), epochs=1, every=7) > 5
    consumed, delivered = check_elastic(
        lambda world: shard_loader(urls, limit, world), old_world_size=2, new_world_size=3, steps=5
    )
    assert sorted(np.concatenate([consumed, delivered]).tolist()) == list(range(N))


def test_a_file_larger_than_the_limit_is_read_with_ranged_requests(
    s3: Bucket, tmp_path: Path
) -> None:
    urls = write_shards(s3, tmp_path)
    source = JsonlSource(urls[:2], remote=RemoteOptions(cache_limit=file_size(s3) // 2))
    got = [source[i].data["input_ids"][0] for i in reversed(range(2 * PER_FILE))]
    assert got == list(reversed(range(2 * PER_FILE)))
    assert folder_bytes(cache_root() / "remote-files") == (0, set())
    reader = source._readers[0].io
    assert reader.files.refusals > 0 and reader.cache.requests > 0  # type: ignore[union-attr]


def test_a_full_shuffle_over_files_far_larger_than_the_limit_warns_once(
    s3: Bucket, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chute._internal.files._WARNED", set())  # earlier tests' warnings
    urls = write_shards(s3, tmp_path)
    source = JsonlSource(urls, remote=RemoteOptions(cache_limit=2 * file_size(s3)))
    with caplog.at_level("WARNING", logger="chute"):
        Loader(source, batch_size=4, world=World(0, 1), seed=4, plan="shards")
        assert "downloads most files many times" not in caplog.text  # shards: a window at a time
        for _ in range(2):
            Loader(source, batch_size=4, world=World(0, 1), seed=4)
    assert caplog.text.count("downloads most files many times") == 1
    assert "a shuffled plan over 8 remote files" in caplog.text
    assert "use plan='shards'" in caplog.text
