"""A cache's temporary files: a killed writer's are swept, a live writer's never, wherever it runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.cache.layout import sweep_temps
from chute.cache.storage import publish, publish_parts

# Writes the first part of a chunk, says so, and waits (a long chunk write in progress).
SLOW_WRITER = r"""
import os, sys, time
from chute.cache.storage import publish_parts
target, started, go = sys.argv[1:4]
def parts():
    yield b"x" * 1000
    open(started, "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    yield b"y"
publish_parts(target, parts())
"""

KILLED_WRITER = r"""
import os, signal, sys
from chute.cache.storage import publish_parts
def parts():
    yield b"x" * 1000
    os.kill(os.getpid(), signal.SIGKILL)  # mid-write: no cleanup runs
publish_parts(sys.argv[1], parts())
"""

SWEEP = "import sys; from chute.cache.layout import sweep_temps; print(sweep_temps(sys.argv[1]))"


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@contextlib.contextmanager
def _writing(target: Path) -> Iterator[None]:
    """A process publishing ``target``, held mid-write for the block, then let finish."""
    started, go = target.with_name("started"), target.with_name("go")
    writer = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(target), str(started), str(go)]
    )
    try:
        while not started.exists():  # its own signal: no timing assumed
            assert writer.poll() is None, "the writer stopped before it wrote"
            time.sleep(0.01)
        yield
    finally:
        go.touch()
        assert writer.wait(60) == 0
    assert target.read_bytes() == b"x" * 1000 + b"y"


def test_a_killed_writers_temporary_is_swept_and_a_live_writers_kept(tmp_path: Path) -> None:
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(chunks / "000001.arrow")])
    assert proc.returncode == -9
    (dead,) = _temps(chunks)
    with _writing(chunks / "000002.arrow"):
        assert len(_temps(chunks)) == 2
        assert sweep_temps(chunks) == 1
        (left,) = _temps(chunks)
        assert left != dead and left.startswith(".000002.arrow.")
    assert _temps(chunks) == []


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_live_writer_in_another_pid_namespace_keeps_its_temporary(tmp_path: Path) -> None:
    """Two containers sharing a host name (host networking) and a cache folder.

    A pid alone named the writer before: a rank in another pid namespace, seeing no process of
    that pid in its own, removed a live writer's chunk and the writer's rename failed.
    """
    probe = subprocess.run(["unshare", "-Urpf", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    with _writing(chunks / "000001.arrow"):
        other = ["unshare", "-Urpf", "--mount-proc", sys.executable, "-c", SWEEP, str(chunks)]
        swept = subprocess.run(other, capture_output=True, text=True, env=os.environ)
        assert swept.returncode == 0, swept.stderr
        assert swept.stdout.strip() == "0"


def test_published_files_are_readable_by_the_group_and_others(tmp_path: Path) -> None:
    """A node's shared cache is read by other users: 0o644 less the umask, not mkstemp's 0o600."""
    old = os.umask(0o022)
    try:
        publish(tmp_path / "a.json", b"{}")
        publish_parts(tmp_path / "b.arrow", [b"x", b"y"])
    finally:
        os.umask(old)
    for name in ("a.json", "b.arrow"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644
