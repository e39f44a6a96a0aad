"""Real processes: SIGKILL the CLI at several points and resume; concurrent shards; a lost rank.

Every launch has a hard timeout and is killed when it runs out, so a hang fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest
import yaml

from cache_helpers import tree_digest, write_alpaca, write_tokenizer
from chute import CacheError, open_cache, preprocess
from chute.cache.layout import Layout

pytestmark = pytest.mark.timeout(240)

LAUNCH_TIMEOUT = 120
CLI = [sys.executable, "-c", "from chute.cli import main; main()", "preprocess"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("crash")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 3000, broken=(17, 1500, 2999))
    config = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml", "max_length": 128},
        "cache": {"chunk_size": 75},
    }
    (root / "cfg.yaml").write_text(yaml.safe_dump(config))
    preprocess(config, out=root / "reference", workers=1)
    return {"root": root, "cfg": root / "cfg.yaml", "config": config}


def _launch(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"chute preprocess hung for {LAUNCH_TIMEOUT} s:\n{err.decode()[-3000:]}")
    return proc.returncode, out.decode(), err.decode()


def _kill_when(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never reached {what}")
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_at_several_points_then_resume_gives_identical_bytes(job: dict, workers: int):
    out = job["root"] / f"killed{workers}"
    layout = Layout(out)
    args = [str(job["cfg"]), "--out", str(out), "--workers", str(workers), "--quiet"]
    points = [
        ("the plan is written", lambda: layout.plan.exists()),
        ("3 chunks are committed", lambda: len(layout.recorded()) >= 3),
        ("21 chunks are committed", lambda: len(layout.recorded()) >= 21),
    ]
    seen = []
    for what, ready in points:
        proc = _launch(args)
        _kill_when(proc, ready, what)
        seen.append(len(layout.recorded()))
        assert not layout.manifest.exists()
    time.sleep(0.3)  # workers die with their parent: nothing is committed after the kill
    assert len(layout.recorded()) == seen[-1] < 40
    with pytest.raises(CacheError, match="not complete"):
        open_cache(out)
    rc, stdout, stderr = _finish(_launch([*args, "--json"]))
    assert rc == 0, stderr
    report = orjson.loads(stdout)
    assert report["chunks_reused"] == seen[-1] and report["chunks_built"] == 40 - seen[-1]
    assert report["finalized"] and report["rejected"] == 3
    assert tree_digest(out) == tree_digest(job["root"] / "reference")


def test_concurrent_shards_build_the_same_cache(job: dict) -> None:
    out = job["root"] / "shards"
    common = [str(job["cfg"]), "--out", str(out), "--workers", "1", "--json", "--quiet"]
    procs = [
        _launch([*common, "--shard", "0/3"]),
        _launch([*common, "--shard", "1/3"]),
        _launch(common, env={"RANK": "2", "WORLD_SIZE": "3"}),  # as torchrun sets it
    ]
    results = [_finish(p) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), [err[-2000:] for _, _, err in results]
    reports = [orjson.loads(o) for _, o, _ in results]
    assert [r["shard"] for r in reports] == [[0, 3], [1, 3], [2, 3]]
    assert [r["chunks_built"] for r in reports] == [14, 13, 13]
    assert any(r["finalized"] for r in reports)
    assert all(r["samples"] == reports[0]["samples"] == 2997 for r in reports)
    assert tree_digest(out) == tree_digest(job["root"] / "reference")


def test_a_rank_that_stops_mid_build_stops_the_waiting_ones_at_once(
    job: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard 1 starts (its lock held), then stops with its chunks uncommitted, as a rank that
    fails or is killed does: shard 0, done with its own chunks, says so at once instead of
    waiting out wait_timeout (an hour by default); shard 1 run again finishes the cache."""
    import threading

    from chute._internal.waiting import building
    from chute.cache import workdir
    from chute.cache.workdir import shard_lock

    out = job["root"] / "stopped"
    started, stop = threading.Event(), threading.Event()
    stopped_ranks = workdir._stopped_ranks

    def waiting_for_shard_one(*args: Any) -> list[int]:
        found = stopped_ranks(*args)
        if 1 in args[-1]:  # shard 0 waits for the others and has seen shard 1 at work
            stop.set()
        return found

    monkeypatch.setattr(workdir, "_stopped_ranks", waiting_for_shard_one)

    def shard_one() -> None:
        lock = shard_lock(Layout(out), 1, 2)
        assert lock is not None
        with building(lock):
            started.set()
            stop.wait(120)

    holder = threading.Thread(target=shard_one)
    holder.start()
    assert started.wait(30)
    try:
        # the wait's own error, not the timeout's ("waited ... for 20 chunk(s)")
        with pytest.raises(CacheError) as info:
            preprocess(job["config"], out=out, shard="0/2", workers=1, wait_timeout=3600)
    finally:
        stop.set()
        holder.join()
    message = str(info.value)
    assert "shard(s) 1/2 stopped building" in message and "chunk(s) 1, 3, 5" in message
    report = preprocess(job["config"], out=out, shard="1/2", workers=1)
    assert report.built == 20 and report.finalized
    assert tree_digest(out) == tree_digest(job["root"] / "reference")  # no lock left behind


