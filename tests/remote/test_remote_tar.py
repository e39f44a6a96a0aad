"""Tar shards in S3 (moto on 127.0.0.1): indexed in place, read by byte range, exact-once.

The shards are uploaded to a real S3 protocol server; the source indexes them with ranged
reads, the media stage reads each image member with one ranged GET, and a shard replaced in
the bucket raises ``SourceChanged``.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import orjson
import pytest

from chute import Loader, Recipe, SourceChanged, TarSource, World, open_source
from chute.media import ImageTransform, MediaStage
from chute.media.images import decode_image
from chute.sources.tar_members import MemberRef
from remote_helpers import Bucket
from tar_helpers import id_shards, write_shard

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

N = 29


def test_s3_shards_exact_once_over_ranks_and_workers(s3: Bucket, tmp_path: Path) -> None:
    for shard in id_shards(tmp_path, N, per_shard=7):
        s3.upload(shard, f"shards/{shard.name}")
    source = open_source(s3.url("shards/train-*.tar"))
    assert isinstance(source, TarSource) and len(source) == N and source.files[0].remote
    again = TarSource(s3.url("shards/train-*.tar"))
    assert not any(f.built for f in again.files)  # the member indexes are reused
    ids: list[int] = []
    for rank in range(2):
        for batch in Loader(source, batch_size=3, world=World(rank, 2), seed=2, num_workers=2):
            got = batch["sample_ids"].numpy()
            real = got >= 0
            assert np.array_equal(batch["input_ids"][:, 0].numpy()[real], got[real])
            ids.extend(got[real].tolist())
    assert sorted(ids) == list(range(N))


@pytest.mark.shared_data
def test_shards_written_to_s3_read_back(s3: Bucket, tmp_path: Path, shared_data: Path) -> None:
    from chute.recipe.shards import write_shards

    demo = shared_data / "llama-factory/mllm_demo.json"
    report = write_shards(open_source(str(demo)), s3.url("out"), shard_size="30KB")
    assert report.samples == 6 and len(report.shards) > 1
    assert s3.list_keys("out/") == [f"out/{s['name']}" for s in report.shards]
    back = open_source(s3.url("out/train-*.tar"))
    plain = open_source(str(demo))
    assert [r.index for r in back] == list(range(6))
    for a, b in zip(plain, back, strict=True):
        assert a.data["messages"] == b.data["messages"]
        for name, ref in zip(a.data["images"], b.data["images"], strict=True):
            want = np.asarray(decode_image(demo.parent / name))
            assert np.array_equal(np.asarray(decode_image(ref)), want)


@pytest.mark.shared_data
def test_s3_image_members_decode_by_range_and_replacement_is_caught(
    s3: Bucket, tmp_path: Path, shared_data: Path
) -> None:
    jpg = (shared_data / "llama-factory/mllm_demo_data/2.jpg").read_bytes()
    record = {"text": "A football player.", "images": ["jpg"]}
    shard = write_shard(tmp_path / "s.tar", [("p", {"json": orjson.dumps(record), "jpg": jpg})])
    url = s3.upload(shard, "s.tar")
    source = TarSource(url)
    ref = source[0].data["images"][0]
    assert MemberRef.parse(ref).shard == url
    tok = str(shared_data / "tokenizers/qwen3")
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens="qwen2-vl")
    sample = recipe(source[0])
    assert sample["images"][0]["size"] == [300, 199]
    expected = np.asarray(decode_image(shared_data / "llama-factory/mllm_demo_data/2.jpg"))
    assert np.array_equal(np.asarray(decode_image(ref)), expected)
    loader = Loader(
        source,
        Recipe(tokenizer=tok, template="qwen3", image_tokens=16, image_token="<|image_pad|>"),
        batch_size=1,
        media=MediaStage(ImageTransform(size=32, crop=32, tokens_per_image=16)),
    )
    assert [b["pixel_values"].shape[-1] for b in loader] == [32]
    write_shard(shard, [("q", {"txt": b"another caption, longer", "jpg": jpg[::-1]})])
    s3.upload(shard, "s.tar")
    fresh = pickle.loads(pickle.dumps(source))  # a new worker: no block cached yet
    with pytest.raises(SourceChanged):
        fresh[0]
    with pytest.raises(SourceChanged, match="other bytes at offset"):
        decode_image(ref)
