"""Tar shards in S3 under ``cache_limit``: each shard fetched whole into the bounded folder.

Records and image members (the media stage's ``tar:`` reads) come from the shard's local copy,
so with ``plan="shards"`` an epoch costs about one GET per shard instead of one or more per
sample; the folder's disk use is sampled while the loader reads, exact-once is set equality of
sample ids over 2 ranks x 2 workers, and a replaced shard still raises ``SourceChanged``.
"""

from __future__ import annotations

import io
import multiprocessing
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
from PIL import Image

from chute import Loader, Recipe, RemoteOptions, SourceChanged, TarSource, World
from chute._internal.files import cache_root
from chute._internal.objects import RemoteFile
from chute.media import ImageTransform, MediaStage
from chute.media.images import decode_image
from chute.testing import check_resume
from recipe_helpers import tiny_tokenizer
from remote_helpers import Bucket, DiskSampler, folder_bytes
from tar_helpers import id_shards, write_shard

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

SHARDS, PER_SHARD = 6, 10
TOK = tiny_tokenizer()
N = SHARDS * PER_SHARD


def jpeg(i: int) -> bytes:
    """A 48x48 noise JPEG (a few KB) seeded by ``i``: each sample's image differs."""
    pixels = np.random.default_rng(i).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def record(i: int) -> bytes:
    messages = [
        {"role": "user", "content": "<image>Which sample?"},
        {"role": "assistant", "content": f"Sample {i}."},
    ]
    return orjson.dumps({"messages": messages, "images": ["jpg"]})


def image_shards(s3: Bucket, tmp_path: Path) -> list[str]:
    """``SHARDS`` shards of image + conversation samples (sample ``i`` answers ``Sample i.``)."""
    urls = []
    for k in range(SHARDS):
        samples = [
            (f"{i:06d}", {"json": record(i), "jpg": jpeg(i)})
            for i in range(k * PER_SHARD, (k + 1) * PER_SHARD)
        ]
        shard = write_shard(tmp_path / f"train-{k:06d}.tar", samples)
        urls.append(s3.upload(shard, f"shards/{shard.name}"))
    return urls


def shard_size(s3: Bucket) -> int:
    return max(len(s3.get(k)) for k in s3.list_keys("shards/"))


def image_loader(urls: list[str], limit: int | None, world: World, workers: int) -> Loader:
    return Loader(
        TarSource(urls, remote=RemoteOptions(cache_limit=limit)),
        Recipe(tokenizer=TOK, template="chatml", image_tokens=16),
        batch_size=4,
        world=world,
        num_workers=workers,
        seed=3,
        plan="shards",
        plan_options={"shard_window": 2},
        media=MediaStage(ImageTransform(size=32, crop=32, tokens_per_image=16)),
    )


