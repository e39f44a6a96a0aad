"""``chute`` run as a program ends without tearing the interpreter down, exiting as usual."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# An object whose finalizer only runs when the interpreter tears its modules down.
PROLOGUE = (
    "import atexit, sys, threading, time\n"
    "class Witness:\n"
    "    def __del__(self):\n"
    "        sys.stderr.write('torn down\\n')\n"
    "witness = Witness()\n"
    "atexit.register(print, 'exit handler ran')\n"
)


# A non-daemon thread that runs until chute has decided how to exit: it waits on an event set
# right after ``_as_program`` (not on a time, which a loaded machine outlasts), so the decision
# always sees it alive, and the interpreter's own exit then joins it.
LIVE_THREAD = (
    "import chute.cli\n"
    "decided = threading.Event()\n"
    "threading.Thread(target=decided.wait).start()\n"
    "_as_program = chute.cli._as_program\n"
    "def _deciding():\n"
    "    try:\n"
    "        return _as_program()\n"
    "    finally:\n"
    "        decided.set()\n"
    "chute.cli._as_program = _deciding\n"
)


def _run(
    tmp_path: Path, argv0: str, *args: str, prologue: str = ""
) -> subprocess.CompletedProcess[str]:
    code = PROLOGUE + prologue + f"sys.argv[0] = {argv0!r}\nfrom chute.cli import main\nmain()\n"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"}\n')
    return path


def test_the_program_skips_teardown_but_runs_exit_handlers_and_flushes(
    tmp_path: Path, data: Path
) -> None:
    done = _run(tmp_path, "/usr/bin/chute", "index", str(data), "--json")
    assert done.returncode == 0, done.stderr
    report, handler = done.stdout.rstrip("\n").rsplit("\n", 1)
    assert json.loads(report)["records"] == 2
    assert handler == "exit handler ran"
    assert "torn down" not in done.stderr


def test_an_error_keeps_its_exit_code_and_message(tmp_path: Path, data: Path) -> None:
    done = _run(tmp_path, "chute", "index", str(data), "--no-such-flag")
    assert done.returncode == 2
    assert "--no-such-flag" in done.stderr and "torn down" not in done.stderr
    assert done.stdout.strip() == "exit handler ran"


@pytest.mark.parametrize(
    ("argv0", "prologue"),
    [
        ("-c", ""),  # not the chute program (python -c, a test, a notebook)
        ("chute", LIVE_THREAD),  # a thread still running when the command is done
    ],
    ids=["not-the-program", "a-thread-left"],
)
def test_otherwise_the_interpreter_exits_as_usual(
    tmp_path: Path, data: Path, argv0: str, prologue: str
) -> None:
    done = _run(tmp_path, argv0, "index", str(data), "--json", prologue=prologue)
    assert done.returncode == 0, done.stderr
    assert "torn down" in done.stderr
    assert done.stdout.rstrip("\n").endswith("exit handler ran")
