"""URLs without a server: credentials refused and masked, extras named, options checked, blocks."""

from __future__ import annotations

import pytest

from chute import ConfigError, RemoteError, RemoteOptions
from chute._internal.remote import check_url, filesystem, is_url, join_url, redact, with_retries
from chute.sources.blocks import BlockCache


def test_urls_and_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_url("s3://b/x") and is_url("hf://datasets/a/b") and not is_url("file:///x")
    assert not is_url("data/x.jsonl") and not is_url("C:/x") and not is_url(None)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    text = (
        "GET https://u:pw@h/x?X-Amz-Signature=abc&X-Amz-Credential=AKIA/x&part=2 with s3cr3t-value"
    )
    assert redact(text) == (
        "GET https://***@h/x?X-Amz-Signature=***&X-Amz-Credential=***&part=2 with ***"
    )
    for bad in ("https://u:p@h/a", "https://h/a?sig=1", "s3://b/a?token=x", "https://h/a?key=1"):
        with pytest.raises(ConfigError, match="carries a credential.*standard chains"):
            check_url(bad)
    assert check_url("s3://b/a?versionId=3") == "s3://b/a?versionId=3"
    assert join_url("s3://b/r", "../../x") == "s3://b/x"  # never above the bucket


@pytest.mark.parametrize(("protocol", "extra"), [("gs", "gcs"), ("az", "azure"), ("abfs", "azure")])
def test_a_missing_backend_names_its_extra(protocol: str, extra: str) -> None:
    pytest.importorskip("fsspec")
    try:
        filesystem(protocol)
    except ConfigError as exc:
        assert f"pip install 'chute[{extra}]'" in str(exc)
    # installed here: nothing to check


def test_unknown_protocol_and_options() -> None:
    with pytest.raises(ConfigError, match="nope:// is not a storage protocol"):
        filesystem("nope")
    with pytest.raises(ConfigError, match=r"remote.retries: expected an integer >= 0, got -1"):
        RemoteOptions(retries=-1)
    with pytest.raises(ConfigError, match="remote.cache_bytes: 10 is smaller than one block"):
        RemoteOptions(cache_bytes=10)


def test_retries_stop_at_the_limit_and_permanent_errors_are_not_retried() -> None:
    calls: list[int] = []

    def flaky() -> bytes:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset by peer")
        return b"ok"

    opts = RemoteOptions(retries=2, backoff=0.0)
    assert with_retries(flaky, "s3://b/x", "read", opts) == b"ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(RemoteError, match=r"s3://b/x: read failed after 2 attempts \(last: Conn"):
        with_retries(flaky, "s3://b/x", "read", RemoteOptions(retries=1, backoff=0.0))
    calls.clear()

    def missing() -> bytes:
        calls.append(1)
        raise FileNotFoundError("s3://b/x")

    with pytest.raises(RemoteError, match=r"read failed \(no such object") as err:
        with_retries(missing, "s3://b/x", "read", opts)
    assert len(calls) == 1 and err.value.missing


def test_block_cache_reads_are_exact_across_block_edges() -> None:
    data = bytes(range(256)) * 100
    fetched: list[tuple[int, int]] = []

    def fetch(lo: int, hi: int) -> bytes:
        fetched.append((lo, hi))
        return data[lo:hi]

    cache = BlockCache(block_size=100, cache_bytes=500, readahead=400)
    for lo, hi in [(0, 10), (95, 205), (5000, 5001), (25590, 25600), (0, 25600)]:
        assert cache.read("k", fetch, len(data), lo, hi) == data[lo:hi]
    assert len(cache._blocks) <= 5 and fetched[-1] == (
        0,
        25600,
    )  # larger than the cache: read through
    seq = BlockCache(block_size=100, cache_bytes=10_000, readahead=800)
    sizes = []
    for lo in range(0, 5000, 50):
        before = seq.requests
        seq.read("k", fetch, len(data), lo, lo + 50)
        if seq.requests > before:
            sizes.append(fetched[-1][1] - fetched[-1][0])
    assert sizes[0] == 100 and sizes == sorted(sizes) and max(sizes) == 800  # grows, then stays
