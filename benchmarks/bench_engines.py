"""``chute preprocess --engine ray`` against the local engine: overhead, startup, scaling.

Usage: ``.venv/bin/python benchmarks/bench_engines.py [--records 100000] [--rounds 2]
[--workers 2] [--quick]`` (needs the ``ray`` extra).

Data: the same real instruction data as ``bench_preprocess.py`` (alpaca + ShareGPT from
../shared/data, repeated to ``--records``), Qwen3 ``tokenizer.json``, ChatML, ``max_length``
2048, chunks of 10,000 records. Every build is a fresh ``chute preprocess ... --json --quiet``
process (imports, tokenizer loading and Ray startup counted), and every cache is checked to be
byte-identical to the first local one.

Each round builds the same cache six ways, one after the other (the fastest round of each is
kept, so every side sees the machine's load alike):

* ``local_1``, ``local``: ``--workers 1`` and ``--workers 2`` (a process pool);
* ``ray_own``: ``--engine ray --workers 2``: chute starts a local Ray with 2 CPUs, and stops it
  (Ray's startup and shutdown counted);
* ``ray_running``: ``--engine ray --address A`` on a 2-CPU Ray already running (what a cluster
  user has): the cost of Ray per chunk, without its startup;
* ``ray_1_node_1_cpu``, ``ray_2_nodes_1_cpu``: Ray clusters of one and two nodes of 1 CPU each
  on this machine (``ray.cluster_utils.Cluster``: one raylet, object store and worker pool per
  node), already running: scaling across nodes. On a 2-core machine this measures what Ray's
  scheduling across nodes costs, not more cores.

Then Ray's startup alone: ``ray.init`` of a new local Ray + a first task + shutdown, and
connecting to a running one, each in a fresh interpreter (best of 3).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_python, save
from bench_preprocess import MAX_LENGTH, TOKENIZER, make_data

# a test-like Ray here: no usage reports (no network), no token authentication (one machine)
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}

STARTUP = """
import json, time
t0 = time.perf_counter()
import ray
t1 = time.perf_counter()
ray.init({address}, _temp_dir={temp!r})
t2 = time.perf_counter()
ray.get(ray.remote(lambda: 1).remote())
t3 = time.perf_counter()
ray.shutdown()
t4 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "init": t2 - t1, "first_task": t3 - t2,
                  "shutdown": t4 - t3, "total": t4 - t0}}))
