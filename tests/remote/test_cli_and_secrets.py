"""The CLI over S3 (index, validate, inspect, stats, preprocess, a remote cache), and secrecy.

Credentials come from the standard chain only (here: ``AWS_*`` variables with fake values);
none may appear in stdout, stderr, log records, any file chute writes (indexes, mirrors, the
cache's objects in the bucket), or any exception message, including those of faults.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from cache_helpers import write_alpaca, write_tokenizer
from chute import JsonlSource, RemoteError, open_cache
from chute.cli import app
from remote_helpers import ACCESS_KEY, FAST, SECRET_KEY, Bucket, FaultProxy

pytestmark = pytest.mark.timeout(180)
runner = CliRunner()
SECRETS = (ACCESS_KEY, SECRET_KEY)


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code == 0, text
    return text


def no_secret_in_tree(root: Path) -> int:
    files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            data = Path(folder, name).read_bytes()
            assert not any(s.encode() in data for s in SECRETS), Path(folder, name)
            files += 1
    return files


def test_cli_over_s3_and_no_credential_anywhere(
    s3: Bucket,
    s3_server,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    cache_dir: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    tok = write_tokenizer(tmp_path / "tok")
    url = s3.upload(write_alpaca(tmp_path / "train.jsonl", 120, broken=(7,)))
    rows = [orjson.loads(line) for line in (tmp_path / "train.jsonl").read_bytes().splitlines()[:5]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    pq_url = s3.upload(tmp_path / "t.parquet")
    out: list[str] = []

    index = orjson.loads(run("index", s3.url("*.jsonl"), s3.url("*.parquet"), "--json"))
    assert index["records"] == 125 and index["files"][1]["kind"] == "parquet"
    out.append(str(index))
    recipe = ["--tokenizer", str(tok), "--template", "chatml"]
    valid = orjson.loads(
        run("validate", url, *recipe, "--rejects", str(tmp_path / "rej.jsonl"), "--json")
    )
    assert valid["valid"] == 119 and valid["by_reason"] == {"bad_json": 1}
    assert orjson.loads((tmp_path / "rej.jsonl").read_bytes().splitlines()[0])["path"] == url
    out.append(run("validate", pq_url, *recipe))
    out.append(run("inspect", pq_url, "--index", "2", *recipe, "--no-color"))
    assert f"{pq_url}:3" in out[-1]
    out.append(run("stats", url, *recipe, "--max-length", "64", "--batch-size", "8", "--json"))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "sources": [url],
                "recipe": {"tokenizer": str(tok), "template": "chatml"},
                "cache": {"chunk_size": 50, "workers": 1},
            }
        )
    )
    cache_url = s3.url("cache")
    out.append(run("preprocess", str(cfg), "--out", cache_url))
    assert f"{cache_url}/rejects.jsonl" in out[-1]
    out.append(run("validate", cache_url))
    out.append(run("inspect", cache_url, "--index", "3", "--no-color"))
    assert len(open_cache(cache_url)) == 119

    # faults: a server that keeps dropping connections; the error names the URL, no secret
    proxy = FaultProxy(s3_server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    proxy.drop = 1000
    try:
        with pytest.raises(RemoteError) as err:
            JsonlSource(s3.url("other.jsonl"), remote=FAST)
        out.append(str(err.value))
    finally:
        proxy.close()
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    failed = runner.invoke(app, ["index", s3.url("x.jsonl")])
    assert failed.exit_code != 0 and "x.jsonl: stat failed (no such object" in failed.output
    out.append(failed.output)

    text = "\n".join(out + [r.getMessage() for r in caplog.records])
    assert not any(s in text for s in SECRETS)
    assert no_secret_in_tree(cache_dir) > 3  # indexes and the cache's local mirror
    assert no_secret_in_tree(tmp_path) > 3
    for key in s3.list_keys():
        assert not any(s.encode() in s3.get(key) for s in SECRETS), key
    stored = yaml.safe_load(s3.get("cache/config.yaml"))
    assert stored["sources"] == [url]
