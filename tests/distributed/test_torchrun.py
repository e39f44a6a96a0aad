"""Real processes: torchrun with 2 ranks (gloo, CPU), 2 DataLoader workers per rank.

Exact-once and equal batch counts are checked across ranks with all_gather; a run killed with
SIGKILL mid-epoch resumes from its last complete checkpoint and delivers exactly the rest, on
the same world size and on a larger one (elastic). Every launch has a hard timeout and is killed
with its whole process group, so a hang fails the test instead of freezing CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import psutil
import pytest
import torch
from loader_job import logits_of

from chute import JsonlSource, Loader, World
from chute.testing import write_id_jsonl

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

JOB = Path(__file__).with_name("loader_job.py")
N = 203
BROKEN = set(range(7, N, 10))  # ~10% broken records
VALID = sorted(set(range(N)) - BROKEN)
LAUNCH_TIMEOUT = 120


def torchrun(nproc: int, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        str(JOB),
        *args,
    ]


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def kill_tree(pid: int) -> None:
    """SIGKILL torchrun and every descendant: the ranks (torch starts each in its own session,
    so killing torchrun's process group would miss them) and their DataLoader workers."""
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)


def train_until_checkpoint(step: int, *args: str) -> int:
    """Train on 2 ranks (``--mode train``) until checkpoint ``step`` is complete, then SIGKILL
    torchrun, both ranks and their workers at once; the newest complete checkpoint's step.

    Waits on the checkpoint's marker file (the event), not on time: the deadline only turns a
    hang into a failure.
    """
    train = subprocess.Popen(
        torchrun(2, *args, "--mode", "train"),
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out = Path(args[args.index("--out") + 1])
    ckpt = out / "ckpt"
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while not (ckpt / f"step{step}.done").exists():
            if train.poll() is not None:
                pytest.fail(f"training exited early:\n{train.stdout.read().decode()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no checkpoint after step {step} within the timeout")
            time.sleep(0.05)
    finally:
        kill_tree(train.pid)
        train.communicate()
    return max(int(p.stem.removeprefix("step")) for p in ckpt.glob("step*.done"))


def run(nproc: int, *args: str, **extra_env: str) -> None:
    proc = subprocess.Popen(
        torchrun(nproc, *args),
        env=env(**extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        output, _ = proc.communicate()
        pytest.fail(f"torchrun hung for {LAUNCH_TIMEOUT} s:\n{output.decode()[-4000:]}")
    assert proc.returncode == 0, output.decode()[-4000:]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = write_id_jsonl(tmp_path / "ids.jsonl", N, broken=BROKEN)
    JsonlSource(path)  # index once here; the ranks reuse it from the shared cache
    return path


def expected_streams(data: Path, world_size: int, **plan) -> list[list[list[int]]]:  # type: ignore[no-untyped-def]
    """What each rank yields in an uninterrupted epoch, computed in this process."""
    source = JsonlSource(data)
    return [
        [
            b["sample_ids"].tolist()
            for b in Loader(
                source, batch_size=4, seed=11, world=World(rank=r, world_size=world_size), **plan
            )
        ]
        for r in range(world_size)
    ]


def test_two_ranks_two_workers_every_sample_once_equal_batch_counts(data: Path, tmp_path: Path):
    run(2, "--data", str(data), "--out", str(tmp_path), "--mode", "epoch")
    result = orjson.loads((tmp_path / "epoch.json").read_bytes())
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    assert len({len(r["batches"]) for r in ranks}) == 1
    assert all(len(r["batches"]) == r["planned"] for r in ranks)
    ids = [i for r in ranks for b in r["batches"] for i in b if i >= 0]
    assert sorted(ids) == VALID
    assert sum(result["stats"].values()) == len(BROKEN)
    # the processes computed the same plan as World values in one process
    assert [r["batches"] for r in ranks] == expected_streams(data, 2)
    # rank 0 then took one batch of the next epoch alone: the lockstep check names both ranks
    assert "ranks are not in lockstep" in result["lockstep"]
    assert "rank 0: (1, 1, [])" in result["lockstep"] and "rank 1: (0, " in result["lockstep"]


def test_packed_plan_under_torchrun_shares_one_lengths_pass(data: Path, tmp_path: Path):
    run(2, "--data", str(data), "--out", str(tmp_path), "--mode", "epoch", "--plan", "packed")
    result = orjson.loads((tmp_path / "epoch.json").read_bytes())
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    assert len({len(r["batches"]) for r in ranks}) == 1
    ids = [i for r in ranks for b in r["batches"] for i in b if i >= 0]
    assert sorted(ids) == VALID  # broken records excluded up front: none reach a worker
    assert result["stats"] == {}
    plan = {"plan": "packed", "plan_options": {"max_length": 16}}
    assert [r["batches"] for r in ranks] == expected_streams(data, 2, **plan)
    rows = [row for r in ranks for b in r["rows"] for row in b]
    assert all(sum(1 + i % 7 for i in row if i >= 0) <= 16 for row in rows)
    cached = list((Path(os.environ["CHUTE_CACHE_DIR"]) / "lengths").glob("*.npy"))
    assert len(cached) == 1  # one lengths file for both ranks
    plans = list((Path(os.environ["CHUTE_CACHE_DIR"]) / "plans").glob("*-e0/plan.json"))
    assert len(plans) == 1  # one plan for the node, built once, mapped by both ranks


def test_sigkill_mid_epoch_then_resume_delivers_exactly_the_rest(data: Path, tmp_path: Path):
    done = train_until_checkpoint(5, "--data", str(data), "--out", str(tmp_path))  # mid-epoch
    ckpt = tmp_path / "ckpt"
    consumed = orjson.loads((ckpt / f"step{done}.done").read_bytes())["batches"]
    states = [orjson.loads((ckpt / f"step{done}.rank{r}.json").read_bytes()) for r in (0, 1)]
    for key in ("epoch", "batches", "segments", "world_size", "plan", "source"):
        assert states[0][key] == states[1][key], key  # any rank's state resumes any rank
    streams = expected_streams(data, 2)
    assert 0 < consumed < len(streams[0])

    # same world size: each rank continues with exactly the batches that would have come next
    run(2, "--data", str(data), "--out", str(tmp_path), "--mode", "resume")
    result = orjson.loads((tmp_path / "resume.json").read_bytes())
    for r in sorted(result["ranks"], key=lambda r: r["rank"]):
        assert r["batches"] == streams[r["rank"]][consumed:]

    # elastic: three ranks share the rest; with what was consumed, every sample once
    run(3, "--data", str(data), "--out", str(tmp_path), "--mode", "resume")
    result = orjson.loads((tmp_path / "resume.json").read_bytes())
    assert len({len(r["batches"]) for r in result["ranks"]}) == 1
    before = [i for s in streams for b in s[:consumed] for i in b]
    after = [i for r in result["ranks"] for b in r["batches"] for i in b]
    ids = np.array(before + after)
    assert sorted(ids[ids >= 0].tolist()) == VALID


def test_data_with_nothing_valid_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    # rank 0's first samples are all bad, one of rank 1's is valid: no rank stops alone
    probe = Loader(
        write_id_jsonl(tmp_path / "probe.jsonl", N), batch_size=4, seed=11, world=World(1, 2)
    )
    keep = int(probe.plan.batch(1, 3)[0])
    one_good = write_id_jsonl(tmp_path / "one_good.jsonl", N, broken=set(range(N)) - {keep})
    run(2, "--data", str(one_good), "--out", str(tmp_path), "--mode", "nothing")
    ranks = orjson.loads((tmp_path / "nothing.json").read_bytes())["ranks"]
    assert [(r["yielded"], r["error"]) for r in ranks] == [(26, None), (26, None)]

    # nothing valid: both ranks stop at the step where 100 samples over both were seen
    all_bad = write_id_jsonl(tmp_path / "all_bad.jsonl", N, broken=range(N))
    run(2, "--data", str(all_bad), "--out", str(tmp_path), "--mode", "nothing")
    ranks = orjson.loads((tmp_path / "nothing.json").read_bytes())["ranks"]
    assert [r["yielded"] for r in ranks] == [12, 12]
    for r in ranks:
        assert (
            f"on rank {r['rank']}: the first 104 samples of this run (over 2 ranks) were all bad"
            in r["error"]
        )


def test_four_ranks_dp2_cp2_share_samples_and_slices_make_the_whole_batches(
    data: Path, tmp_path: Path
) -> None:
    """dp 2 x cp 2 under torchrun (CHUTE_CP=2, found by World.detect): the two ranks of a cp
    group get the same samples and complementary zig-zag slices of them, the dp ranks see every
    valid sample once in equal steps, the loss summed over each cp group's process group is the
    whole batch's, and reject counts summed over the four ranks count each sample once."""
    run(4, "--data", str(data), "--out", str(tmp_path), "--mode", "cp", CHUTE_CP="2")
    result = orjson.loads((tmp_path / "cp.json").read_bytes())
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    assert [(r["dp_rank"], r["cp_rank"]) for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len({len(r["steps"]) for r in ranks}) == 1
    source = JsonlSource(data)
    seen = []
    for d in range(2):
        pair = [r for r in ranks if r["dp_rank"] == d]
        whole = Loader(
            source,
            batch_size=2,
            seed=11,
            world=World(rank=d, world_size=2),
            plan="packed",
            plan_options={"max_length": 16, "align": 4},
        )
        for k, batch in enumerate(whole):
            parts = [p["steps"][k] for p in pair]
            assert parts[0]["sample_ids"] == parts[1]["sample_ids"] == batch["sample_ids"].tolist()
            ids = np.zeros(batch["input_ids"].numel(), dtype=np.int64)
            for p in parts:
                ids[np.array(p["token_index"])] = np.array(p["input_ids"]).ravel()
            assert ids.tolist() == batch["input_ids"].reshape(-1).tolist()
            # the group's loss is the whole batch's, scored with the model's own shift
            logits = logits_of(batch["input_ids"])[:, :-1].reshape(-1, 256)
            want = torch.nn.functional.cross_entropy(logits, batch["labels"][:, 1:].reshape(-1))
            assert parts[0]["loss"] == parts[1]["loss"] == pytest.approx(float(want), rel=1e-5)
            seen += [i for i in batch["sample_ids"].tolist() if i >= 0]
    assert sorted(seen) == VALID
    assert sum(result["stats"].values()) == len(BROKEN)  # not twice: cp ranks read the same


def test_ranks_reading_different_data_stop_at_once_instead_of_hanging(
    data: Path, tmp_path: Path
) -> None:
    # a stale copy on one node: 50 records there, 203 here; the plans differ, and the first
    # collective one rank never reaches hung until the process group's timeout
    write_id_jsonl(data.with_name("ids.short.jsonl"), 50)
    run(2, "--data", str(data), "--out", str(tmp_path), "--mode", "differ")
    for rank in (0, 1):
        error = orjson.loads((tmp_path / f"differ.rank{rank}.json").read_bytes())["error"]
        assert error is not None and "ranks start from different data or positions" in error
        assert (
            "rank 0: samples 203, batches 26" in error and "rank 1: samples 50, batches 7" in error
        )
