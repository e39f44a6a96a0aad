"""``chute preprocess --engine ray`` on a local 2-CPU Ray: the same bytes as a local build.

One Ray cluster serves the module (it runs in a holder process: see ``ray_helpers``); every
build is a real driver process connecting to it with ``--address``, so a driver can be
SIGKILLed. A worker dies by its own hand (the test stage's ``die_once_in``), in a chosen chunk:
no test races to catch a worker mid-chunk. Every launch has a hard timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from cache_helpers import (
    markers,
    register_slow_stage,
    tree_digest,
    write_alpaca,
    write_image_records,
    write_tokenizer,
)
from chute import open_cache, preprocess
from chute.cache.layout import Layout

pytest.importorskip("ray", reason="the ray engine needs Ray: pip install 'chute[ray]'")
from ray_helpers import RayCluster

pytestmark = pytest.mark.timeout(300)

LAUNCH_TIMEOUT = 120
CHUNKS = 30
SLEEP = 0.15  # seconds each chunk takes in the slow stage (a killed driver's chunks still run)
# the CLI, with the test's slow stage registered (workers unpickle it from tests/)
CLI = [
    sys.executable,
    "-c",
    "import cache_helpers; cache_helpers.register_slow_stage(); from chute.cli import main; main()",
    "preprocess",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    ray = RayCluster(cpus=2)
    try:
        yield ray
    finally:
        ray.close()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ray")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 100 * CHUNKS, broken=(17, 1500, 2999))
    marks = root / "markers"
    marks.mkdir()
    config = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml", "max_length": 128},
        "cache": {"chunk_size": 100},
        "stages": {"slow": {"markers": str(marks), "sleep": SLEEP}},
    }
    (root / "cfg.yaml").write_text(yaml.safe_dump(config))
    register_slow_stage()
    preprocess(config, out=root / "reference", workers=2)
    shutil.rmtree(marks)
    marks.mkdir()
    return {"root": root, "cfg": root / "cfg.yaml", "config": config, "markers": marks}


def _launch(cluster: RayCluster, args: list[str], command: list[str] = CLI) -> subprocess.Popen:
    return subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cluster.driver_env(),
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the driver hung for {LAUNCH_TIMEOUT} s:\n{err.decode()[-3000:]}")
    return proc.returncode, out.decode(), err.decode()


def _until(ready: Callable[[], Any], what: str, proc: subprocess.Popen | None = None) -> Any:
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while not (value := ready()):
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            pytest.fail(f"the driver ended (rc {proc.returncode}) before {what}:\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"never reached: {what}")
        time.sleep(0.005)
    return value


def _ray_args(job: dict[str, Any], cluster: RayCluster, out: Path) -> list[str]:
    return [str(job["cfg"]), "--out", str(out), "--engine", "ray", "--address", cluster.address]


def test_ray_build_is_byte_identical_to_a_local_build(job: dict, cluster: RayCluster) -> None:
    out = job["root"] / "ray"
    proc = _launch(cluster, _ray_args(job, cluster, out))
    rc, stdout, stderr = _finish(proc)
    assert rc == 0, stderr
    assert tree_digest(out) == tree_digest(job["root"] / "reference")
    assert open_cache(out).fingerprint() == open_cache(job["root"] / "reference").fingerprint()
    # the same summary and progress bar as the local engine, and where it ran
    assert "3,000 records -> 2,997 samples, 3 rejected" in stdout
    assert f"built {CHUNKS} chunk(s)" in stdout and "records/s" in stdout
    assert f"engine: ray at {cluster.address}, 2 CPUs (connected in" in stdout
    assert "bad_json" in stdout and "missing_field" in stdout  # rejects by kind
    assert "preprocess: 3,000 rec in " in stderr and "rec/s)" in stderr  # the progress summary
    # no work on the driver: every chunk ran in a Ray worker process
    started = markers(job["markers"])
    assert sorted(started) == list(range(CHUNKS))
    assert proc.pid not in set().union(*started.values())


def test_a_killed_worker_is_retried_and_the_cache_is_the_same(
    job: dict, cluster: RayCluster
) -> None:
    out = job["root"] / "killed-worker"
    shutil.rmtree(job["markers"])
    job["markers"].mkdir()
    # the worker running chunk 7 SIGKILLs itself (as the OOM killer would), once
    chunk = 7
    args = [*_ray_args(job, cluster, out), "--json", "-q", f"stages.slow.die_once_in={chunk}"]
    rc, stdout, stderr = _finish(_launch(cluster, args))
    assert rc == 0, stderr
    assert stdout.startswith("{"), stdout
    assert orjson.loads(stdout)["chunks_built"] == CHUNKS
    started = markers(job["markers"])
    assert len(started[chunk]) == 2  # Ray ran it again, in another process
    assert all(len(pids) == 1 for k, pids in started.items() if k != chunk)
    # the same cache; its stored config differs by the test stage's option only
    got, want = tree_digest(out), tree_digest(job["root"] / "reference")
    assert got.pop("config.yaml") != want.pop("config.yaml") and got == want
    stored = yaml.safe_load((out / "config.yaml").read_text())
    reference = yaml.safe_load((job["root"] / "reference" / "config.yaml").read_text())
    assert stored["stages"]["slow"].pop("die_once_in") == chunk and stored == reference


def test_sigkilled_driver_then_the_same_command_resumes(job: dict, cluster: RayCluster) -> None:
    out = job["root"] / "killed-driver"
    layout = Layout(out)
    args = _ray_args(job, cluster, out)
    points = [
        ("the plan is written", lambda: layout.plan.exists()),
        ("3 chunks are committed", lambda: len(layout.recorded()) >= 3),
        ("12 chunks are committed", lambda: len(layout.recorded()) >= 12),
    ]
    for what, ready in points:
        proc = _launch(cluster, [*args, "-q"])
        _until(ready, what, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # Ray stops the dead driver's tasks; then nothing more is committed
        _until(lambda: not cluster.chunk_workers(), "the dead driver's tasks are stopped")
        assert not layout.manifest.exists()
    committed = len(layout.recorded())
    assert 12 <= committed < CHUNKS
    rc, stdout, stderr = _finish(_launch(cluster, [*args, "--json", "-q"]))
    assert rc == 0, stderr
    report = orjson.loads(stdout)
    assert report["chunks_reused"] == committed
    assert report["chunks_built"] == CHUNKS - committed and report["finalized"]
    assert tree_digest(out) == tree_digest(job["root"] / "reference")


_FAILURES = """
import json, sys
import cache_helpers as h
from chute import ChunkFailed, ChuteError, JsonlSource, preprocess
from chute.cache.config import RecipeConfig
from chute.cache.engines import RayEngine
from chute.cache.writer import ChunkJob

