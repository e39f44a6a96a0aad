"""A token cache in S3: built with the same commit protocol (manifest last), read through a mirror.

``preprocess(out="s3://...")`` must write the same chunks a local build writes (byte for byte),
commit them the same way (a chunk's record after its files, the manifest after everything),
resume and finish across ranks through the bucket alone, and ``open_cache("s3://...")`` must
give the same samples, download each chunk once, refuse a damaged one, and notice a rebuild.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import orjson
import pytest

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import CacheError, Loader, World, open_cache, preprocess
from remote_helpers import Bucket

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    return write_tokenizer(tmp_path / "tok")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_alpaca(tmp_path / "train.jsonl", 300, broken=(5, 77, 150))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_preprocess_to_s3_writes_the_local_build(
    s3: Bucket, tmp_path: Path, tok: Path, data: Path
) -> None:
    url = s3.upload(data)
    cfg = config([Path(url)], tok, max_length=96)
    cfg["sources"] = [url]
    local = preprocess(cfg, out=tmp_path / "local")
    remote = preprocess(cfg, out=s3.url("caches/run1"), workers=2)
    assert remote.finalized and remote.path == s3.url("caches/run1")
    assert remote.manifest["data_digest"] == local.manifest["data_digest"]
    keys = s3.list_keys("caches/run1/")
    assert "caches/run1/manifest.json" in keys and "caches/run1/config.yaml" in keys
    for name in ("000000.arrow", "000004.json", "000000.rejects.jsonl"):
        assert sha(s3.get(f"caches/run1/chunks/{name}")) == sha(
            (tmp_path / "local/chunks" / name).read_bytes()
        )
    cache, want = open_cache(s3.url("caches/run1")), open_cache(tmp_path / "local")
    assert len(cache) == len(want) == 292 and cache.remote  # 3 broken, 5 over max_length
    for i in (0, 150, 291):
        assert np.array_equal(cache[i]["input_ids"], want[i]["input_ids"])
        assert np.array_equal(cache[i]["labels"], want[i]["labels"])
        assert cache[i]["path"] == url
    assert np.array_equal(cache.lengths, want.lengths)
    assert cache.recipe_config().recipe.max_length == 96


def test_ranks_share_only_the_bucket_and_the_manifest_comes_last(
    s3: Bucket, tmp_path: Path, tok: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(data, tok)
    out = s3.url("shared")
    with pytest.raises(CacheError, match="waited .* for 2 chunk"):
        preprocess(cfg, out=out, shard="0/2", wait_timeout=0.2)
    assert "shared/manifest.json" not in s3.list_keys("shared/")
    with pytest.raises(CacheError, match="not complete: 3 of 5 chunks are committed"):
        open_cache(out)
    # rank 1 on "another machine": its own local cache, only the bucket in common
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "machine2"))
    second = preprocess(cfg, out=out, shard="1/2")
    assert second.finalized and second.built == 2
    again = preprocess(cfg, out=out, shard="0/2")  # a resumed rank 0: nothing left to build
    assert again.reused == 3 and again.built == 0 and not again.finalized
    assert len(open_cache(out)) == 297


def test_loader_over_a_remote_cache_reads_each_chunk_once(
    s3: Bucket, tmp_path: Path, tok: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = s3.url("c")
    preprocess(config(data, tok), out=out)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "trainer"))  # a machine without a copy
    cache = open_cache(out)
    seen: list[int] = []
    for rank in range(2):
        loader = Loader(cache, batch_size=8, world=World(rank, 2), num_workers=2, seed=1)
        for batch in loader:
            ids = batch["sample_ids"].numpy()
            seen.extend(ids[ids >= 0].tolist())
    assert sorted(seen) == list(range(297))
    mirror = next((tmp_path / "trainer/remote-caches").iterdir())
    assert sorted(p.name for p in (mirror / "chunks").glob("*.arrow")) == [
        f"{k:06d}.arrow" for k in range(5)
    ]


def test_damaged_remote_chunk_and_a_rebuild_at_the_same_url(
    s3: Bucket, tmp_path: Path, tok: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = s3.url("c")
    preprocess(config(data, tok), out=out)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "reader"))
    arrow = s3.get("c/chunks/000002.arrow")
    s3.put("c/chunks/000002.arrow", bytes(reversed(arrow)))  # same size, other bytes
    cache = open_cache(out)
    with pytest.raises(CacheError, match=r"000002.arrow: its bytes differ from the manifest"):
        cache[150]
    assert cache[0]["length"] > 0  # other chunks still read
    preprocess(config(data, tok, max_length=96), out=out, overwrite=True)
    rebuilt = open_cache(out)  # a new build: the reader's mirror is cleared, not reused
    assert rebuilt.recipe_config().recipe.max_length == 96 and len(rebuilt) == 292
    assert max(int(rebuilt[i]["length"]) for i in range(len(rebuilt))) <= 96


def test_pixels_stage_of_a_remote_cache(s3: Bucket, tmp_path: Path, tok: Path) -> None:
    """--pixels with a remote --out: the store goes up after the chunks, before the manifest."""
    from PIL import Image

    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    for name, (w, h) in {"a.png": (64, 48), "b.png": (40, 80)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(
            tmp_path / "img" / name
        )
    rows = [
        {
            "images": [f"img/{n}"],
            "messages": [
                {"role": "user", "content": "<image>What?"},
                {"role": "assistant", "content": "A."},
            ],
        }
        for n in ("a.png", "b.png", "a.png")
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(orjson.dumps(r).decode() + "\n" for r in rows))
    cfg = config(data, tok, image_tokens=16)
    report = preprocess(cfg, out=s3.url("px"), pixels={"size": 32})
    assert report.to_json()["stage_outputs"]["pixels"]["images"] == 2
    keys = s3.list_keys("px/pixels/")
    assert "px/pixels/manifest.json" in keys and len(keys) > 1
    cache = open_cache(s3.url("px"))
    assert len(cache.pixels) == 2
    batch = next(iter(Loader(cache, batch_size=3, shuffle=False, world=World(0, 1))))
    assert batch["pixel_values"].shape[0] == 3
