"""A run whose tokenizer checks are kept parses no ``tokenizer.json`` and writes the same cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cache_helpers import config, tree_digest, write_alpaca, write_tokenizer
from chute import preprocess
from chute.tokenize import engine, hf

# the first run must write the verdict itself:
# in this test's own chute cache, not the run's shared tables (tests/conftest.py)
pytestmark = pytest.mark.fresh_tables


@pytest.fixture(autouse=True)
def _new_process() -> Any:
    """Each build loads the tokenizer as a fresh process would (no tables in memory)."""
    memos = [engine._MEMO, engine._PROBED, engine._SAID, engine._TABLES, engine._VERDICTS]
    saved = [memo.copy() for memo in memos]
    yield
    for memo, old in zip(memos, saved, strict=True):
        memo.clear()
        memo.update(old)  # type: ignore[attr-defined]


def forget() -> None:
    for memo in (engine._MEMO, engine._PROBED, engine._SAID, engine._TABLES, engine._VERDICTS):
        memo.clear()


def test_the_second_run_parses_nothing_and_writes_the_same_bytes(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "d.jsonl", 400, broken=(7, 150))
    cfg = config(data, tok)
    cfg["cache"]["workers"] = 2
    forget()
    first = preprocess(cfg, out=tmp_path / "first", progress=False)
    assert list((cache_dir / "tokenizers").glob("*.verdict.json"))  # its first texts agreed

    def no_parse(path: str) -> Any:
        raise AssertionError(f"parsed {path}")

    forget()
    monkeypatch.setattr(hf, "_parse", no_parse)  # forked workers inherit it
    second = preprocess(cfg, out=tmp_path / "second", progress=False)
    assert second.samples == first.samples == 398 and second.rejected == 2
    assert tree_digest(tmp_path / "second") == tree_digest(tmp_path / "first")
