"""Several builds into one ``--out`` at the same moment: one plan wins, no cache mixes two builds.

Real processes start behind a barrier placed just before the plan is claimed, so every one of
them claims at once (the widest window there is); others are plain CLI launches with no hook.
Builds of one config (ranks of one job, as two hosts would run it) join; every build of another
config is refused, naming the field that differs, and the cache is the winner's byte for byte.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from cache_helpers import config, tree_digest, write_alpaca, write_tokenizer
from chute import CacheError, FingerprintMismatch, open_cache, preprocess
from chute.cache import ChunkStage
from chute.cache.layout import Layout
from chute.cache.verify import verify_cache

pytestmark = pytest.mark.timeout(300)

LAUNCH_TIMEOUT = 150
CLI = [sys.executable, "-c", "from chute.cli import main; main()", "preprocess"]
# Three configs that differ in one field; max_length cuts the data's longer records.
LENGTHS = (128, 160, 192)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("claim")
    tok = write_tokenizer(root / "tok")
    data = write_alpaca(root / "d.jsonl", 400, broken=(7, 300))
    configs = {}
    for n in LENGTHS:
        cfg = config(data, tok, max_length=n)
        cfg["cache"]["chunk_size"] = 40
        configs[n] = cfg
        (root / f"cfg{n}.yaml").write_text(yaml.safe_dump(cfg))
        preprocess(cfg, out=root / f"reference{n}")
    return {"root": root, "configs": configs}


def _claiming_at_once(
    barrier: Any,
    cfg: dict[str, Any],
    out: str,
    shard: str | None,
    results: Any,
    tag: str,
    machine: str | None,
) -> None:
    """A build whose plan claim waits at ``barrier`` for every other build's (a child process).

    ``machine``: a local cache folder of its own (a remote cache's mirror), as on another host.
    """
    from chute.cache import build

    if machine is not None:
        os.makedirs(machine, exist_ok=True)
        os.environ["CHUTE_CACHE_DIR"] = machine

    real = build.establish  # type: ignore[attr-defined]

    def establish(*args: Any, **kwargs: Any) -> Any:
        barrier.wait(timeout=LAUNCH_TIMEOUT)
        return real(*args, **kwargs)

    setattr(build, "establish", establish)  # noqa: B010 (the module's own name, replaced)
    try:
        report = preprocess(cfg, out=out, shard=shard, workers=1, progress=False)
        results.put((tag, "ok", report.finalized, ""))
    except Exception as exc:  # reported to the test, which judges it
        results.put((tag, type(exc).__name__, False, f"{exc}\n{traceback.format_exc()}"))


def _run_at_once(
    builds: list[tuple[int, str | None]],
    configs: dict[int, Any],
    out: str,
    machines: Path | None = None,
) -> dict[str, tuple[str, bool, str]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(builds)), ctx.Queue()
    procs = []
    for i, (n, shard) in enumerate(builds):
        tag = f"{n}@{shard}#{i}"
        machine = None if machines is None else str(machines / str(i))
        args = (barrier, configs[n], out, shard, results, tag, machine)
        procs.append(ctx.Process(target=_claiming_at_once, args=args))
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            tag, outcome, finalized, message = results.get(timeout=LAUNCH_TIMEOUT)
            got[tag] = (outcome, finalized, message)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return got


def _winner(got: dict[str, tuple[str, bool, str]]) -> int:
    """The one config whose builds all succeeded; every other build refused, naming the field."""
    ok = {int(tag.split("@")[0]) for tag, (outcome, _, _) in got.items() if outcome == "ok"}
    assert len(ok) == 1, {tag: (o, m[:600]) for tag, (o, _, m) in got.items()}
    winner = ok.pop()
    for tag, (outcome, _, message) in got.items():
        if int(tag.split("@")[0]) == winner:
            continue
        assert outcome == "FingerprintMismatch", (tag, message[:3000])
        assert "recipe.max_length differs" in message, message[:3000]
    assert any(fin for tag, (_, fin, _) in got.items() if int(tag.split("@")[0]) == winner), got
    return winner


def _assert_is(out: Path, job: dict[str, Any], winner: int) -> None:
    cache = open_cache(out)
    assert cache.max_length == winner
    check = verify_cache(out)
    assert check.ok, check.problems
    assert tree_digest(out) == tree_digest(job["root"] / f"reference{winner}")


def test_builds_of_three_configs_claiming_at_once_one_wins(job: dict[str, Any]) -> None:
    out = job["root"] / "at-once"
    builds: list[tuple[int, str | None]] = [(n, None) for n in LENGTHS for _ in range(2)]
    got = _run_at_once(builds, job["configs"], str(out))
    _assert_is(out, job, _winner(got))


def test_two_jobs_of_two_ranks_each_claiming_at_once(job: dict[str, Any]) -> None:
    """Two hosts per job (``--shard i/2``): the winner's ranks join, the loser's both refused."""
    out = job["root"] / "ranks"
    builds: list[tuple[int, str | None]] = [(n, f"{i}/2") for n in LENGTHS[:2] for i in (0, 1)]
    got = _run_at_once(builds, job["configs"], str(out))
    _assert_is(out, job, _winner(got))


def test_cli_builds_started_together_without_any_hook(job: dict[str, Any]) -> None:
    out = job["root"] / "cli"
    launches = [
        (
            n,
            subprocess.Popen(
                [
                    *CLI,
                    str(job["root"] / f"cfg{n}.yaml"),
                    "--out",
                    str(out),
                    "--workers",
                    "1",
                    "-q",
                ],
                stderr=subprocess.PIPE,
            ),
        )
        for n in (LENGTHS[0], LENGTHS[2], LENGTHS[0], LENGTHS[2])
    ]
    codes = []
    for n, p in launches:
        try:
            _, stderr = p.communicate(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail("chute preprocess hung")
        codes.append((n, p.returncode, stderr.decode()))
    winners = {n for n, rc, _ in codes if rc == 0}
    assert len(winners) == 1, [(n, rc, err[-800:]) for n, rc, err in codes]
    winner = winners.pop()
    for n, rc, err in codes:
        if n != winner:
            assert rc != 0 and "recipe.max_length differs" in err, err[-2000:]
    _assert_is(out, job, winner)


# -- a build taken over while it runs; chunks of another build; caches that mix builds ---------


class TakeOver(ChunkStage):
    """At chunk ``at``, another build takes the directory over: ``plan`` replaces ``plan.json``.

    That is what a ``--overwrite`` of another config does to a build still running (or a plan
    claimed where the conditional create is not atomic). It adds no column and no file.
    """

    name = "takeover"

    def __init__(self, out: str, plan: str, at: int):
        super().__init__(out=out, plan=plan, at=at)

    def files(self, chunk: int, samples: list[dict[str, Any]]) -> dict[str, bytes]:
        if chunk == self.options["at"]:
            layout = Layout(self.options["out"])
            layout.publish(layout.plan, Path(self.options["plan"]).read_bytes())
        return {}


@pytest.fixture
def small(tmp_path: Path) -> dict[str, Any]:
    """Two configs (max_length 256 and 512) over 300 records, 5 chunks, and their caches."""
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "d.jsonl", 300, broken=(5,))
    configs = {n: config(data, tok, max_length=n) for n in (128, 512)}
    for n, cfg in configs.items():
        preprocess(cfg, out=tmp_path / f"ref{n}", progress=False)
    return {"root": tmp_path, "configs": configs}


def _splice(small: dict[str, Any], out: Path, k: int, manifest: bool) -> None:
    """Chunk ``k`` of the 512 build (files and commit record) into a copy of the 128 build."""
    shutil.copytree(small["root"] / "ref128", out)
    other = Layout(small["root"] / "ref512")
    record = orjson.loads(other.record(k).read_bytes())
    for entry in record["files"].values():
        shutil.copy(other.chunks / entry["name"], out / "chunks" / entry["name"])
    shutil.copy(other.record(k), out / "chunks" / other.record(k).name)
    if manifest:  # the manifest lists it, as a finalize that took any record would write
        data = orjson.loads((out / "manifest.json").read_bytes())
        theirs = orjson.loads((small["root"] / "ref512" / "manifest.json").read_bytes())
        data["chunks"][k] = theirs["chunks"][k]
        (out / "manifest.json").write_bytes(orjson.dumps(data))
    else:
        (out / "manifest.json").unlink()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_build_taken_over_mid_way_stops_before_writing_a_chunk(
    small: dict[str, Any], where: str, request: pytest.FixtureRequest
) -> None:
    root = small["root"]
    out = request.getfixturevalue("s3").url("taken") if where == "s3" else str(root / "taken")
    stage = TakeOver(out, str(root / "ref512" / "plan.json"), at=2)
    with pytest.raises(FingerprintMismatch) as info:
        preprocess(small["configs"][128], out=out, stages=[stage], progress=False)
    message = str(info.value)
    assert "chunk 2 was not written" in message and "taken over by another build" in message
    assert f"recipe.max_length differs: in {out} 512, this run 128" in message
    layout = Layout(out)
    assert layout.recorded() == {0, 1}  # chunks 0 and 1 were this build's, then nothing
    names = layout.storage.listing(layout.chunks)
    assert not [n for n in names if n.startswith("000002.")]  # not one file of chunk 2
    assert (
        orjson.loads(layout.storage.read(layout.plan) or b"")["fingerprint"]["recipe"]["max_length"]
        == 512
    )  # the other build's claim stands


class OverwriteMidway(ChunkStage):
    """At chunk ``at``, another run's ``--overwrite`` (``prepare_dir``) into the same folder.

    ``plan``: that run's plan file, or ``None`` for the same config as this build's.
    """

    name = "overwrite"

    def __init__(self, out: str, plan: str | None, at: int):
        super().__init__(out=out, plan=plan, at=at)

    def files(self, chunk: int, samples: list[dict[str, Any]]) -> dict[str, bytes]:
        if chunk == self.options["at"]:
            from chute.cache.workdir import prepare_dir
            from chute.world import World

            layout = Layout(self.options["out"])
            plan = self.options["plan"]
            blob = Path(plan).read_bytes() if plan else layout.storage.read(layout.plan)
            prepare_dir(layout, True, World(), blob)
        return {}


def test_an_overwrite_of_another_config_stops_the_build_running_there(
    small: dict[str, Any],
) -> None:
    """Its plan deleted first, the running build claimed the folder again: the --overwrite
    was refused ("pass --overwrite") and the running one waited an hour for its lost chunks."""
    out = str(small["root"] / "raced")
    stage = OverwriteMidway(out, str(small["root"] / "ref512" / "plan.json"), at=2)
    with pytest.raises(FingerprintMismatch, match="chunk 2 was not written: .* taken over"):
        preprocess(small["configs"][128], out=out, stages=[stage], progress=False)
    plan = orjson.loads(Layout(out).plan.read_bytes())
    assert plan["fingerprint"]["recipe"]["max_length"] == 512  # the overwrite's claim stands
    assert Layout(out).recorded() == set()  # the running build's chunks went with it


def test_an_overwrite_of_the_same_config_fails_the_running_build_at_once(
    small: dict[str, Any],
) -> None:
    out = str(small["root"] / "raced")
    stage = OverwriteMidway(out, None, at=2)
    cfg = {
        **small["configs"][128],
        "cache": {**small["configs"][128]["cache"], "wait_timeout": 600},
    }
    with pytest.raises(CacheError, match=r"2 chunk\(s\) this run committed .* are gone"):
        preprocess(cfg, out=out, stages=[stage], progress=False)


def test_a_chunk_of_another_build_is_never_finalized_and_its_rank_rebuilds_it(
    small: dict[str, Any],
) -> None:
    out = small["root"] / "spliced"
    _splice(small, out, 3, manifest=False)  # chunk 3: rank 1's of 2
    cfg = small["configs"][128]
    with pytest.raises(CacheError) as info:
        preprocess(cfg, out=out, shard="0/2", wait_timeout=1.0, progress=False)
    message = str(info.value)
    assert "chunk(s) 3 were committed by another build (recipe.max_length differs)" in message
    assert not (out / "manifest.json").exists()
    report = preprocess(cfg, out=out, shard="1/2", progress=False)
    assert report.built == 1 and report.reused == 1 and report.finalized  # chunks 1 and 3
    assert tree_digest(out) == tree_digest(small["root"] / "ref128")


def test_one_rank_rebuilds_a_chunk_of_another_build(small: dict[str, Any]) -> None:
    out = small["root"] / "spliced"
    _splice(small, out, 1, manifest=False)
    report = preprocess(small["configs"][128], out=out, progress=False)
    assert report.built == 1 and report.reused == 4 and report.finalized
    assert tree_digest(out) == tree_digest(small["root"] / "ref128")


def test_open_cache_and_validate_catch_a_cache_that_mixes_two_builds(
    small: dict[str, Any],
) -> None:
    from typer.testing import CliRunner

    from chute.cli import app

    listed = small["root"] / "listed"  # the manifest lists the other build's chunk
    _splice(small, listed, 2, manifest=True)
    with pytest.raises(CacheError, match=r"mixes two builds: chunk\(s\) 2 of 5 were built for"):
        open_cache(listed)
    rogue = small["root"] / "rogue"  # the manifest is right, chunk 2 was rewritten after it
    _splice(small, rogue, 2, manifest=True)
    (rogue / "manifest.json").write_bytes((small["root"] / "ref128/manifest.json").read_bytes())
    for out in (listed, rogue):
        check = verify_cache(out)
        mixed = [p for p in check.problems if "the cache mixes two builds" in p]
        assert mixed and "chunk(s) 2 name another build than the manifest's" in mixed[0], out
        assert "(recipe.max_length differs)" in mixed[0]
        result = CliRunner().invoke(app, ["validate", str(out)])
        assert result.exit_code == 1 and "mixes two builds" in result.output, result.output
    assert verify_cache(small["root"] / "ref128").ok


def test_a_cache_written_before_chunks_named_their_build(small: dict[str, Any]) -> None:
    """Complete: opened and validated as it is. Partial: its chunks are built again."""
    out = small["root"] / "old"
    shutil.copytree(small["root"] / "ref128", out)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    for entry in manifest["chunks"]:
        del entry["build_digest"]
    (out / "manifest.json").write_bytes(orjson.dumps(manifest))
    for k in range(5):
        record = orjson.loads(Layout(out).record(k).read_bytes())
        del record["build_digest"], record["build_parts"]
        Layout(out).record(k).write_bytes(orjson.dumps(record))
    assert len(open_cache(out)) == len(open_cache(small["root"] / "ref128"))
    assert verify_cache(out).ok
    (out / "manifest.json").unlink()  # as a build an older chute left unfinished
    report = preprocess(small["configs"][128], out=out, progress=False)
    assert report.built == 5 and report.reused == 0
    assert tree_digest(out) == tree_digest(small["root"] / "ref128")


def test_builds_into_one_bucket_claiming_at_once_one_wins(
    s3: Any, small: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each process its own machine (its own local cache and mirror); only the bucket shared."""
    out = s3.url("at-once")
    builds: list[tuple[int, str | None]] = [(128, None), (512, None), (128, None), (512, None)]
    got = _run_at_once(builds, small["configs"], out, machines=small["root"] / "machines")
    winner = _winner(got)
    cache = open_cache(out)
    assert cache.max_length == winner and verify_cache(out).ok
    want = open_cache(small["root"] / f"ref{winner}")
    assert cache.manifest["data_digest"] == want.manifest["data_digest"]


def test_a_folder_of_changed_files_says_restore_them_not_run_its_config(tmp_path: Path) -> None:
    """The folder's own config names the same files: running it would be refused too."""
    from cache_helpers import config, write_alpaca, write_tokenizer

    data = write_alpaca(tmp_path / "data.jsonl", 30)
    tok = write_tokenizer(tmp_path / "tok")
    out = tmp_path / "out"
    preprocess(config(data, tok), out=out, progress=False)
    with open(data, "a") as f:
        f.write('{"instruction": "one more", "output": "record"}\n')
    with pytest.raises(FingerprintMismatch, match=r"of these data files as they were") as info:
        preprocess(config(data, tok), out=out, progress=False)
    message = str(info.value)
    assert "records differs: in" in message and "Restore the files" in message
    assert "config.yaml" not in message
    # another recipe over the same files: its stored config is the way back
    with pytest.raises(FingerprintMismatch, match=r"built for another job") as info:
        preprocess(config(data, tok, max_length=64), out=out, progress=False)
    assert "run with the config in" in str(info.value)
    # records enough for one more chunk (64 a chunk): still files that changed
    with open(data, "a") as f:
        f.writelines('{"instruction": "more", "output": "records"}\n' for _ in range(64))
    with pytest.raises(FingerprintMismatch, match=r"of these data files as they were") as info:
        preprocess(config(data, tok), out=out, progress=False)
    assert "chunks differs" in str(info.value) and "config.yaml" not in str(info.value)


def test_a_rerun_over_a_complete_cache_clears_what_killed_runs_left(tmp_path: Path) -> None:
    """A finalizer killed after its manifest left ``finalizing``; a shard's rerun left its
    ``building`` lock: the folder was no longer what a clean build writes."""
    from chute._internal.owner import Owner

    data = write_alpaca(tmp_path / "data.jsonl", 30)
    tok = write_tokenizer(tmp_path / "tok")
    preprocess(config(data, tok), out=tmp_path / "ref", progress=False)
    out = tmp_path / "out"
    preprocess(config(data, tok), out=out, progress=False)
    reference = tree_digest(tmp_path / "ref")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        marker = Owner.of(child.pid).to_bytes()  # a finalizer of this machine...
    finally:
        child.kill()
        child.wait()  # ...that is gone
    (out / "finalizing").write_bytes(marker)
    (out / "chunks" / ".shard-1-of-2.building").write_bytes(b"")
    again = preprocess(config(data, tok), out=out, progress=False)
    assert (again.built, again.finalized) == (0, False)
    assert tree_digest(out) == reference
