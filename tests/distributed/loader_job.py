"""A training-loop stand-in run under torchrun by test_torchrun.py (gloo, CPU).

Modes:
  epoch   one epoch; all_gather every rank's sample ids and batch count; rank 0 writes them.
  train   step through the epoch in lockstep (a barrier per step, like DDP's all-reduce),
          checkpointing every few steps the way trainers do: every rank writes its loader
          state, then rank 0 marks the checkpoint complete. Runs until killed.
  resume  load the latest complete checkpoint (rank r loads old rank r % old_world_size) and
          deliver the rest of the epoch; rank 0 writes every rank's batches.
  nothing step through the epoch in lockstep over data with little or nothing valid; rank 0
          writes how many batches each rank got and the error that stopped it, if any.
  differ  rank 1 reads another file (fewer records): the first pass must stop on both ranks
          at once with LockstepError, not hang; each rank writes the error it got.
  cp      context parallelism (CHUTE_CP in the environment): one epoch of packed rows cut into
          each rank's zig-zag slice; each step's loss summed over the cp group (a process group
          per group, from World.groups); rank 0 writes every rank's slices and losses, and the
          reject counts of a random-plan epoch summed over ranks.

--augment TOKENIZER: the data has images, loaded with an augmentation (``augmented_loader``);
each batch's record also holds a digest of every sample's augmented pixels.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import torch
import torch.distributed as dist

from chute import ErrorBudgetExceeded, Loader, LockstepError, Recipe, World
from chute.collate import loss_sum
from chute.media import ImageTransform, MediaStage
from chute.media.augment import Augment, ColorJitter, RandomResizedCrop

BATCH_SIZE = 4
SEED = 11
PACKED = {"max_length": 16}  # lengths: local rank 0 computes them, local rank 1 waits


def write_atomic(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(data))
    os.replace(tmp, path)


def torch_noise(image: torch.Tensor) -> torch.Tensor:
    """A torchvision-style transform: it draws from torch's global generator."""
    noise = torch.randint(-10, 11, image.shape)
    return (image.to(torch.int16) + noise).clamp(0, 255).to(torch.uint8)


AUGMENT = Augment(
    crop=RandomResizedCrop(scale=(0.3, 1.0)),
    flip=0.5,
    jitter=ColorJitter(0.3, 0.3, 0.3, 0.05),
    transform=torch_noise,
)


def augmented_loader(tokenizer: str) -> dict[str, Any]:
    """The recipe and media stage of the augmented runs (tiny images, 4 tokens each)."""
    recipe = Recipe(tokenizer=tokenizer, template="chatml", image_tokens=4, geometry="none")
    image = ImageTransform(size=(28, 28), crop=None, tokens_per_image=4)
    return {"recipe": recipe, "media": MediaStage(image, augment=AUGMENT)}


def pixel_digests(batch: dict[str, Any]) -> list[str]:
    """One digest per sample of its augmented pixels (one image per sample)."""
    return [
        hashlib.blake2b(x.numpy().tobytes(), digest_size=8).hexdigest()
        for x in batch["pixel_values"]
    ]


