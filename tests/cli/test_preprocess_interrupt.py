"""SIGINT to ``chute preprocess``: to the parent alone (as ``timeout`` sends it), or to its
process group (Ctrl-C at a terminal). Either way a prompt exit: the parent stops its workers
(busy in chunks that would never end here), says how to go on, exits with 130, and the same
command run again resumes from the committed chunks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from cache_helpers import config, entered, write_alpaca, write_tokenizer
from chute import open_cache
from chute.cache.layout import Layout

pytestmark = pytest.mark.timeout(240)

TESTS = Path(__file__).resolve().parents[1]
# the chute program (argv[0] "chute": it ends through os._exit), with the gated stage registered
# and SIGINT handled as at a terminal: a test run started in the background (a non-interactive
# shell's `&`) has SIGINT ignored, every process it starts inherits that, and Python keeps an
# ignored SIGINT ignored (two fresh-clone runs timed out so)
PROGRAM = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "import sys, cache_helpers; cache_helpers.register_gated_stage(); sys.argv[0] = 'chute'; "
    "from chute.cli import main; main()"
)
STOPS_WITHIN = 20.0  # seconds from SIGINT to exit (the held chunks would never finish)


def _launch(args: list[str]) -> subprocess.Popen[bytes]:
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", PROGRAM, "preprocess", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # its own process group, as a job at a terminal
    )


def _signal_masks(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks, as /proc shows them."""
    with open(f"/proc/{pid}/status") as f:
        return " ".join(
            line.strip() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
        )


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the workers")
@pytest.mark.parametrize("to", ["parent", "group"])
def test_sigint_stops_the_workers_and_the_same_command_resumes(to: str, tmp_path: Path) -> None:
    gate, steps = tmp_path / "gate", tmp_path / "entered"
    gate.touch()
    steps.mkdir()
    cfg = config(write_alpaca(tmp_path / "d.jsonl", 600), write_tokenizer(tmp_path / "tok"))
    cfg["stages"] = {"gated": {"gate": str(gate), "entered": str(steps), "from_chunk": 2}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "cache"
    layout = Layout(out)
    args = [str(tmp_path / "cfg.yaml"), "--out", str(out), "--workers", "2", "--quiet"]

    build = _launch(args)
    deadline = time.monotonic() + 120
    while not (layout.recorded() >= {0, 1} and {"2", "3"} <= set(entered(steps))):
        if build.poll() is not None or time.monotonic() > deadline:
            build.kill()
            pytest.fail(f"the build never held chunks 2 and 3:\n{build.communicate()[1].decode()}")
        time.sleep(0.02)
    held = entered(steps)
    workers = held["2"] | held["3"]
    assert len(workers) == 2 and build.pid not in workers  # both workers are in a held chunk

    masks = _signal_masks(build.pid)  # (said if it does not stop: SIGINT ignored or blocked?)
    if to == "parent":
        build.send_signal(signal.SIGINT)  # as `timeout -s INT` does
    else:
        os.killpg(build.pid, signal.SIGINT)  # as Ctrl-C at a terminal does
    started = time.monotonic()
    try:
        _, err = build.communicate(timeout=STOPS_WITHIN)
    except subprocess.TimeoutExpired:
        build.kill()
        for pid in workers:  # (they die with their parent too: PDEATHSIG)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        err = build.communicate()[1]
        pytest.fail(
            f"chute preprocess did not exit within {STOPS_WITHIN} s of SIGINT (its signal "
            f"masks before: {masks}):\n{err.decode()[-3000:]}"
        )
    took = time.monotonic() - started
    message = err.decode()
    assert build.returncode == 130, message
    assert "interrupted; run the same command to resume" in message
    assert "Traceback" not in message, message
    assert not [pid for pid in workers if _running(pid)], "workers were left running"
    assert took < STOPS_WITHIN
    assert layout.recorded() == {0, 1} and not layout.manifest.exists()

    gate.unlink()
    again = _launch([*args, "--json"])
    stdout, err = again.communicate(timeout=120)
    assert again.returncode == 0, err.decode()
    report = orjson.loads(stdout)
    assert report["chunks_reused"] == 2 and report["chunks_built"] == 8 and report["finalized"]
    assert len(open_cache(out)) == 600