h.register_slow_stage()
config, address, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
results, sys.stdout = sys.stdout, sys.stderr  # Ray echoes its logs into stdout: not here
recipe = RecipeConfig(**config["recipe"]).build()
job = ChunkJob(JsonlSource(config["sources"]), h.FailsAt(recipe, 250), out + "-job", 100,
               "uint16", [0])
with RayEngine(address) as engine:
    try:
        engine.run_chunks(job, [0, 1, 2, 3], on_done=lambda k, r: None)
    except ChuteError as exc:  # a job-level error keeps its type (SourceError), named
        print(json.dumps([exc.chunk, exc.record, str(exc)]), file=results, flush=True)
    try:
        preprocess(config, out=out, engine=RayEngine(address, max_retries=0))
    except ChunkFailed as exc:
        print(json.dumps([exc.chunk, exc.record, str(exc)]), file=results, flush=True)
    seen = []
    report = preprocess(config, out=out, engine=engine, progress=lambda *a: seen.append(a))
    print(json.dumps([seen, report.reused, report.built]), file=results, flush=True)
"""


def test_failed_tasks_are_named_with_their_chunk_and_record(job: dict, cluster: RayCluster) -> None:
    out = job["root"] / "failing"
    (out.parent / "failing-job" / "chunks").mkdir(parents=True)
    script = [sys.executable, "-c", _FAILURES]
    config = json.loads(json.dumps(job["config"]))
    config["stages"]["slow"]["die_once_in"] = 5
    proc = _launch(cluster, [json.dumps(config), cluster.address, str(out)], script)
    # a job-level error at record 250: chunk 2, at its line, raised in a Ray worker
    line = _until(proc.stdout.readline, "the first failure", proc)  # type: ignore[union-attr]
    chunk, record, message = json.loads(line)
    data = job["config"]["sources"][0]
    assert (chunk, record) == (2, f"{data}:251")
    assert message.startswith(f"chunk 2 (records 200-299) failed at {data}:251: record 250 ")
    assert "run the same command again" in message
    # without retries, a worker killed mid-chunk (chunk 5's, by itself) fails the build,
    # naming the chunk
    killed = 5
    rc, stdout, stderr = _finish(proc)
    assert rc == 0, stderr
    failure, finished = stdout.splitlines()
    chunk, record, message = json.loads(failure)
    assert chunk == killed and record is None
    assert f"chunk {killed} (records {killed * 100}-{killed * 100 + 99}) failed:" in message
    assert "failed 1 time(s)" in message and "a worker died" in message
    # the same run again finishes the build; progress counts this run's records, to the end
    seen, reused, built = json.loads(finished)
    assert reused + built == CHUNKS and built >= 1  # at least the failed chunk
    total = (CHUNKS - reused) * 100
    assert len(seen) > 1 and seen[-1] == [total, total]
    assert all(done <= total for done, _ in seen)


_STOPS = """
import json, sys, time
import psutil
import cache_helpers as h
from chute import ChuteError, JsonlSource
from chute.cache.config import RecipeConfig
from chute.cache.engines import RayEngine
from chute.cache.writer import ChunkJob

