"""Temporaries a killed writer left beside chute's derived files are removed, and only those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from chute._internal import files

KILLED = r"""
import os, signal, sys
import numpy as np
from chute._internal.files import atomic_array
with atomic_array(sys.argv[1], np.int32, (1000,)) as out:
    out[:] = 7
    os.kill(os.getpid(), signal.SIGKILL)  # mid-write: no cleanup runs
"""


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "lengths" / "key.npy"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(target)], check=False)
    assert proc.returncode == -9
    (left,) = (tmp_path / "lengths").glob(".key.npy.*.tmp")
    assert left.stat().st_size > 4000  # allocated: it would stay on the disk
    # beside it: an older chute's temporary (no writer named) and a live writer's (this one)
    old = tmp_path / "lengths" / ".other.npy.abcd1234.tmp"
    old.write_bytes(b"x")
    live = tmp_path / "lengths" / f".mine.npy.{files._writer_tag()}.abcd1234.tmp"
    live.write_bytes(b"x")
    files._SWEPT.discard(str(target.parent))  # as a new process: the folder not swept yet
    with files.atomic_array(target, np.int32, (3,)) as out:
        out[:] = [1, 2, 3]
    assert np.load(target).tolist() == [1, 2, 3]
    assert not left.exists() and old.exists() and live.exists()
