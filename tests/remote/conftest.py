"""Fixtures of the remote-storage tests: a real S3 server (moto) for the session, a bucket each.

The environment is the standard credential chain (``AWS_*`` variables) pointing at the local
server with fake credentials; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from remote_helpers import Bucket, S3Server, s3_env


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[server] runs the local S3 server")
    pytest.importorskip("s3fs", reason="s3fs is chute's S3 backend (chute[s3])")
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path_factory) -> Bucket:  # type: ignore[no-untyped-def]
    """A fresh bucket, with the standard chain pointing at the local server."""
    for key, value in s3_env(s3_server.endpoint).items():
        monkeypatch.setenv(key, value)
    empty = tmp_path_factory.mktemp("aws")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return Bucket(s3_server.endpoint)
