"""Content hashes: the same sample in any format, spacing or position hashes alike; cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from chute.errors import ConfigError
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


def test_other_local_ranks_wait_for_local_rank_zero_s_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torchrun one rank per node hashes; the others read its cache, computing nothing."""
    import threading
    from typing import Any

    from chute.mixture import hashes

    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"text": f"t{i % 7}"}) + b"\n" for i in range(60)))
    computed: list[int] = []
    real = hashes._run

    def counted(*args: object) -> object:
        computed.append(threading.get_ident())
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(hashes, "_run", counted)
    polling = threading.Event()
    real_wait = hashes.wait_for_local_rank_zero

    def waiting(*args: Any, **kwargs: Any) -> Any:
        polling.set()
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(hashes, "wait_for_local_rank_zero", waiting)
    got: list[np.ndarray] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            content_hashes(JsonlSource(path), "text", local_rank=1, wait_timeout=30)
        )
    )
    waiter.start()
    assert polling.wait(30)  # local rank 1 found no hashes and waits for rank 0's
    mine = content_hashes(JsonlSource(path), "text", workers=1)
    waiter.join(timeout=30)
    assert got and np.array_equal(got[0], mine)
    assert computed == [threading.get_ident()]  # local rank 0 only
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"text": "x"}\n')
    with pytest.raises(ConfigError, match=r"waited wait_timeout=0.2 s for local rank 0"):
        content_hashes(JsonlSource(other), "text", local_rank=2, wait_timeout=0.2)
