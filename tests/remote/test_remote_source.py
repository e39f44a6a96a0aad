"""JsonlSource over a real S3 server: the same records as the local file, indexed once, checked.

Shared data files are uploaded to moto's S3 server; every remote record must equal the local
one byte for byte, with the same line number, in random and sequential order.
"""

from __future__ import annotations

import gzip
import pickle
import random
from pathlib import Path

import pytest

from chute import ConfigError, JsonlSource, RemoteError, RemoteOptions, SourceChanged, open_source
from chute.sources import open_index
from remote_helpers import ACCESS_KEY, FAST, Bucket

LF = "llama-factory"


def same_records(remote: JsonlSource, local: JsonlSource, sample: int = 150) -> None:
    assert len(remote) == len(local)
    order = list(range(len(local)))
    random.Random(0).shuffle(order)
    for i in order[:sample]:
        r, loc = remote[i], local[i]
        assert (r.raw, r.line, r.index, r.element) == (loc.raw, loc.line, loc.index, loc.element)
    assert [r.raw for r in remote] == [r.raw for r in local]


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "name",
    ["c4_demo.jsonl", "alpaca_en_demo.json", "v1_sft_demo.jsonl"],
    ids=["jsonl", "array", "v1"],
)
def test_remote_file_reads_as_the_local_one(s3: Bucket, shared_data: Path, name: str) -> None:
    local_path = shared_data / LF / name
    url = s3.upload(local_path)
    remote = JsonlSource(url)
    assert remote.files[0].built and remote.files[0].remote
    same_records(remote, JsonlSource(local_path))
    assert remote[3].location.startswith(f"{url}:")
    # the index is kept in the local index cache, keyed by the object's identity
    again = JsonlSource(url)
    assert not again.files[0].built
    fp = again.fingerprint()["files"][0]
    assert fp["path"] == url and fp["size"] == local_path.stat().st_size and fp["etag"]


@pytest.mark.shared_data
def test_compressed_object_is_decompressed_once_then_read_locally(
    s3: Bucket, shared_data: Path
) -> None:
    local_path = shared_data / LF / "c4_demo.jsonl"
    url = s3.put("c4.jsonl.gz", gzip.compress(local_path.read_bytes()))
    remote = JsonlSource(url)
    assert not remote.files[0].remote  # read from the decompressed copy
    same_records(remote, JsonlSource(local_path))
    assert remote[0].path == url


def test_globs_list_the_bucket_in_order(s3: Bucket) -> None:
    for name in ("b.jsonl", "a.jsonl", "c.txt", "sub/d.jsonl"):
        s3.put(name, b'{"n": 1}\n{"n": 2}\n')
    src = JsonlSource(s3.url("*.jsonl"))
    assert src.paths == [s3.url("a.jsonl"), s3.url("b.jsonl")] and len(src) == 4
    with pytest.raises(Exception, match="matches no objects"):
        JsonlSource(s3.url("*.parquet"))


def test_a_scheme_in_capitals_reads_as_in_lower_case(s3: Bucket) -> None:
    """``S3://`` was handed to fsspec as written: its "bucket" was refused, and retried 6 times."""
    s3.put("a.jsonl", b'{"n": 1}\n{"n": 2}\n')
    upper = "S3" + s3.url("a.jsonl")[2:]
    src = JsonlSource(upper, remote=FAST)
    assert src.paths == [s3.url("a.jsonl")] and [r.data["n"] for r in src] == [1, 2]
    assert JsonlSource(upper.replace("a.jsonl", "*.jsonl"), remote=FAST).paths == src.paths


def test_a_changed_object_is_source_changed(s3: Bucket) -> None:
    lines = [b'{"n": %d, "pad": "%s"}' % (i, b"x" * 200) for i in range(2000)]
    url = s3.put("d.jsonl", b"\n".join(lines) + b"\n")
    opts = RemoteOptions(block_size=4096, cache_bytes=64 * 1024)
    src = JsonlSource(url, remote=opts)
    assert src[0].data["n"] == 0  # opened: the identity was checked
    s3.put("d.jsonl", b"\n".join(reversed(lines)) + b"\n")  # same size, other bytes
    with pytest.raises(SourceChanged, match=r"the object changed \(its ETag differs\)"):
        src[1500]  # a block not read yet: S3 refuses the stale ETag (If-Match)
    stale = JsonlSource.__new__(JsonlSource)
    stale.__setstate__(src.__getstate__())  # a worker opening the old index
    with pytest.raises(SourceChanged, match="changed after it was indexed"):
        stale[5]
    fresh = JsonlSource(url, remote=opts)  # re-opening re-indexes
    assert fresh.files[0].built and fresh[0].data["n"] == 1999