class Gets(list[int]):
    """The sizes of the GETs sent from this process, and a count shared with forked workers."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = multiprocessing.get_context("fork").Value("i", 0)

    def clear(self) -> None:
        super().clear()
        with self.shared.get_lock():
            self.shared.value = 0


@pytest.fixture
def counted_gets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gets]:
    """Every GET chute sends (ranged reads, pinned reads), counted in workers too."""
    calls = Gets()
    plain, pinned = RemoteFile.read_range, RemoteFile.pinned_read

    def count(data: bytes) -> bytes:
        calls.append(len(data))
        with calls.shared.get_lock():
            calls.shared.value += 1
        return data

    def read_range(self: RemoteFile, start: int, end: int) -> bytes:
        return count(plain(self, start, end))

    def pinned_read(self: RemoteFile, start: int, end: int) -> bytes:
        return count(pinned(self, start, end))

    monkeypatch.setattr(RemoteFile, "read_range", read_range)
    monkeypatch.setattr(RemoteFile, "pinned_read", pinned_read)
    yield calls


def test_an_epoch_of_image_shards_larger_than_the_limit_completes_under_it(
    s3: Bucket, tmp_path: Path, counted_gets: Gets
) -> None:
    urls = image_shards(s3, tmp_path)
    TarSource(urls)  # member indexes built before counting
    counted_gets.clear()
    limit = 3 * shard_size(s3)  # 3 of the 6 shards fit
    folder = cache_root() / "remote-files"
    ids: list[int] = []
    with DiskSampler(folder) as sampler:
        for rank in range(2):
            loader = image_loader(urls, limit, World(rank, 2), workers=2)
            for batch in loader:
                sampler.sample()
                got = batch["sample_ids"].numpy()
                ids.extend(got[got >= 0].tolist())
                assert batch["pixel_values"].shape[-1] == 32
            assert loader.stats == {}  # every image member read and decoded
    assert sorted(ids) == list(range(N))  # every sample exactly once over 2 ranks x 2 workers
    assert sampler.samples > 10 and 0 < sampler.peak <= limit
    assert len(sampler.seen) == SHARDS  # every shard went through the folder, evicted in turn
    # the workers' image reads came from the copies: without them each of the 60 images is a
    # GET of its own; with them, a download per shard and rank, and a few ranged reads while
    # the other worker's pins leave no room (19 in one run)
    assert counted_gets.shared.value < N // 2


def test_gets_per_sample_drop_to_shards_over_samples(
    s3: Bucket, tmp_path: Path, counted_gets: Gets
) -> None:
    urls = image_shards(s3, tmp_path)
    TarSource(urls)  # member indexes built before counting (each a one-time walk)
    limit = 3 * shard_size(s3)
    counts = {}
    for name, lim in (("ranged", None), ("cached", limit)):
        counted_gets.clear()
        ids = [
            i
            for batch in image_loader(urls, lim, World(0, 1), workers=0)
            for i in batch["sample_ids"].tolist()
            if i >= 0
        ]
        assert sorted(ids) == list(range(N))
        counts[name] = len(counted_gets)
    # without a limit: a GET per image member (records come through the block cache, here a
    # block per shard); with it: one download of each shard (50 KB: one request) serves all
    assert counts["ranged"] == N + SHARDS
    assert counts["cached"] == SHARDS


def test_member_reads_decode_the_same_pixels_from_the_local_copy(
    s3: Bucket, tmp_path: Path, counted_gets: Gets
) -> None:
    urls = image_shards(s3, tmp_path)
    source = TarSource(urls, remote=RemoteOptions(cache_limit=10 * shard_size(s3)))
    counted_gets.clear()
    for i in (0, 7, 13, N - 1):
        ref = source[i].data["images"][0]
        want = np.asarray(decode_image(jpeg(i)))
        assert np.array_equal(np.asarray(decode_image(ref)), want)
    assert len(counted_gets) == 3  # shards 0, 1 and 5, each fetched once, whole
    assert folder_bytes(cache_root() / "remote-files")[0] == sum(counted_gets)


def test_a_replaced_shard_raises_source_changed_under_the_limit(s3: Bucket, tmp_path: Path) -> None:
    record = {"text": "a caption", "images": ["jpg"]}
    shard = write_shard(tmp_path / "s.tar", [("p", {"json": orjson.dumps(record), "jpg": jpeg(1)})])
    url = s3.upload(shard, "s.tar")
    ref = TarSource(url)[0].data["images"][0]  # read by range: nothing in the folder
    limited = TarSource(url, remote=RemoteOptions(cache_limit=1 << 20))  # opened, not read yet
    write_shard(shard, [("q", {"txt": b"another caption, longer", "jpg": jpeg(2)})])
    s3.upload(shard, "s.tar")
    with pytest.raises(SourceChanged, match="changed"):
        limited[0]  # the download carries the indexed ETag
    with pytest.raises(SourceChanged):
        decode_image(ref)  # the member read goes through the same copy: refused alike
    fresh = pickle.loads(pickle.dumps(limited))  # a worker of it: refused too
    with pytest.raises(SourceChanged):
        fresh[0]
    assert folder_bytes(cache_root() / "remote-files") == (0, set())


def test_a_shard_larger_than_the_limit_is_read_by_range(
    s3: Bucket, tmp_path: Path, counted_gets: Gets
) -> None:
    record = {"text": "a caption", "images": ["jpg"]}
    samples = [(f"{i:03d}", {"json": orjson.dumps(record), "jpg": jpeg(i)}) for i in range(5)]
    url = s3.upload(write_shard(tmp_path / "big.tar", samples), "big.tar")
    source = TarSource(url, remote=RemoteOptions(cache_limit=4096))
    counted_gets.clear()
    for i in range(5):
        ref = source[i].data["images"][0]
        assert np.array_equal(np.asarray(decode_image(ref)), np.asarray(decode_image(jpeg(i))))
    assert folder_bytes(cache_root() / "remote-files") == (0, set())
    # each image one ranged request of exactly its tar header and bytes (no block around it)
    assert all(512 + len(jpeg(i)) in counted_gets for i in range(5))


def id_loader(urls: list[str], limit: int, **kw: object) -> Loader:
    return Loader(
        TarSource(urls, remote=RemoteOptions(cache_limit=limit)),
        batch_size=3,
        seed=5,
        plan="shards",
        plan_options={"shard_window": 2},
        **kw,  # type: ignore[arg-type]
    )


def test_resume_under_the_shard_plan_equals_the_uninterrupted_rest(
    s3: Bucket, tmp_path: Path
) -> None:
    urls = [s3.upload(shard, f"ids/{shard.name}") for shard in id_shards(tmp_path, 41, per_shard=8)]
    limit = 2 * max(len(s3.get(k)) for k in s3.list_keys("ids/"))
    ids = [i for batch in id_loader(urls, limit) for i in batch["sample_ids"].tolist() if i >= 0]
    assert sorted(ids) == list(range(41))
    checked = check_resume(lambda **kw: id_loader(urls, limit, **kw), epochs=1, every=3)
    assert checked >= 4
    assert folder_bytes(cache_root() / "remote-files")[0] <= limit
