"""Augmented images per second per worker: chute's pipeline against a plain DataLoader.

Usage: ``.venv/bin/python benchmarks/bench_augment.py [--images 256] [--rounds 3]``

The shared photos (JPEG, PNG, WEBP under ../shared/data), cycled to ``--images`` samples, each
through random resized crop (scale 0.08-1), horizontal flip (p=0.5) and colour jitter
(brightness, contrast, saturation 0.4, hue 0.1) to a normalised ``(3, 224, 224)`` float32 tensor,
in a ``torch.utils.data.DataLoader`` with one worker (images/s is then per worker), batches of 16:

* **torchvision v2**: ``v2.Compose([PILToTensor, RandomResizedCrop(224), RandomHorizontalFlip,
  ColorJitter, ToDtype, Normalize])`` on the Pillow decode, in a plain map-style dataset: what
  most training scripts write. torchvision 0.28.0 is the release for torch 2.13.0, but its wheel
  is a CUDA build whose C extension does not load beside the CPU torch; its v2 transforms are
  Python over torch ops, so it is imported without the extension's operator registrations
  (``_torchvision``; no transform used here calls the extension). Install it out of the venv:
  ``pip install --no-deps --target /tmp/tvlib torchvision==0.28.0`` and run with
  ``PYTHONPATH=/tmp/tvlib``; without it, this row is left out;
* **plain**: the same transforms written as a user would without torchvision: a map-style
  dataset, Pillow's crop-resize, flip and ``ImageEnhance``, numpy normalisation, torch's global
  generator for the draws;
* **chute stage**: ``MediaStage(ImageTransform(224, crop=224), augment=Augment(...))`` per
  sample in the same harness: decode, the clean resize + centre crop (what a pixel store keeps),
  the draw from (seed, epoch, id), crop back to 224, flip, jitter, normalise;
* **chute stage, clean**: the same stage without ``augment`` (what augmentation costs);
* **chute stage, pixel store**: the augmented stage reading the pre-decoded store (no JPEG);
* **chute Loader**: the whole ``Loader`` (recipe, stage, collate) with ``num_workers=1``.

The fastest of ``--rounds`` passes of each, interleaved.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageEnhance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, save
from chute import Loader, Recipe
from chute.demo.data import write_demo_tokenizer
from chute.media import ImageTransform, MediaStage, PixelStore, build_pixel_store
from chute.media.augment import Augment, ColorJitter, RandomResizedCrop, SampleDraw

SIZE = 224
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32).reshape(3, 1, 1)
AUG = Augment(
    crop=RandomResizedCrop(scale=(0.08, 1.0)), flip=0.5, jitter=ColorJitter(0.4, 0.4, 0.4, 0.1)
)
TRANSFORM = ImageTransform(size=SIZE, crop=SIZE, tokens_per_image=4)


def photos() -> list[str]:
    found = [
        p
        for ext in ("*.jpg", "*.jpeg", "*.png", "*.webp")
        for p in SHARED_DATA.rglob(ext)
        if "tokenizers" not in p.parts
    ]
    return sorted(str(p) for p in found)


class Plain(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A user's augmentation without torchvision: Pillow and torch's global generator."""

    def __init__(self, paths: list[str]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        image = Image.open(self.paths[i]).convert("RGB")
        w, h = image.size
        for _ in range(10):  # torchvision's RandomResizedCrop.get_params
            area = w * h * float(torch.empty(1).uniform_(0.08, 1.0))
            ratio = float(torch.exp(torch.empty(1).uniform_(np.log(3 / 4), np.log(4 / 3))))
            cw, ch = round((area * ratio) ** 0.5), round((area / ratio) ** 0.5)
            if 0 < cw <= w and 0 < ch <= h:
                top = int(torch.randint(0, h - ch + 1, (1,)))
                left = int(torch.randint(0, w - cw + 1, (1,)))
                break
        else:
            top, left, ch, cw = 0, 0, h, w
        image = image.resize(
            (SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + cw, top + ch)
        )
        if float(torch.rand(1)) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        for k in torch.randperm(4).tolist():
            if k < 3:
                enhance = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)[k]
                image = enhance(image).enhance(float(torch.empty(1).uniform_(0.6, 1.4)))
            else:
                hsv = np.array(image.convert("HSV"))
                shift = int(float(torch.empty(1).uniform_(-0.1, 0.1)) * 255)
                hsv[..., 0] = (hsv[..., 0].astype(np.int16) + shift) % 256
                image = Image.fromarray(hsv, "HSV").convert("RGB")
        x = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((x - MEAN) / STD)


