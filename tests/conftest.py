"""Shared fixtures: an isolated chute cache per test, and the real data in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CHUTE_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def _tokenizer_tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of compiled tokenizer tables for the whole run, all pytest workers together.

    Compiling a real tokenizer's tables and checking them against ``tokenizers`` takes seconds
    (Qwen3: 3-8 s to compile, 2-4 s to check, docs/benchmarks.md); with a fresh chute cache per
    test, every test that runs ``chute`` in a subprocess paid it again. The tables are keyed
    by the file's SHA-256 and written atomically, so sharing them is what every run after a
    user's first does. Tests of compiling itself opt out (``@pytest.mark.fresh_tables``).
    """
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # shared by workers
    tables = root / "tokenizer-tables"
    tables.mkdir(exist_ok=True)
    return tables


@pytest.fixture(autouse=True)
def _isolated_cache(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """Every test writes indexes and caches under its own temporary directory, never ~/.cache.

    Only the compiled tokenizer tables (``<cache>/tokenizers``) are shared between tests.
    """
    cache = tmp_path_factory.mktemp("chute-cache")
    if request.node.get_closest_marker("fresh_tables") is None:
        tables = request.getfixturevalue("_tokenizer_tables")
        (cache / "tokenizers").symlink_to(tables, target_is_directory=True)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def cache_dir(_isolated_cache: Path) -> Path:
    return _isolated_cache


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets and tokenizers of ../shared/data; tests using it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA} (set CHUTE_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture
def id_source(tmp_path: Path):  # type: ignore[no-untyped-def]
    """``id_source(n, broken=...)``: an indexed JSONL source whose record i is tokens [i]*k.

    Content that is its own index makes "every sample exactly once" a comparison with
    ``range(n)`` and lets every batch row be checked against its ``sample_ids``.
    """
    from chute import JsonlSource
    from chute.testing import write_id_jsonl

    def make(n: int, broken=(), name: str = "ids.jsonl") -> JsonlSource:  # type: ignore[no-untyped-def]
        return JsonlSource(write_id_jsonl(tmp_path / name, n, broken=broken))

    return make


@pytest.fixture(scope="session")
def s3_server():  # type: ignore[no-untyped-def]
    """A real S3 protocol server (moto's server mode) on 127.0.0.1, for the session."""
    pytest.importorskip("moto.server", reason="moto[server] runs the local S3 server")
    pytest.importorskip("s3fs", reason="s3fs is chute's S3 backend (chute[s3])")
    from remote_helpers import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A fresh bucket of the local S3 server, the standard credential chain pointing at it.

    The chain is environment variables with fake credentials (``remote_helpers.ACCESS_KEY``);
    config files point at an empty folder, so nothing on this machine leaks in.
    """
    from remote_helpers import Bucket, s3_env

    for key, value in s3_env(s3_server.endpoint).items():
        monkeypatch.setenv(key, value)
    empty = tmp_path_factory.mktemp("aws")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return Bucket(s3_server.endpoint)
