"""Content hashes: the same sample in any format, spacing or position hashes alike; cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from chute.formats import FormatReader, FormatSpec
from chute.formats.content import record_hash
from chute.mixture.hashes import content_hashes
from chute.sources import JsonlSource

AUTO = FormatReader(FormatSpec("auto"))


def test_the_same_exchange_in_three_formats_hashes_alike() -> None:
    alpaca = {"instruction": "What is 2+2?", "input": "", "output": "4"}
    sharegpt = {
        "conversations": [
            {"from": "human", "value": "What is  2+2?\n"},
            {"from": "gpt", "value": " 4"},
        ]
    }
    messages = {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    }
    hashes = {record_hash(AUTO, r) for r in (alpaca, sharegpt, messages)}
    assert len(hashes) == 1


def test_what_differs_changes_the_hash() -> None:
    base = {
        "messages": [
            {"role": "user", "content": "<image>Describe."},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["a/1.jpg"],
    }
    same_image = {**base, "images": ["./a/1.jpg"]}
    other_image = {**base, "images": ["a/2.jpg"]}
    other_answer = {
        **base,
        "messages": [base["messages"][0], {"role": "assistant", "content": "A dog."}],
    }
    h = record_hash(AUTO, base)
    assert record_hash(AUTO, same_image) == h
    assert record_hash(AUTO, other_image) != h
    assert record_hash(AUTO, other_answer) != h
    # roles are content: the same text said by the other side is another sample
    swapped = {
        "messages": [
            {"role": "user", "content": "A cat."},
            {"role": "assistant", "content": "Describe."},
        ]
    }
    assert record_hash(AUTO, swapped) != record_hash(
        AUTO,
        {
            "messages": [
                {"role": "user", "content": "Describe."},
                {"role": "assistant", "content": "A cat."},
            ]
        },
    )


def test_unreadable_records_hash_their_bytes_and_hashes_are_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute.mixture import hashes

    path = tmp_path / "d.jsonl"
    rows = [b'{"text": "a"}', b'{"text": "a', b'{"text": "b"}', b'{"text": "a']
    path.write_bytes(b"\n".join(rows) + b"\n")
    h = content_hashes(JsonlSource(path), "text", workers=1)
    assert h[1] == h[3] and h[0] != h[1] and h[0] != h[2]
    # computed into the cache file: what is returned is that file, mapped
    assert isinstance(h, np.memmap) and Path(h.filename).parent.name == "hashes"
    computed = hashes._run

    def not_again(*args: object) -> object:
        raise AssertionError("the cached hashes were computed again")

    monkeypatch.setattr(hashes, "_run", not_again)
    again = content_hashes(JsonlSource(path), "text", workers=1)
    assert np.array_equal(again, h)  # read back, not computed
    monkeypatch.setattr(hashes, "_run", computed)
    path.write_bytes(b"\n".join([*rows, orjson.dumps({"text": "c"})]) + b"\n")
    assert len(content_hashes(JsonlSource(path), "text", workers=1)) == 5  # a changed file
