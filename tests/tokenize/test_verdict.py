"""A kept verdict: later loads of checked tables never parse ``tokenizer.json``, and stay exact."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute.tokenize import HFTokenizer, engine, hf
from chute.tokenize.fast import FastBPE
from chute.tokenize.verdict import read_verdict, write_verdict
from recipe_helpers import CORPUS, _rust

# these tests read, damage and count the kept tables and verdicts:
# in this test's own chute cache, not the run's shared tables (tests/conftest.py)
pytestmark = pytest.mark.fresh_tables

TEXTS = [*CORPUS[:8], "Hello   world!\n\n x <|im_end|>\n你好", "<s>a</s><pad> fox"]


@pytest.fixture(autouse=True)
def _engine_state() -> Any:
    """Each test starts with no compiled tokenizer in memory (as a new process does)."""
    saved = [dict(engine._MEMO), dict(engine._PROBED), set(engine._SAID)]
    saved += [dict(engine._TABLES), dict(engine._VERDICTS)]
    new_process()
    yield
    for memo, old in zip(_memos(), saved, strict=True):
        memo.clear()
        memo.update(old)  # type: ignore[arg-type]


def _memos() -> list[Any]:
    return [engine._MEMO, engine._PROBED, engine._SAID, engine._TABLES, engine._VERDICTS]


def new_process() -> None:
    for memo in _memos():
        memo.clear()


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(_rust().to_str())
    return path


def checked_once(path: Path) -> HFTokenizer:
    """A first load: parsed, probed, and its first texts compared until the verdict is kept."""
    tok = HFTokenizer.from_path(path)
    assert tok.engine == "tiktoken" and tok._tok is not None
    for k in range(hf.SHADOW_CHECKS):
        tok.encode(TEXTS[k % len(TEXTS)])
    return tok


def verdict_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "tokenizers").glob("*.verdict.json"))


@pytest.fixture
def no_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``tokenizer.json`` parses counted (and still done)."""
    parsed: list[str] = []
    real = hf._parse

    def counted(path: str) -> Any:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(hf, "_parse", counted)
    return parsed


