"""What the augmentation tests share: a grey image with a red box, and the delivered pixels
put back into images to find the box in them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from PIL import ImageDraw as PILDraw

from chute.media import DynamicResolution

TRANSFORM = DynamicResolution(min_pixels=28 * 28, max_pixels=112 * 112)
BOXES = [(40, 30, 90, 70), (10, 10, 60, 50), (70, 20, 140, 90), (30, 40, 80, 95)]


def qwen_options(
    tokenizer: Path, transform: DynamicResolution = TRANSFORM, **extra: Any
) -> dict[str, Any]:
    """A Qwen2.5-VL recipe as a mapping (a mixture's or a preprocess config's ``recipe:``),
    counting image tokens by ``transform``'s pixel bounds; ``extra`` adds or replaces keys."""
    rule = {"min_pixels": transform.min_pixels, "max_pixels": transform.max_pixels}
    return {
        "tokenizer": str(tokenizer),
        "template": "chatml",
        "image_tokens": {**rule, "family": "qwen2.5-vl"},
        **extra,
    }


def write_box_image(path: Path, box: tuple[int, ...]) -> None:
    """A 150x100 grey image with a red rectangle over ``box`` (x1, y1, x2, y2; ends exclusive)."""
    image = Image.new("RGB", (150, 100), (128, 128, 128))
    PILDraw.Draw(image).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=(255, 0, 0))
    image.save(path)


def images_of(batch: Any, transform: DynamicResolution = TRANSFORM) -> list[np.ndarray]:
    """``pixel_values`` patches back into ``(H, W, 3)`` float images (normalised values)."""
    p, m, tp = transform.patch_size, transform.merge_size, transform.temporal_patch_size
    out, start = [], 0
    for gt, gh, gw in batch["image_grid_thw"].tolist():
        n = gt * gh * gw
        x = batch["pixel_values"][start : start + n].numpy()
        start += n
        x = x.reshape(gt, gh // m, gw // m, m, m, 3, tp, p, p).transpose(0, 6, 5, 1, 3, 7, 2, 4, 8)
        out.append(x.reshape(gt, tp, 3, gh * p, gw * p)[0, 0].transpose(1, 2, 0))
    return out


def red_extent(image: np.ndarray) -> tuple[int, int, int, int]:
    """The red pixels' box (x1, y1, x2, y2; ends exclusive), in CLIP-normalised units."""
    ys, xs = np.nonzero(image[..., 0] - image[..., 1] > 1.0)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def first_box(text: str) -> tuple[int, int, int, int]:
    """The first ``[x1, y1, x2, y2]`` written in ``text``."""
    x1, y1, x2, y2 = (int(v) for v in re.findall(r"\[(\d+), (\d+), (\d+), (\d+)\]", text)[0])
    return x1, y1, x2, y2


def encloses(box: tuple[int, ...], red: tuple[int, ...], slack: int = 2) -> bool:
    """Whether ``box`` holds ``red`` within ``slack`` pixels (resampling blurs the edges)."""
    return (
        box[0] - slack <= red[0]
        and box[1] - slack <= red[1]
        and red[2] <= box[2] + slack
        and red[3] <= box[3] + slack
    )
