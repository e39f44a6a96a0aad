"""``CHUTE_REMOTE_*`` environment variables set the remote defaults for every process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chute.errors import ConfigError
from chute.remote_options import ENV_OPTIONS, RemoteOptions, options_from_env


def test_each_variable_sets_its_default() -> None:
    env = {
        "CHUTE_REMOTE_TIMEOUT": "7.5",
        "CHUTE_REMOTE_RETRIES": "9",
        "CHUTE_REMOTE_BACKOFF": "0",
        "CHUTE_REMOTE_BLOCK_SIZE": "4096",
        "CHUTE_REMOTE_CACHE_BYTES": "65536",
        "CHUTE_REMOTE_READAHEAD": "1048576",
        "CHUTE_REMOTE_CACHE_LIMIT": "2GB",
    }
    assert set(env) == set(ENV_OPTIONS)
    assert options_from_env(env) == RemoteOptions(
        timeout=7.5,
        retries=9,
        backoff=0.0,
        block_size=4096,
        cache_bytes=65536,
        readahead=1 << 20,
        cache_limit=2 * 10**9,
    )
    assert options_from_env({"CHUTE_REMOTE_RETRIES": " "}) == RemoteOptions()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CHUTE_REMOTE_RETRIES": "many"}, "CHUTE_REMOTE_RETRIES: expected an integer, got 'many'"),
        ({"CHUTE_REMOTE_TIMEOUT": "-1"}, "CHUTE_REMOTE_TIMEOUT: expected a positive number"),
        (
            {"CHUTE_REMOTE_BLOCK_SIZE": "1000000", "CHUTE_REMOTE_CACHE_BYTES": "10"},
            "CHUTE_REMOTE_CACHE_BYTES: 10 is smaller than one block",
        ),
        # a misspelled variable was the default without a word
        (
            {"CHUTE_REMOTE_CACHE_LIMT": "1GB"},
            r"CHUTE_REMOTE_CACHE_LIMT \(did you mean CHUTE_REMOTE_CACHE_LIMIT\?\): chute reads "
            r"no such variable",
        ),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options_from_env(env)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def test_a_new_process_reads_them_and_a_bad_one_fails_only_remote_work() -> None:
    shown = _run(
        "from chute._internal.remote import DEFAULT_OPTIONS as d; print(d.retries, d.timeout)",
        CHUTE_REMOTE_RETRIES="2",
        CHUTE_REMOTE_TIMEOUT="3",
    )
    assert shown.stdout.split() == ["2", "3.0"], shown.stderr
    # local data never reads the variables; the first remote operation reports the bad one
    code = (
        "import json, tempfile, pathlib\n"
        "from chute import JsonlSource, open_source\n"
        "from chute.errors import ConfigError\n"
        "d = pathlib.Path(tempfile.mkdtemp()); (d / 'a.jsonl').write_text('{\"text\": \"x\"}\\n')\n"
        "assert len(JsonlSource(d / 'a.jsonl')) == 1\n"
        "try:\n"
        "    open_source('memory://bucket/a.jsonl')\n"
        "except ConfigError as exc:\n"
        "    print('ConfigError:', exc)\n"
    )
    bad = _run(code, CHUTE_REMOTE_RETRIES="lots")
    assert "ConfigError: CHUTE_REMOTE_RETRIES: expected an integer, got 'lots'" in bad.stdout, (
        bad.stdout + bad.stderr
    )
