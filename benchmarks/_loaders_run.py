"""One tool, one process: prepare its data, or run one epoch as one rank and write what it saw.

Started by bench_loaders.py (never imported by it), so each measurement has a fresh process:
its imports, its memory, its workers. Usage::

    python benchmarks/_loaders_run.py prepare TOOL --data F --work DIR --out R.json
    python benchmarks/_loaders_run.py epoch TOOL --data F --work DIR --out R.json [--ids]

``epoch`` reads RANK / WORLD_SIZE (as torchrun sets them); with WORLD_SIZE > 1 it joins a gloo
process group first, as a training script under torchrun does, then runs one epoch: time to the
first batch, then every batch until the epoch ends, counting samples and tokens, sampling the
memory of the process and its workers, and (``--ids``) recording each batch's sample ids.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have exited (the workers, joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["prepare", "epoch"])
    ap.add_argument("tool")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ids", action="store_true", help="record every batch's sample ids")
    args = ap.parse_args()

    t = time.perf_counter()
    import tokenizers  # noqa: F401 - every tool needs these two
    import torch  # noqa: F401

    from _loaders_tools import TOOLS, Ctx, import_streaming, rank_env
    from chute.bench.measure import batch_counts
    from chute.bench.memory import MemorySampler

    tool = TOOLS[args.tool]
    base_import_s = time.perf_counter() - t
    t = time.perf_counter()
    if tool.name == "mosaic":
        import_streaming()
    elif tool.module:
        importlib.import_module(tool.module)
    for name in tool.imports:
        importlib.import_module(name)
    import_s = time.perf_counter() - t
    ctx = Ctx(args.data, args.work, args.batch_size, args.workers, args.seed)
    result: dict = {"tool": tool.name, "mode": args.mode, "import_s": import_s}
    result["base_import_s"] = base_import_s

    if args.mode == "prepare":
        c0 = cpu_seconds()
        with MemorySampler(0.2) as mem:
            t = time.perf_counter()
            tool.prepare(ctx)
            result["prepare_s"] = time.perf_counter() - t
        result["prepare_cpu_s"] = cpu_seconds() - c0
        result["memory"] = mem.to_json()
        args.out.write_text(json.dumps(result))
        return 0

    rank, world_size = rank_env()
    if world_size > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    ids: list[list[int]] = []
    samples = real = padded = batches = 0
    c0 = cpu_seconds()
    with MemorySampler(0.2) as mem:
        t0 = time.perf_counter()
        loader = tool.loader(ctx, rank, world_size)
        it = iter(loader)
        first_batch_s = None
        for batch in it:
            n, r, p = batch_counts(batch)
            if first_batch_s is None:
                first_batch_s = time.perf_counter() - t0
                t_first, first_n = time.perf_counter(), n
            samples, real, padded, batches = samples + n, real + r, padded + p, batches + 1
            if args.ids:
                ids.append([int(i) for i in batch["sample_ids"] if int(i) >= 0])
        t_end = time.perf_counter()
        del it, loader  # the workers exit and are joined before the CPU clock is read
    result.update(
        rank=rank,
        world_size=world_size,
        workers=args.workers,
        batch_size=args.batch_size,
        first_batch_s=first_batch_s,
        epoch_s=t_end - t0,
        steady_s=t_end - t_first if batches else None,
        steady_samples=samples - first_n if batches else 0,
        batches=batches,
        samples=samples,
        real_tokens=real,
        padded_tokens=padded,
        cpu_s=cpu_seconds() - c0,
        memory=mem.to_json(),
    )
    if args.ids:
        result["ids"] = ids
    if world_size > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
