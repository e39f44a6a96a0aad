"""Ranks of a node opening the same file at once: one builds its index, the others read it."""

from __future__ import annotations

import gzip
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chute._internal import files
from chute._internal.files import one_builder
from chute.sources import JsonlSource, TarSource, decompress, index, tar_index
from lock_helpers import Meeting
from tar_helpers import id_samples, write_shard

RANKS = 4


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Calls of ``module.name`` by thread; each waits until every rank has reached the lock."""
    calls: list[int] = []
    real = getattr(module, name)
    meeting = Meeting(monkeypatch, module, RANKS)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.get_ident())
        meeting.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _ranks(open_one: Any, ranks: int = RANKS) -> list[Any]:
    """``open_one()`` on ``ranks`` threads at once (each opens its own lock, as processes do)."""
    got: list[Any] = []
    errors: list[BaseException] = []

    def rank() -> None:
        try:
            got.append(open_one())
        except BaseException as exc:  # pragma: no cover - shown by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=rank) for _ in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return got


def test_one_rank_indexes_a_file_the_others_read_its_index(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(f'{{"text": "{i}"}}\n' for i in range(1000)))
    builds = _counted(monkeypatch, index, "_build")
    sources = _ranks(lambda: JsonlSource(path))
    assert len(builds) == 1
    assert [len(s) for s in sources] == [1000] * 4
    assert {s[999].data["text"] for s in sources} == {"999"}


def test_one_rank_indexes_a_shard(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = write_shard(tmp_path / "shard.tar", id_samples(range(20)))
    builds = _counted(monkeypatch, tar_index, "_build")
    sources = _ranks(lambda: TarSource(shard))
    assert len(builds) == 1 and [len(s) for s in sources] == [20] * 4


def test_one_rank_decompresses_a_file(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(b'{"text": "%d"}\n' % i for i in range(500))))
    copies = _counted(monkeypatch, decompress, "_decompress")
    sources = _ranks(lambda: JsonlSource(path))
    assert len(copies) == 1 and [len(s) for s in sources] == [500] * 4


def _hold_and_wait(target: Path, held: Any) -> None:
    with one_builder(target):
        held.set()
        time.sleep(600)


def _blocked_at_the_lock(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a process finds the lock held and starts waiting for it."""
    blocked = threading.Event()
    real = files._wait_for_lock

    def waiting(*args: Any) -> None:
        blocked.set()
        real(*args)

    monkeypatch.setattr(files, "_wait_for_lock", waiting)
    return blocked


def test_a_builder_killed_while_building_leaves_no_lock_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "index.idx"
    blocked = _blocked_at_the_lock(monkeypatch)
    ctx = multiprocessing.get_context("fork")
    held = ctx.Event()
    builder = ctx.Process(target=_hold_and_wait, args=(target, held), daemon=True)
    builder.start()
    try:
        assert held.wait(30)
        waiter_done = threading.Event()

        def waiter() -> None:
            with one_builder(target):
                waiter_done.set()

        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        assert blocked.wait(30)  # the builder holds the lock: the waiter waits for it
        assert not waiter_done.is_set()
        assert builder.pid is not None
        os.kill(builder.pid, signal.SIGKILL)  # killed mid-build: the kernel drops its lock
        builder.join(30)
        thread.join(30)
        assert waiter_done.is_set()
    finally:
        if builder.is_alive():
            builder.kill()


def test_a_folder_that_cannot_hold_a_lock_builds_without_one(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with one_builder(blocked / "index.idx"):  # the lock cannot be made: the build goes on
        pass


def test_a_rank_that_waits_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builder may be a rank whose progress is not shown: the waiting rank shows its wait."""
    from chute._internal import progress

    target = tmp_path / "data.jsonl.idx"
    held, release = threading.Event(), threading.Event()
    real = progress.progress

    def step(*args: Any, **kwargs: Any) -> progress.Progress:
        shown = real(*args, **kwargs)
        shown.quiet_below = 0.0  # a wait of any length logs its line: no race with the clock
        release.set()  # the waiter is waiting: let the builder finish
        return shown

    monkeypatch.setattr(progress, "progress", step)

    def builder() -> None:
        with one_builder(target):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=builder, daemon=True)
    thread.start()
    assert held.wait(30)
    with caplog.at_level("INFO", logger="chute.progress"), one_builder(target):
        pass
    thread.join(30)
    assert any(
        "waiting for data.jsonl.idx (another process builds it)" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