config, address, out, holder = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
results, sys.stdout = sys.stdout, sys.stderr
recipe = RecipeConfig(**config["recipe"]).build()
slow = h.SlowStage(out + "-markers", sleep=3.0)
job = ChunkJob(JsonlSource(config["sources"]), h.FailsAt(recipe, 50), out, 100, "uint16", [0],
               [slow])
with RayEngine(address) as engine:
    t0 = time.monotonic()
    try:
        engine.run_chunks(job, [0, 1], on_done=lambda k, r: None)
    except ChuteError as exc:
        running = []
        for p in psutil.Process(holder).children(recursive=True):
            try:
                if " ".join(p.cmdline()).startswith("ray::chute chunk "):
                    running.append(p.pid)
            except psutil.Error:  # a process that ended meanwhile
                pass
        print(json.dumps([exc.chunk, running, time.monotonic() - t0]), file=results, flush=True)
"""


def test_a_failed_run_returns_once_its_running_chunks_have_finished(
    job: dict, cluster: RayCluster, tmp_path: Path
) -> None:
    # chunk 0 fails at once; chunk 1 takes 3 s (it is left to finish, not cancelled)
    (tmp_path / "stops-markers").mkdir()
    script = [sys.executable, "-c", _STOPS]
    args = [json.dumps(job["config"]), cluster.address, str(tmp_path / "stops")]
    rc, stdout, stderr = _finish(_launch(cluster, [*args, str(cluster.proc.pid)], script))
    assert rc == 0, stderr
    chunk, running, seconds = json.loads(stdout)
    assert chunk == 0
    assert running == []  # no task of the failed run goes on
    assert seconds > 2  # chunk 1 was waited for


def test_a_failing_chunk_fails_the_cli_naming_it(job: dict, cluster: RayCluster) -> None:
    out = job["root"] / "failing-cli"
    args = [*_ray_args(job, cluster, out), "-q", "stages.slow.fail_chunk=4"]
    rc, _, stderr = _finish(_launch(cluster, args))
    assert rc != 0
    assert "chunk 4 (records 400-499) failed: RuntimeError: the slow stage fails in c" in stderr
    assert 4 not in Layout(out).recorded()


def test_pixels_decode_on_ray_byte_identical_to_one_process(
    tmp_path: Path, cluster: RayCluster
) -> None:
    data = write_image_records(tmp_path, 1100)  # 3 decoding tasks of 512 images
    tok = write_tokenizer(tmp_path / "tok")
    config = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml", "image_tokens": 16},
        "cache": {"chunk_size": 400},
    }
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    preprocess(config, out=tmp_path / "one", workers=1, pixels={"size": 16})
    args = [str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "ray"), "--engine", "ray"]
    args += ["--address", cluster.address, "--pixels", "--image-size", "16", "--json", "-q"]
    rc, stdout, stderr = _finish(_launch(cluster, args))
    assert rc == 0, stderr
    assert orjson.loads(stdout)["stage_outputs"]["pixels"]["images"] == 1100
    assert len(list((tmp_path / "ray" / "pixels").glob("chunk-*.bin"))) == 3
    assert tree_digest(tmp_path / "ray") == tree_digest(tmp_path / "one")