"""


def chunks_digest(cache: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    for path in sorted((cache / "chunks").iterdir()):
        h.update(path.name.encode() + path.read_bytes())
    for name in ("lengths.npy", "rejects.jsonl", "manifest.json"):
        h.update((cache / name).read_bytes())
    return h.hexdigest()


def build(config: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    chute = Path(sys.executable).with_name("chute")
    cmd = [str(chute), "preprocess", str(config), "--out", str(out), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "--json", "--quiet"],
        capture_output=True,
        text=True,
        env={**os.environ, **RAY_ENV},
        check=False,
    )
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    report = json.loads(proc.stdout)
    result = {
        "seconds": round(seconds, 2),
        "engine": report["engine"],
        "engine_startup_seconds": report["engine_startup_seconds"],
        "samples": report["samples"],
        "digest": chunks_digest(out),
        "command": " ".join(cmd),
    }
    shutil.rmtree(out)
    return result


class LocalCluster:
    """A Ray of ``nodes`` raylets with ``cpus`` CPUs each, on this machine."""

    def __init__(self, nodes: int, cpus: int, temp: Path):
        from ray.cluster_utils import Cluster

        os.environ.update(RAY_ENV)
        temp.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": cpus, "temp_dir": str(temp), "include_dashboard": False},
        )
        for _ in range(nodes - 1):
            self.cluster.add_node(num_cpus=cpus)
        self.address = self.cluster.address

    def close(self) -> None:
        self.cluster.shutdown()


def startup(rounds: int, address: str | None, temp: Path) -> dict[str, float]:
    runs = []
    for _ in range(rounds):
        given = f"address={address!r}" if address else 'address="local", num_cpus=2'
        runs.append(run_python(STARTUP.format(address=given, temp=str(temp))))
    return {k: round(min(r[k] for r in runs), 2) for k in runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; fastest kept")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="20k records, 1 round (smoke test)")
    ap.add_argument(
        "--sides",
        default=None,
        help="a subset of the sides, comma-separated (e.g. local,ray_running for a larger "
        "--records); results then go to engines_<records>.json",
    )
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 20_000, 1
    if not TOKENIZER.is_file():
        print(f"needs {TOKENIZER} (set CHUTE_SHARED_DATA)", file=sys.stderr)
        return 2
    os.environ.update(RAY_ENV)
    alpaca, sharegpt, n = make_data(args.records)
    work = Path(tempfile.mkdtemp(prefix="be-", dir="/tmp"))
    config = work / "chute.yaml"
    config.write_text(
        json.dumps(
            {
                "sources": [str(alpaca), str(sharegpt)],
                "recipe": {
                    "tokenizer": str(TOKENIZER),
                    "template": "chatml",
                    "max_length": MAX_LENGTH,
                },
                "cache": {"chunk_size": 10_000},
            }
        )
    )
    uptime = [subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()]
    w = str(args.workers)
    # (name, cluster layout (nodes, CPUs each) or None, extra flags); a layout's cluster is
    # started before its build and stopped after (not timed): "a Ray that is running"
    sides: list[tuple[str, tuple[int, int] | None, list[str]]] = [
        ("local_1", None, ["--workers", "1"]),
        ("local", None, ["--workers", w]),
        ("ray_own", None, ["--engine", "ray", "--workers", w]),
        ("ray_running", (1, args.workers), ["--engine", "ray"]),
        ("ray_1_node_1_cpu", (1, 1), ["--engine", "ray"]),
        (f"ray_{args.workers}_nodes_1_cpu", (args.workers, 1), ["--engine", "ray"]),
    ]
    if args.sides:
        wanted = args.sides.split(",")
        sides = [s for s in sides if s[0] in wanted]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
    try:
        for r in range(args.rounds):
            for i, (name, layout, extra) in enumerate(sides):
                # a short temp dir: Ray's unix sockets live under it (107 characters at most)
                cluster = None if layout is None else LocalCluster(*layout, work / f"c{r}{i}")
                try:
                    address = [] if cluster is None else ["--address", cluster.address]
                    runs[name].append(build(config, work / f"{name}{r}", [*extra, *address]))
                finally:
                    if cluster is not None:
                        cluster.close()
                print(name, r, runs[name][-1]["seconds"], flush=True)
            uptime.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        connect = start = None
        if not args.sides:
            running = LocalCluster(1, args.workers, work / "connect")
            try:
                connect = startup(3, running.address, work / "connect")
            finally:
                running.close()
            start = startup(3, None, work / "t")
        uptime.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    digests = {r["digest"] for v in runs.values() for r in v}
    best = {name: min(v, key=lambda x: x["seconds"]) for name, v in runs.items()}
    rate = {name: round(n / b["seconds"]) for name, b in best.items()}
    # what every run reports; the full run adds the comparisons of its fixed sides
    measured = {
        "workers": args.workers,
        "uptime": uptime,
        "byte_identical": len(digests) == 1,
        "best": best,
        "records_per_s": rate,
        "all_runs_seconds": {k: [r["seconds"] for r in v] for k, v in runs.items()},
    }
    if args.sides:
        save(
            f"engines_{n}",
            {
                "data": f"{n:,} records: alpaca + ShareGPT from ../shared/data",
                **measured,
                "ratios_vs_local": {
                    k: round(v / rate["local"], 3) for k, v in rate.items() if "local" in rate
                },
            },
        )
        return 0
    save(
        "engines",
        {
            "data": f"{n:,} records: alpaca + ShareGPT from ../shared/data (as bench_preprocess)",
            "tokenizer": "Qwen3 tokenizer.json",
            "max_length": MAX_LENGTH,
            "chunk_size": 10_000,
            **measured,
            "ray_running_vs_local": round(rate["ray_running"] / rate["local"], 3),
            "ray_own_vs_local": round(rate["ray_own"] / rate["local"], 3),
            "scaling_vs_1_cpu": {
                "local": round(rate["local"] / rate["local_1"], 2),
                "ray_1_node": round(rate["ray_running"] / rate["ray_1_node_1_cpu"], 2),
                f"ray_{args.workers}_nodes": round(
                    rate[f"ray_{args.workers}_nodes_1_cpu"] / rate["ray_1_node_1_cpu"], 2
                ),
            },
            "startup_seconds": {"new_local_ray": start, "connect_to_running": connect},
            "targets": {
                "ray overhead on one node <= 15%": rate["ray_running"] >= 0.85 * rate["local"],
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
