"""Faults between chute and S3: dropped connections and slow answers, through a real TCP proxy.

``FaultProxy`` sits in front of moto's server: it closes the next N connections as soon as a
request arrives, or delays every answer. Transient faults are retried with backoff; faults
that persist end in one ``RemoteError`` naming the URL and the number of attempts, with no
credential in it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from chute import JsonlSource, RemoteError, RemoteOptions
from remote_helpers import ACCESS_KEY, FAST, SECRET_KEY, Bucket, FaultProxy, S3Server

DATA = b"".join(b'{"n": %d}\n' % i for i in range(500))


@pytest.fixture
def proxy(s3_server: S3Server, s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The bucket's server behind a fault proxy (the standard chain points at the proxy)."""
    p = FaultProxy(s3_server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.endpoint)
    yield p
    p.close()


def test_dropped_connections_are_retried(s3: Bucket, proxy: FaultProxy) -> None:
    url = s3.put("d.jsonl", DATA)
    proxy.drop = 2  # the first two connections die with the request in flight
    src = JsonlSource(url, remote=FAST)
    assert [r.data["n"] for r in src] == list(range(500))
    assert proxy.connections >= 3 and proxy.drop == 0


def test_a_server_that_keeps_dropping_gives_one_clear_error(s3: Bucket, proxy: FaultProxy) -> None:
    url = s3.put("d.jsonl", DATA)
    proxy.drop = 1000
    t0 = time.perf_counter()
    with pytest.raises(RemoteError, match=rf"^{url}: stat failed after 3 attempts \(last: ") as err:
        JsonlSource(url, remote=FAST)
    assert time.perf_counter() - t0 < 20
    text = str(err.value)
    assert "raise RemoteOptions(retries=..., timeout=...)" in text
    assert ACCESS_KEY not in text and SECRET_KEY not in text and err.value.url == url


def test_slow_answers_time_out_then_fail_after_the_retries(s3: Bucket, proxy: FaultProxy) -> None:
    url = s3.put("d.jsonl", DATA)
    src = JsonlSource(url, remote=FAST)  # indexed while the server is fast
    proxy.delay = 0.05  # slower, but within the timeout: still read
    slow_ok = JsonlSource(url, remote=RemoteOptions(timeout=2.0, retries=1, backoff=0.01))
    assert slow_ok[499].data == {"n": 499}
    impatient = JsonlSource(url, remote=RemoteOptions(timeout=1.0, retries=1, backoff=0.01))
    proxy.delay = 3.0  # slower than the 1 s timeout, every time
    t0 = time.perf_counter()
    with pytest.raises(RemoteError, match=rf"^{url}: .* failed after 2 attempts") as err:
        impatient[250]
    assert 2.0 <= time.perf_counter() - t0 < 20
    assert ACCESS_KEY not in str(err.value) and SECRET_KEY not in str(err.value)
    proxy.delay = 0.0
    assert src[250].data == {"n": 250}  # the same source reads again once the server recovers
