"""Host memory of one node under torchrun: R ranks x W workers over a 10M-sample packed plan.

Usage (the driver starts torchrun itself, once per layout)::

    .venv/bin/python benchmarks/bench_node_memory.py --samples 10000000 --layouts 8x0,8x1,8x2

Each rank runs a ``Loader`` with ``plan="packed"`` (rows of 2,048, batch 4) over a dataset whose
samples are computed from their index and whose lengths (lognormal, clipped to 2,048) come
from a memory-mapped ``.npy``, as the lengths cache gives them; it takes ``--steps`` batches,
then every rank waits at a barrier while rank 0 sums the proportional set size (``Pss`` of
``/proc/<pid>/smaps_rollup``: a page shared by k processes counts 1/k in each) over the whole
process tree under torchrun: shared pages (the plan's file, the lengths, torch's libraries)
count once. Run with ``--no-share`` to have every rank build and hold its own plan (what
chute did before plans were shared per node). Results: ``benchmarks/results/node_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Computed:
    """Samples computed from their index; lengths read from a memory-mapped file."""

    def __init__(self, lengths_path: str):
        self.lengths = np.load(lengths_path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": np.full(int(self.lengths[i]), i % 30_000, dtype=np.int32)}


def tree_pss_mb(root: int) -> tuple[float, int]:
    """PSS of ``root`` and all its descendants, and how many processes that is."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo, total, count = [root], 0, 0
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        count += 1
        except OSError:
            continue
    return round(total / 1024, 1), count


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from chute import Loader

    dist.init_process_group("gloo")
    if args.no_share:  # every rank builds and holds its own plan
        os.environ["LOCAL_WORLD_SIZE"] = "1"
    source = Computed(args.lengths)
    t0 = time.perf_counter()
    loader = Loader(
        source,
        plan="packed",
        batch_size=4,
        num_workers=args.workers,
        plan_options={"max_length": 2048},
    )
    it = iter(loader)
    for _ in range(args.steps):
        next(it)
    ready = time.perf_counter() - t0
    dist.barrier()
    if dist.get_rank() == 0:
        launcher = os.getppid()
        pss, procs = tree_pss_mb(launcher)
        Path(args.out).write_text(
            json.dumps(
                {"pss_mb": pss, "processes": procs, "rank0_seconds_to_steps": round(ready, 1)}
            )
        )
    dist.barrier()
    del it
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=1e7)
    ap.add_argument("--layouts", default="8x0,8x1,8x2", help="ranks x workers, comma separated")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-share", action="store_true")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lengths", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank:
        rank_main(args)
        return
    from _common import save

    n = int(args.samples)
    work = Path(tempfile.mkdtemp(prefix="node-memory-"))
    lengths = work / "lengths.npy"
    rng = np.random.default_rng(0)
    np.save(lengths, np.clip(rng.lognormal(5.5, 1.0, n), 1, 2048).astype(np.int32))
    rows = []
    for layout in args.layouts.split(","):
        ranks, workers = (int(x) for x in layout.split("x"))
        out = work / f"{layout}.json"
        env = {**os.environ, "CHUTE_CACHE_DIR": str(work / f"cache-{layout}")}
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={ranks}",
            __file__,
            "--rank",
            "--lengths",
            str(lengths),
            "--workers",
            str(workers),
            "--steps",
            str(args.steps),
            "--out",
            str(out),
        ]
        if args.no_share:
            cmd.append("--no-share")
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        row: dict[str, Any] = {
            "ranks": ranks,
            "workers": workers,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        if proc.returncode or not out.is_file():
            row["error"] = proc.stderr[-1500:]
        else:
            row.update(json.loads(out.read_text()))
        print(json.dumps(row), flush=True)
        rows.append(row)
    save(
        "node_memory" + ("_no_share" if args.no_share else ""),
        {"samples": n, "share": not args.no_share, "layouts": rows},
    )


if __name__ == "__main__":
    main()
