"""Waiting for a result another process builds: returned when written, stopped when its builder
lets go without writing it (failed or killed), timed out when no builder is ever seen."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from chute._internal.waiting import BuilderGone, building, wait_for
from waiting_helpers import seen_at_work


def test_a_waiter_gets_the_result_or_stops_when_the_builder_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "result"
    seen = seen_at_work(monkeypatch)  # the waiter has seen the builder at work

    def read() -> str | None:
        return target.read_text() if target.exists() else None

    def build(writes: bool, holding: threading.Event) -> None:
        with building(target):
            holding.set()
            assert seen.wait(60)  # let go only once the waiter saw it held
            if writes:
                target.write_text("built")

    for writes in (True, False):
        seen.clear()
        holding = threading.Event()
        builder = threading.Thread(target=build, args=(writes, holding))
        builder.start()
        assert holding.wait(60)
        if writes:
            assert wait_for(read, target, timeout=120) == "built"
        else:
            with pytest.raises(BuilderGone):  # at once, not after the 120 s
                wait_for(read, target, timeout=120)
        builder.join()
        target.unlink(missing_ok=True)
    assert wait_for(read, target, timeout=0.2) is None  # no builder seen: the timeout


def test_a_builder_that_wrote_its_result_leaves_no_lock_one_that_did_not_leaves_it_free(
    tmp_path: Path,
) -> None:
    """A folder of results (one lengths pass per dataset and recipe) held a zero-byte lock per
    result; the lock stays only where a waiter needs it to learn the builder stopped."""
    from chute._internal.waiting import builder_state

    done, failed, empty = tmp_path / "done", tmp_path / "failed", tmp_path / "empty"
    with building(done):
        done.write_text("built")
    with pytest.raises(RuntimeError), building(failed):
        raise RuntimeError("stopped")
    with building(empty):
        pass  # wrote nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".empty.building",
        ".failed.building",
        "done",
    ]
    assert builder_state(failed) == builder_state(empty) == "free"
    assert builder_state(done) == "unknown"  # no lock: a waiter reads the result
