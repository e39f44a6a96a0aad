"""A local Ray cluster for tests, in a process of its own, and drivers that connect to it.

The test process itself never initialises Ray: Ray's threads would then be copied into every
process the other tests fork. A holder process starts a local Ray (its own temp dir, so no
other Ray on the machine is found or disturbed) and prints its address; drivers
(``chute preprocess --engine ray --address ...``) run as subprocesses and connect to it. Closing
the holder's stdin shuts the cluster down.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

# No usage reports (no network here), and no token authentication: a test cluster on this
# machine only (a driver given an explicit address would otherwise need RAY_AUTH_MODE=token).
QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}

_HOLDER = """
import sys, ray
ray.init(address="local", num_cpus=int(sys.argv[2]), include_dashboard=False,
         _temp_dir=sys.argv[1])
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


def python_path() -> str:
    """This checkout's ``src`` and ``tests`` first (workers import chute and the helpers)."""
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(SRC), str(TESTS), *([rest] if rest else [])])


class RayCluster:
    """A local Ray of ``cpus`` CPUs in a holder process; ``address`` for drivers."""

    def __init__(self, cpus: int = 2, timeout: float = 120.0):
        # short: Ray's unix sockets live under it (107 characters at most)
        self.temp = tempfile.mkdtemp(prefix="chray", dir="/tmp")
        self.cache = Path(self.temp) / "chute-cache"
        self.env = {
            **os.environ,
            "PYTHONPATH": python_path(),
            **QUIET_RAY,
            "CHUTE_CACHE_DIR": str(self.cache),  # workers keep their own source indexes
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, self.temp, str(cpus)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            text=True,
        )
        deadline = time.monotonic() + timeout
        line = ""
        while not line and time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not line:
            self.close()
            raise RuntimeError("the local Ray cluster did not start")
        self.address = line

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process (no RAY_ADDRESS: it passes --address)."""
        env = {**os.environ, "PYTHONPATH": python_path(), **QUIET_RAY}
        env.pop("RAY_ADDRESS", None)
        return env

    def chunk_workers(self) -> dict[int, int]:
        """``{pid: chunk}`` of the cluster's worker processes running a chunk task now."""
        out = {}
        for proc in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if title.startswith("ray::chute chunk "):
                out[proc.pid] = int(title.split()[-1])
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