def test_a_rank_that_stops_while_this_one_still_builds_is_named_at_once(
    job: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard 1 is seen at work while shard 0 builds its own chunks, then stops before shard 0
    is done: by the time shard 0 waits for the others the lock is already free, and only what
    it saw during its own build tells a stopped rank from one that has not started."""
    import threading

    from chute._internal.waiting import building
    from chute.cache import workdir
    from chute.cache.workdir import shard_lock

    out = job["root"] / "stopped-early"
    started, seen = threading.Event(), threading.Event()
    look = workdir.ShardWatch.look

    def look_and_tell(self: workdir.ShardWatch) -> None:
        look(self)
        if self.at_work:
            seen.set()

    monkeypatch.setattr(workdir.ShardWatch, "look", look_and_tell)

    def shard_one() -> None:
        lock = shard_lock(Layout(out), 1, 2)
        assert lock is not None
        with building(lock):
            started.set()
            seen.wait(120)  # shard 0 has seen it at work: stop now, while shard 0 builds

    holder = threading.Thread(target=shard_one)
    holder.start()
    assert started.wait(30)
    try:  # the wait's own error, not the timeout's
        with pytest.raises(CacheError, match=r"shard\(s\) 1/2 stopped building"):
            preprocess(job["config"], out=out, shard="0/2", workers=1, wait_timeout=3600)
    finally:
        seen.set()
        holder.join()
    report = preprocess(job["config"], out=out, shard="1/2", workers=1)
    assert report.built == 20 and report.finalized
    assert tree_digest(out) == tree_digest(job["root"] / "reference")


def test_a_lost_rank_times_out_the_others_then_runs_alone(job: dict) -> None:
    out = job["root"] / "lost"
    with pytest.raises(CacheError) as info:
        preprocess(job["config"], out=out, shard="0/2", workers=1, wait_timeout=0.5)
    message = str(info.value)
    assert "waited 0.5 s (cache.wait_timeout) for 20 chunk(s)" in message
    assert "chunk(s) 1, 3, 5" in message and "of shard(s) 1/2" in message
    # shard 1 never took its lock nor committed a chunk: the usual cause is named (preprocess
    # called on rank 0 alone, under torchrun), with the way to build on one rank
    assert "shard(s) 1/2 have not started building" in message and "shard='0/1'" in message
    report = preprocess(job["config"], out=out, shard="1/2", workers=1)
    assert report.built == 20 and report.finalized
    assert tree_digest(out) == tree_digest(job["root"] / "reference")


def test_a_rank_that_never_starts_is_named_while_waiting(
    job: dict, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import chute.cache.workdir as workdir

    monkeypatch.setattr(workdir, "_NOT_STARTED_NOTICE", 0.2)  # a minute, in a test
    with caplog.at_level("WARNING", logger="chute.cache"), pytest.raises(CacheError):
        preprocess(job["config"], out=job["root"] / "alone", shard="0/2", workers=1, wait_timeout=2)
    notices = [r.getMessage() for r in caplog.records if "have not started" in r.getMessage()]
    assert len(notices) == 1 and "every rank must call preprocess()" in notices[0]