def test_block_cache_is_bounded_and_sequential_reads_grow(s3: Bucket) -> None:
    url = s3.put("d.jsonl", b"".join(b'{"n": %d}\n' % i for i in range(20000)))
    opts = RemoteOptions(block_size=1024, cache_bytes=8 * 1024, readahead=64 * 1024)
    src = JsonlSource(url, remote=opts)
    rng = random.Random(1)
    for i in rng.sample(range(len(src)), 300):
        assert src[i].data == {"n": i}
    blocks = src.blocks
    assert blocks is not None and len(blocks._blocks) <= blocks.capacity == 8
    seq = JsonlSource(url, remote=opts)
    assert [r.data["n"] for r in seq.records_between(0, 5000)] == list(range(5000))
    size = seq.files[0].bytes
    # read-ahead: a forward pass needs far fewer requests than blocks
    assert seq.blocks is not None and seq.blocks.requests < size / 1024 / 4


def test_pickled_source_opens_its_own_connection(s3: Bucket) -> None:
    url = s3.put("d.jsonl", b"".join(b'{"n": %d}\n' % i for i in range(100)))
    src = JsonlSource(url)
    assert src[10].data == {"n": 10}
    copy = pickle.loads(pickle.dumps(src))
    assert copy.blocks is not None and copy.blocks.requests == 0  # a fresh block cache
    assert [copy[i].data["n"] for i in (99, 0, 50)] == [99, 0, 50]
    assert b"AKIA" not in pickle.dumps(src) and ACCESS_KEY.encode() not in pickle.dumps(src)


def test_missing_object_and_credentials_in_urls(s3: Bucket) -> None:
    with pytest.raises(RemoteError, match=rf"{s3.url('nope.jsonl')}: stat failed \(no such object"):
        JsonlSource(s3.url("nope.jsonl"))
    url = s3.put("d.jsonl", b'{"n": 1}\n')
    signed = s3.client.generate_presigned_url(
        "get_object", Params={"Bucket": s3.name, "Key": "d.jsonl"}
    )
    assert ACCESS_KEY in signed
    with pytest.raises(ConfigError, match="carries a credential") as err:
        open_source(signed)
    assert ACCESS_KEY not in str(err.value) and "Signature=***" in str(err.value)
    with pytest.raises(ConfigError, match=r"https://\*\*\*@host/d.jsonl carries a credential"):
        JsonlSource("https://user:pw@host/d.jsonl")
    assert len(JsonlSource(url, remote=FAST)) == 1


def test_index_of_a_remote_empty_array_and_an_object(s3: Bucket) -> None:
    assert len(open_index(s3.put("e.json", b"[]"))) == 0
    with pytest.raises(Exception, match="one JSON object spanning several lines"):
        open_index(s3.put("o.json", b'{\n"a": 1\n}\n'))


def test_plain_https_style_urls_read_with_range_requests(s3: Bucket, s3_server) -> None:  # type: ignore[no-untyped-def]
    """An http(s):// URL (here moto's plain endpoint, which needs no signature) works the same."""
    pytest.importorskip("aiohttp", reason="http(s):// needs aiohttp (chute[http])")
    body = b"".join(b'{"n": %d}\n' % i for i in range(300))
    s3.client.put_object(Bucket=s3.name, Key="d.jsonl", Body=body, ACL="public-read")
    url = f"{s3_server.endpoint}/{s3.name}/d.jsonl"
    src = JsonlSource(url, remote=FAST)
    assert len(src) == 300 and src[299].data == {"n": 299} and src.files[0].remote
    assert src.fingerprint()["files"][0]["path"] == url
