"""Helpers shared by the benchmark scripts: machine info, timing, memory, result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / "data"
RESULTS_DIR = BENCH_DIR / "results"
SHARED_DATA = Path(os.environ.get("CHUTE_SHARED_DATA", BENCH_DIR.parent.parent / "shared" / "data"))


def machine() -> dict[str, Any]:
    import numpy

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    for mod in ("torch", "tokenizers", "datasets", "pyarrow", "orjson"):
        with contextlib.suppress(ImportError):
            info[mod] = __import__(mod).__version__
    return info


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Fastest wall time of ``repeat`` runs (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_python(code: str, timeout: float = 1800) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it must print one JSON object as its last line."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


USS_SNIPPET = """
import psutil, os
def uss_mb():
    return psutil.Process(os.getpid()).memory_full_info().uss / 2**20
def anon_mb():
    # private anonymous memory: what the process itself allocated (USS also counts page-cache
    # pages of memory-mapped files that only this process happens to map; those are reclaimable)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")
"""


def save(name: str, result: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": name,
        "machine": machine(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        **result,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return path


def time_fsyncs() -> dict[str, float]:
    """Time every ``os.fsync`` of this process and of the processes forked from it from now on.

    Returns the running totals, ``{"seconds": ..., "calls": ...}``: read them before and after
    a step. chute's cache calls ``os.fsync`` through the module, so the wrapper sees each one.
    """
    totals = {"seconds": 0.0, "calls": 0.0}
    real = os.fsync

    def fsync(fd: Any) -> None:
        t0 = time.perf_counter()
        try:
            real(fd)
        finally:
            totals["seconds"] += time.perf_counter() - t0
            totals["calls"] += 1

    os.fsync = fsync
    return totals