def test_a_later_load_never_parses_and_answers_as_tokenizers(
    tokenizer_json: Path, cache_dir: Path, no_parse: list[str]
) -> None:
    first = checked_once(tokenizer_json)
    (kept,) = verdict_files(cache_dir)
    assert read_verdict(kept) is not None
    no_parse.clear()
    new_process()
    tok = HFTokenizer.from_path(tokenizer_json)
    rust = first.rust
    assert tok.engine == "tiktoken" and tok._checks_left == 0
    assert tok.vocab_size == rust.get_vocab_size(with_added_tokens=True)
    assert tok.special == first.special and tok.fingerprint() == first.fingerprint()
    for token in [*rust.get_vocab(with_added_tokens=True), "not a token", "Ġ", "<|im_end|>"]:
        assert tok.token_to_id(token) == rust.token_to_id(token), token
    for text in TEXTS:
        spans = [(0, len(text)), (1, max(2, len(text) // 2))]
        assert tok.encode_spans(text, spans) == first.encode_spans(text, spans)
    assert no_parse == []  # nothing above needed tokenizers
    assert tok.decode(tok.encode("hello there")) == "hello there"  # this does: parsed now
    assert no_parse == [str(tokenizer_json)]


def test_a_verdict_a_worker_kept_is_seen_by_the_next_load_in_its_parent(
    tokenizer_json: Path, cache_dir: Path
) -> None:
    """A preprocess confirms in its workers; the parent's next pool must not confirm again."""
    import multiprocessing

    parent = HFTokenizer.from_path(tokenizer_json)
    assert parent._checks_left == hf.SHADOW_CHECKS  # nothing kept yet

    def worker() -> None:  # the forked worker checks its first texts and keeps the verdict
        for k in range(hf.SHADOW_CHECKS):
            parent.encode(TEXTS[k % len(TEXTS)])
        os._exit(0 if verdict_files(cache_dir) else 1)

    def later_worker() -> None:  # forked after: the same object, loaded before the verdict
        parsed: list[str] = []

        def counted(path: str) -> Any:
            parsed.append(path)
            raise AssertionError("parsed tokenizer.json to check what a verdict covers")

        hf._parse = counted  # in this child only
        ids = parent.encode(TEXTS[0])
        os._exit(0 if parent._checks_left == 0 and not parsed and ids else 1)

    fork = multiprocessing.get_context("fork")
    for target in (worker, later_worker):
        child = fork.Process(target=target)
        child.start()
        child.join(60)
        assert child.exitcode == 0, target.__name__
    assert len(verdict_files(cache_dir)) == 1
    again = HFTokenizer.from_path(tokenizer_json)  # the parent's next preprocess, same process
    assert again.engine == "tiktoken" and again._checks_left == 0


def test_ranks_starting_together_compile_the_tables_once(
    tokenizer_json: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranks of a node load the same tokenizer at once: one compiles, the others load."""
    import threading

    from lock_helpers import Meeting

    compiled: list[int] = []
    real = engine._compile
    meeting = Meeting(monkeypatch, engine, 4)

    def counted(*args: Any) -> Any:
        compiled.append(threading.get_ident())
        meeting.wait()  # every rank has found no tables and asked for the lock
        return real(*args)

    monkeypatch.setattr(engine, "_compile", counted)
    loaded: list[HFTokenizer] = []
    ranks = [
        threading.Thread(target=lambda: loaded.append(HFTokenizer.from_path(tokenizer_json)))
        for _ in range(4)
    ]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(120)
    assert len(compiled) == 1 and len(loaded) == 4
    assert {tok.engine for tok in loaded} == {"tiktoken"}
    assert len(list((cache_dir / "tokenizers").glob("*.npz"))) == 1


def test_a_changed_file_of_the_same_size_and_mtime_is_checked_again(
    tokenizer_json: Path, cache_dir: Path, no_parse: list[str]
) -> None:
    checked_once(tokenizer_json)
    stat = tokenizer_json.stat()
    text = tokenizer_json.read_text()
    assert '"<pad>"' in text and '"<pbd>"' not in text
    tokenizer_json.write_text(text.replace('"<pad>"', '"<pbd>"'))  # same size, other bytes
    os.utime(tokenizer_json, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tokenizer_json.stat().st_size == stat.st_size
    no_parse.clear()
    new_process()
    tok = HFTokenizer.from_path(tokenizer_json)
    assert no_parse == [str(tokenizer_json)]  # another key: compiled and probed from the file
    assert tok.token_to_id("<pbd>") is not None and tok.token_to_id("<pad>") is None
    assert len(list((cache_dir / "tokenizers").glob("*.npz"))) == 2


def test_tables_changed_after_the_verdict_are_checked_not_trusted(
    tokenizer_json: Path, cache_dir: Path, no_parse: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    checked_once(tokenizer_json)
    (tables,) = (cache_dir / "tokenizers").glob("*.npz")
    with np.load(tables) as data:
        arrays = {name: data[name] for name in data.files}
    blob, ends = arrays["blob"].tobytes(), arrays["ends"].tolist()
    tokens = [blob[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    a, e = tokens.index(b"a"), tokens.index(b"e")
    ids = arrays["ids"].copy()
    ids[a], ids[e] = ids[e], ids[a]  # "a" and "e" swap ids: the tables now lie
    arrays["ids"] = ids
    with open(tables, "wb") as f:
        np.savez(f, **arrays)
    no_parse.clear()
    new_process()
    with caplog.at_level(logging.WARNING, logger="chute.tokenize"):
        tok = HFTokenizer.from_path(tokenizer_json)
    assert no_parse == [str(tokenizer_json)]  # the verdict names other tables: probed again
    assert tok.engine == "tokenizers" and "differs from tokenizers on the probe" in tok.engine_note
    assert tok.encode(TEXTS[0]) == tok.rust.encode(TEXTS[0], add_special_tokens=False).ids


def test_unreadable_tables_are_compiled_again(
    tokenizer_json: Path, cache_dir: Path, no_parse: list[str]
) -> None:
    checked_once(tokenizer_json)
    (tables,) = (cache_dir / "tokenizers").glob("*.npz")
    tables.write_bytes(tables.read_bytes()[:1000])  # cut short
    no_parse.clear()
    new_process()
    tok = HFTokenizer.from_path(tokenizer_json)
    assert tok.engine == "tiktoken" and no_parse == [str(tokenizer_json)]
    assert tok.encode(TEXTS[0]) == tok.rust.encode(TEXTS[0], add_special_tokens=False).ids


def test_a_difference_found_later_keeps_later_loads_on_tokenizers(
    tokenizer_json: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = HFTokenizer.from_path(tokenizer_json)
    real = FastBPE._encode

    def wrong(self: FastBPE, text: str) -> Any:
        ids, *where = real(self, text)
        return ((ids[::-1] if "fox" in text else ids), *where)

    with monkeypatch.context() as patched:
        patched.setattr(FastBPE, "_encode", wrong)
        tok.encode("the quick brown fox jumps")
    assert tok.engine == "tokenizers"
    (kept,) = verdict_files(cache_dir)
    verdict = read_verdict(kept)
    assert verdict is not None and verdict.differs == "the quick brown fox jumps"
    new_process()
    again = HFTokenizer.from_path(tokenizer_json)
    assert again.engine == "tokenizers" and "quick brown fox" in again.engine_note
    # and a process whose first texts agreed (a verdict written without replacing) keeps it
    write_verdict(kept, replace(verdict, differs=None), replace=False)
    assert read_verdict(kept) == verdict


def test_a_verdict_for_another_probe_set_is_not_used(
    tokenizer_json: Path, cache_dir: Path, no_parse: list[str]
) -> None:
    checked_once(tokenizer_json)
    (kept,) = verdict_files(cache_dir)
    data = json.loads(kept.read_text())
    kept.write_text(json.dumps({**data, "probes": "0" * 16}))
    no_parse.clear()
    new_process()
    tok = HFTokenizer.from_path(tokenizer_json)
    assert no_parse == [str(tokenizer_json)] and tok._checks_left > 0
    kept.write_text("{not json")
    new_process()
    assert HFTokenizer.from_path(tokenizer_json).engine == "tiktoken"