def latest_checkpoint(ckpt: Path) -> int:
    done = [int(p.stem.removeprefix("step")) for p in ckpt.glob("step*.done")]
    if not done:
        raise SystemExit(f"no complete checkpoint in {ckpt}")
    return max(done)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--mode", choices=["epoch", "train", "resume", "nothing", "cp", "differ"], required=True
    )
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--plan", choices=["random", "packed"], default="random")
    ap.add_argument("--augment", default=None, help="a tokenizer folder: augmented images")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out, ckpt = Path(args.out), Path(args.out) / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    if args.mode == "cp":
        context_parallel(args.data, out, rank, world_size)
        return
    # world=None: the loader finds its rank through World.detect() and torch.distributed
    media = augmented_loader(args.augment) if args.augment else {}
    data = args.data
    if args.mode == "differ" and rank == 1:
        data = data.replace(".jsonl", ".short.jsonl")  # a stale copy on one node
    loader = Loader(
        data,
        media.pop("recipe", None),
        media=media.pop("media", None),
        batch_size=BATCH_SIZE,
        seed=SEED,
        num_workers=2,
        persistent_workers=True,
        budget_min_samples=10_000,
        timeout=60,
        plan=args.plan,
        plan_options=PACKED if args.plan == "packed" else None,
    )
    if args.mode == "nothing":
        nothing(loader, out, rank, world_size)
        return
    if args.mode == "differ":
        try:
            next(iter(loader))
            error = None
        except LockstepError as exc:
            error = str(exc)
        write_atomic(out / f"differ.rank{rank}.json", {"error": error})
        dist.destroy_process_group()
        return
    if args.mode == "resume":
        step = latest_checkpoint(ckpt)
        old = orjson.loads((ckpt / f"step{step}.rank0.json").read_bytes())["world_size"]
        loader.load_state_dict(
            orjson.loads((ckpt / f"step{step}.rank{rank % old}.json").read_bytes())
        )
    batches: list[list[int]] = []
    rows: list[list[list[int]]] = []
    pixels: list[list[str]] = []
    planned = loader.batches_left
    for k, batch in enumerate(loader):
        batches.append(batch["sample_ids"].tolist())
        if args.augment:
            pixels.append(pixel_digests(batch))
        if "row_sample_ids" in batch:
            rows.append(batch["row_sample_ids"].tolist())
        if args.mode == "train":
            dist.barrier()
            if (k + 1) % args.every == 0:
                loader.check_lockstep()  # the elastic resume's assumption, verified
                write_atomic(ckpt / f"step{k}.rank{rank}.json", loader.state_dict())
                dist.barrier()
                if rank == 0:
                    write_atomic(ckpt / f"step{k}.done", {"batches": k + 1})
            time.sleep(args.delay)
    gathered: list = [None] * world_size
    mine = {"rank": rank, "batches": batches, "rows": rows, "planned": planned, "pixels": pixels}
    dist.all_gather_object(gathered, mine)
    stats = loader.stats_all_ranks()
    lockstep = "ok"
    if args.mode == "epoch":  # a rank one batch ahead must be caught
        if rank == 0:
            next(iter(loader))
        try:
            loader.check_lockstep()
        except LockstepError as exc:
            lockstep = str(exc)
    if rank == 0:
        write_atomic(
            out / f"{args.mode}.json", {"ranks": gathered, "stats": stats, "lockstep": lockstep}
        )
    dist.barrier()
    dist.destroy_process_group()


def logits_of(ids: torch.Tensor) -> torch.Tensor:
    """A fixed stand-in for a model: a seeded table of logits per token id."""
    table = torch.randn(256, 256, generator=torch.Generator().manual_seed(7))
    return table[ids]


def context_parallel(data: str, out: Path, rank: int, world_size: int) -> None:
    world = World.detect()  # cp from CHUTE_CP, rank and world size from torch.distributed
    groups = {g: dist.new_group(list(g)) for g in world.groups("cp")}  # every rank makes all
    group = groups[world.group("cp")]
    loader = Loader(
        data,
        batch_size=2,
        seed=SEED,
        num_workers=2,
        timeout=60,
        plan="packed",
        plan_options=PACKED,
        slices="cp",
    )
    steps = []
    for batch in loader:
        total, count = loss_sum(logits_of(batch["input_ids"]), batch["shift_labels"])
        both = torch.stack([total, count.to(total.dtype)])
        dist.all_reduce(both, group=group)  # the loss of the whole batch, on every cp rank
        steps.append(
            {
                "sample_ids": batch["sample_ids"].tolist(),
                "token_index": batch["token_index"].tolist(),
                "input_ids": batch["input_ids"].tolist(),
                "shift_labels": batch["shift_labels"].tolist(),
                "loss": float(both[0] / both[1]),
            }
        )
    mine = {"rank": rank, "dp_rank": world.dp_rank, "cp_rank": world.cp_rank, "steps": steps}
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, mine)
    # bad records reach the workers with the random plan: counted once per data-parallel rank
    rejects = Loader(data, batch_size=BATCH_SIZE, seed=SEED, budget_min_samples=10_000)
    for _ in rejects:
        pass
    stats = rejects.stats_all_ranks()
    if rank == 0:
        write_atomic(out / "cp.json", {"ranks": gathered, "stats": stats})
    dist.barrier()
    dist.destroy_process_group()


def nothing(loader: Loader, out: Path, rank: int, world_size: int) -> None:
    """Every step ends in a barrier, as DDP's all-reduce does: a rank that stopped alone would
    leave the other waiting there (monitored_barrier names it after 30 s instead of hanging)."""
    yielded, error = 0, None
    try:
        for _ in loader:
            yielded += 1
            dist.monitored_barrier(timeout=timedelta(seconds=30))
    except ErrorBudgetExceeded as exc:
        error = str(exc)
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank, "yielded": yielded, "error": error})
    if rank == 0:
        write_atomic(out / "nothing.json", {"ranks": gathered})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