def _torchvision() -> Any:
    """torchvision's ``transforms.v2``, or None where it is not importable (see the docstring)."""
    import importlib.util
    import types

    if importlib.util.find_spec("torchvision") is None:
        return None
    # the CUDA wheel's C extension registers operators the CPU torch lacks: skip that module
    sys.modules.setdefault(
        "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
    )
    import torchvision
    from torchvision.transforms import v2

    v2.version = torchvision.__version__  # type: ignore[attr-defined]
    return v2


class TorchvisionV2(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The same transforms as most training scripts write them, with torchvision's v2."""

    def __init__(self, paths: list[str], v2: Any):
        self.paths = paths
        self.transform = v2.Compose(
            [
                v2.PILToTensor(),
                v2.RandomResizedCrop(SIZE, scale=(0.08, 1.0), antialias=True),
                v2.RandomHorizontalFlip(0.5),
                v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN.ravel().tolist(), STD.ravel().tolist()),
            ]
        )

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        out: torch.Tensor = self.transform(Image.open(self.paths[i]).convert("RGB"))
        return out


class Staged(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """chute's media stage, per sample, in the same harness."""

    def __init__(self, paths: list[str], stage: MediaStage, augment: bool):
        self.paths, self.stage, self.augment = paths, stage, augment

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        sample = {
            "input_ids": np.zeros(4, np.int64),
            "images": [{"path": self.paths[i], "span": [0, 4]}],
        }
        draw = SampleDraw(AUG, 0, 0, i, TRANSFORM) if self.augment else None
        return torch.from_numpy(self.stage(sample, draw)["pixel_values"][0])


def rate(dataset: Any, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        loader = torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=1)
        t0 = time.perf_counter()
        n = sum(len(b) for b in loader)
        best = min(best, time.perf_counter() - t0)
    return n / best


def loader_rate(data: Path, tokenizer: Path, rounds: int) -> float:
    best, n = float("inf"), 0
    for _ in range(rounds):
        recipe = Recipe(
            tokenizer=tokenizer,
            template="chatml",
            image_tokens=4,
            geometry="none",
            media_root=SHARED_DATA,
        )
        loader = Loader(
            data, recipe, batch_size=16, num_workers=1, media=MediaStage(TRANSFORM, augment=AUG)
        )
        t0 = time.perf_counter()
        n = sum(int((b["sample_ids"] >= 0).sum()) for b in loader)
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    found = photos()
    paths = [found[i % len(found)] for i in range(args.images)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_pixel_store(found, TRANSFORM, root / "px", workers=1)
        tokenizer = write_demo_tokenizer(root / "tok")
        rows = [
            {
                "messages": [
                    {"role": "user", "content": "<image>Describe it."},
                    {"role": "assistant", "content": "A photo."},
                ],
                "images": [p],
            }
            for p in paths
        ]
        data = root / "photos.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        stage = MediaStage(TRANSFORM, augment=AUG, store=False)
        stored = MediaStage(TRANSFORM, augment=AUG, store=PixelStore(root / "px", TRANSFORM))
        v2 = _torchvision()
        results = {
            **(
                {"torchvision v2 DataLoader": rate(TorchvisionV2(paths, v2), args.rounds)}
                if v2 is not None
                else {}
            ),
            "plain DataLoader (Pillow + torch RNG)": rate(Plain(paths), args.rounds),
            "chute stage, augmented": rate(Staged(paths, stage, True), args.rounds),
            "chute stage, clean": rate(Staged(paths, stage, False), args.rounds),
            "chute stage, augmented, pixel store": rate(Staged(paths, stored, True), args.rounds),
            "chute Loader, augmented": loader_rate(data, tokenizer, args.rounds),
        }
    save(
        "augment",
        {
            "images": args.images,
            "photos": len(found),
            "workers": 1,
            "images_per_second_per_worker": {k: round(v, 1) for k, v in results.items()},
            "torchvision": v2.version if v2 is not None else "not installed: not measured",
        },
    )


if __name__ == "__main__":
    main()
