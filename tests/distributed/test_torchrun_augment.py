"""Augmented pixels resume exactly: torchrun, 2 ranks x 2 workers, SIGKILL, resume, elastic.

The augmentation (crop, flip, colour jitter and a torch transform drawing from torch's global
generator) is keyed by (seed, epoch, sample id) only, so after a kill the resumed ranks deliver,
batch by batch, the pixels the uninterrupted run would have (computed here in one process,
without workers), and three ranks resuming two ranks' checkpoint give each sample those pixels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from loader_job import BATCH_SIZE, SEED, augmented_loader, pixel_digests
from test_torchrun import run, train_until_checkpoint

from chute import Loader, World
from chute.demo.data import write_demo_tokenizer

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]
N = 72


def _data(tmp_path: Path) -> tuple[Path, Path]:
    tokenizer = write_demo_tokenizer(tmp_path / "tok")
    rows = []
    for i in range(6):
        image = Image.effect_noise((40, 32), 60).convert("RGB")
        image.save(tmp_path / f"{i}.png")
    for i in range(N):
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"<image>Describe picture {i}."},
                    {"role": "assistant", "content": "Noise."},
                ],
                "images": [f"{i % 6}.png"],
            }
        )
    data = tmp_path / "pictures.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data, tokenizer


def _expected(data: Path, tokenizer: Path, world_size: int) -> list[list[tuple[list, list]]]:
    """Each rank's uninterrupted epoch: (sample ids, pixel digests) per batch."""
    out = []
    for rank in range(world_size):
        loader = Loader(
            data,
            batch_size=BATCH_SIZE,
            seed=SEED,
            world=World(rank=rank, world_size=world_size),
            **augmented_loader(str(tokenizer)),
        )
        out.append([(b["sample_ids"].tolist(), pixel_digests(b)) for b in loader])
    return out


def test_augmented_pixels_after_kill_and_resume_equal_the_uninterrupted_run(tmp_path: Path):
    data, tokenizer = _data(tmp_path)
    args = ["--data", str(data), "--out", str(tmp_path), "--augment", str(tokenizer)]
    streams = _expected(data, tokenizer, 2)
    by_sample = {i: d for s in streams for ids, ds in s for i, d in zip(ids, ds, strict=True)}
    assert len(by_sample) == N and len(set(by_sample.values())) == N  # every sample its own

    done = train_until_checkpoint(3, *args)
    ckpt = tmp_path / "ckpt"
    consumed = orjson.loads((ckpt / f"step{done}.done").read_bytes())["batches"]
    assert 0 < consumed < len(streams[0])

    # exact resume: batch by batch, the same samples with the same augmented pixels
    run(2, *args, "--mode", "resume")
    result = orjson.loads((tmp_path / "resume.json").read_bytes())
    for r in result["ranks"]:
        rest = streams[r["rank"]][consumed:]
        assert r["batches"] == [ids for ids, _ in rest]
        assert r["pixels"] == [ds for _, ds in rest]

    # elastic: three ranks share the rest; each sample's pixels are still its own
    run(3, *args, "--mode", "resume")
    result = orjson.loads((tmp_path / "resume.json").read_bytes())
    seen = 0
    for r in result["ranks"]:
        for ids, ds in zip(r["batches"], r["pixels"], strict=True):
            for i, d in zip(ids, ds, strict=True):
                assert by_sample[i] == d
                seen += 1
    assert seen == N - 2 * BATCH_SIZE * consumed
