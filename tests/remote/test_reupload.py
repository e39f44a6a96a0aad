"""An object uploaded again with the same bytes is the same object; other bytes never are.

A re-upload gives an object a new ``LastModified`` (and, in a versioned bucket, a new version),
which name the write, not the bytes: a loader state, a partial build and a finished cache all
resume over it when its size and ETag are unchanged. An ETag that differs is a change, even
where the bytes happen to be the same (a multipart upload's ETag depends on its parts): chute
cannot tell the two apart, so it refuses, and says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import CacheError, Loader, StateMismatch, open_cache, preprocess
from chute.testing import write_id_jsonl
from remote_helpers import Bucket

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]


def head(s3: Bucket, key: str) -> dict[str, Any]:
    return dict(s3.client.head_object(Bucket=s3.name, Key=key))


def put_again(s3: Bucket, key: str, data: bytes) -> None:
    """Upload ``data`` to ``key`` once more, late enough that its LastModified moves."""
    before = head(s3, key)["LastModified"]
    for _ in range(30):
        time.sleep(0.2)
        s3.put(key, data)
        if head(s3, key)["LastModified"] != before:
            return
    pytest.fail("the store kept the object's LastModified over 6 s of uploads")


def put_multipart(s3: Bucket, key: str, data: bytes) -> None:
    """``data`` as a one-part multipart upload: the same bytes, an ETag ending in ``-1``."""
    upload = s3.client.create_multipart_upload(Bucket=s3.name, Key=key)["UploadId"]
    part = s3.client.upload_part(Bucket=s3.name, Key=key, UploadId=upload, PartNumber=1, Body=data)
    s3.client.complete_multipart_upload(
        Bucket=s3.name,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )


def same_size_other_bytes(data: bytes) -> bytes:
    i = data.index(b"7")
    return data[:i] + b"8" + data[i + 1 :]


def batches(loader: Loader) -> list[list[int]]:
    return [b["sample_ids"].tolist() for b in loader]


def test_a_loader_resumes_over_the_same_bytes_uploaded_again(s3: Bucket, tmp_path: Path) -> None:
    data = write_id_jsonl(tmp_path / "ids.jsonl", 40).read_bytes()
    url = s3.put("ids.jsonl", data)
    whole = batches(Loader(url, batch_size=4, seed=3))
    first = Loader(url, batch_size=4, seed=3)
    stream = iter(first)
    for _ in range(3):
        next(stream)
    state = first.state_dict()
    etag = head(s3, "ids.jsonl")["ETag"]
    put_again(s3, "ids.jsonl", data)
    assert head(s3, "ids.jsonl")["ETag"] == etag  # the same bytes: the same ETag
    resumed = Loader(url, batch_size=4, seed=3)
    resumed.load_state_dict(state)
    assert batches(resumed) == whole[3:]


def test_other_bytes_of_the_same_size_are_refused(s3: Bucket, tmp_path: Path) -> None:
    data = write_id_jsonl(tmp_path / "ids.jsonl", 40).read_bytes()
    url = s3.put("ids.jsonl", data)
    state = Loader(url, batch_size=4, seed=3).state_dict()
    changed = same_size_other_bytes(data)
    assert len(changed) == len(data) and changed != data
    put_again(s3, "ids.jsonl", changed)
    with pytest.raises(StateMismatch, match=r"source\.files\[0\]\.etag: state '[0-9a-f]{32}'"):
        Loader(url, batch_size=4, seed=3).load_state_dict(state)


def test_the_same_bytes_under_another_etag_are_refused_with_the_reason(
    s3: Bucket, tmp_path: Path
) -> None:
    data = write_id_jsonl(tmp_path / "ids.jsonl", 40).read_bytes()
    url = s3.put("ids.jsonl", data)
    state = Loader(url, batch_size=4, seed=3).state_dict()
    put_multipart(s3, "ids.jsonl", data)
    assert s3.get("ids.jsonl") == data and head(s3, "ids.jsonl")["ETag"].endswith('-1"')
    with pytest.raises(StateMismatch) as refused:
        Loader(url, batch_size=4, seed=3).load_state_dict(state)
    message = str(refused.value)
    assert "etag" in message and "multipart" in message and "part size" in message


def test_a_partial_build_and_its_cache_go_on_over_the_same_bytes_uploaded_again(
    s3: Bucket, tmp_path: Path
) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "train.jsonl", 300).read_bytes()
    cfg = config([], tok)
    cfg["sources"] = [s3.put("train.jsonl", data)]
    out = tmp_path / "cache"
    with pytest.raises(CacheError, match="waited"):
        preprocess(cfg, out=out, shard="0/2", wait_timeout=0.1)
    put_again(s3, "train.jsonl", data)
    rest = preprocess(cfg, out=out, shard="1/2")  # the plan of the first rank still holds
    assert rest.finalized and rest.built == 2
    put_again(s3, "train.jsonl", data)
    assert len(open_cache(out)) == 300  # the sources check passes too

    put_again(s3, "train.jsonl", same_size_other_bytes(data))
    with pytest.raises(CacheError, match=r"source s3://.*train\.jsonl: etag differs"):
        open_cache(out)
