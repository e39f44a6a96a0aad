"""A build killed while it finalizes: who may take the finalizing step over, and when.

The finalizing rank keeps a heartbeat marker (``DIR/finalizing``) naming its process: host, boot
id, pid namespace, pid and start time. A run on the same machine whose owner is provably gone
(its pid dead, or reused by a later process) finalizes at once; a marker of another machine is
trusted until its heartbeat is older than the grace period, the only evidence there is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cache_helpers import config, entered, register_gated_stage, write_alpaca, write_tokenizer
from chute import open_cache, preprocess
from chute._internal.owner import Owner
from chute.cache import workdir
from chute.cache.layout import Layout

pytestmark = pytest.mark.timeout(180)

TESTS = Path(__file__).resolve().parents[1]
# the CLI, with the test's gated stage registered
CLI = [
    sys.executable,
    "-c",
    "import cache_helpers; cache_helpers.register_gated_stage(); from chute.cli import main; main()",
    "preprocess",
]
LAUNCH_TIMEOUT = 120


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while not ready():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the build ended (rc {proc.returncode}) before {what}:\n{err.decode()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the build never reached {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("where", ["folder", "bucket"])
def test_a_run_after_a_build_killed_while_finalizing_takes_over_at_once(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    register_gated_stage()
    gate, steps = tmp_path / "gate", tmp_path / "entered"
    gate.touch()
    steps.mkdir()
    cfg = config(write_alpaca(tmp_path / "d.jsonl", 200), write_tokenizer(tmp_path / "tok"))
    cfg["stages"] = {"gated": {"gate": str(gate), "entered": str(steps), "in_finish": True}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    if where == "bucket":
        s3 = request.getfixturevalue("s3")
        out = s3.url("cache")

        def marker() -> bool:
            return "cache/finalizing" in s3.list_keys("cache/")
    else:
        out = str(tmp_path / "cache")

        def marker() -> bool:
            return Path(out, "finalizing").exists()

    build = subprocess.Popen(
        [*CLI, str(tmp_path / "cfg.yaml"), "--out", out, "--workers", "1", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        },
    )
    _wait_for(lambda: "finish" in entered(steps), build, "its finalizing step")
    assert marker()  # the killed build's heartbeat is fresh: it beat a moment ago
    os.kill(build.pid, signal.SIGKILL)
    build.wait(timeout=30)
    gate.unlink()

    started = time.monotonic()
    report = preprocess(cfg, out=out)
    took = time.monotonic() - started
    assert report.finalized and report.built == 0
    assert took < workdir._FINALIZE_GRACE / 3, f"the run waited {took:.1f} s for a dead finalizer"
    assert not marker()
    assert len(open_cache(out)) == 200


def _marker(layout: Layout, owner: Owner, age: float = 0.0) -> None:
    layout.finalizing.parent.mkdir(parents=True, exist_ok=True)
    layout.finalizing.write_bytes(owner.to_bytes())
    then = time.time() - age
    os.utime(layout.finalizing, (then, then))


def test_who_holds_the_marker_decides_whether_to_wait(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "c")
    assert workdir._finalizer(layout) is None  # no marker: nobody finalizes
    _marker(layout, Owner.here())
    assert workdir._finalizer(layout) == "live"  # this process runs
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _marker(layout, Owner.of(child.pid))
        assert workdir._finalizer(layout) == "live"
    finally:
        child.kill()
        child.wait()
    assert workdir._finalizer(layout) == "gone"  # killed: proof, however fresh its heartbeat
    me = Owner.here()
    reused = Owner(me.host, me.boot, me.pidns, me.pid, (me.start or 0) - 1)  # a pid reused later
    _marker(layout, reused)
    assert workdir._finalizer(layout) == "gone"
    elsewhere = Owner("another-host", me.boot, me.pidns, child.pid, 1)
    _marker(layout, elsewhere)
    assert workdir._finalizer(layout) == "live"  # another host's dead pid proves nothing
    _marker(layout, elsewhere, age=workdir._FINALIZE_GRACE + 1)
    assert workdir._finalizer(layout) == "gone"  # but a heartbeat older than the grace does
    layout.finalizing.write_bytes(b"1790000000.0")  # an older chute's marker: its age alone
    assert workdir._finalizer(layout) == "live"


def test_a_waiting_rank_takes_over_as_soon_as_a_live_finalizer_dies(tmp_path: Path) -> None:
    cfg = config(write_alpaca(tmp_path / "d.jsonl", 200), write_tokenizer(tmp_path / "tok"))
    out = tmp_path / "cache"
    preprocess(cfg, out=out)
    layout = Layout(out)
    layout.manifest.unlink()  # every chunk committed, no manifest: finalizing is left to do
    finalizer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _marker(layout, Owner.of(finalizer.pid))
    killer = subprocess.Popen(  # the finalizer dies 2 s into this rank's wait
        [sys.executable, "-c", f"import os, time; time.sleep(2); os.kill({finalizer.pid}, 9)"]
    )
    started = time.monotonic()
    try:
        again = preprocess(cfg, out=out, workers=1)
    finally:
        killer.wait()
        finalizer.wait()
    took = time.monotonic() - started
    assert again.finalized and again.built == 0
    assert 2 <= took < 2 + workdir._FINALIZE_GRACE / 3, f"took over after {took:.1f} s"
