"""A generated multimodal instruction dataset for ``chute demo``: images, text, planted faults.

LLaVA-shaped records (``image`` + ``conversations`` with an ``<image>`` placeholder) over small
PNG pictures of coloured shapes, mixed with text-only instructions of varied lengths (so
padding and packing matter), plus one record of each fault a real dataset has: truncated JSON,
invalid UTF-8, a conversation that starts with the assistant, a placeholder without an image,
a missing image file and a corrupt (truncated) image file.

Example:
    >>> import tempfile, pathlib
    >>> data = write_multimodal_demo(pathlib.Path(tempfile.mkdtemp()), records=50)
    >>> sorted(data.planted.values())[:3]
    ['bad_json', 'bad_role_order', 'bad_utf8']
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["DemoData", "write_multimodal_demo"]

COLORS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 50, 170),
}
SHAPES = ("circle", "square", "triangle")
FACTS = {
    "circle": "A circle has no corners and every point of its edge is as far from the centre.",
    "square": "A square has four equal sides and four right angles.",
    "triangle": "A triangle has three sides and its angles add up to half a turn.",
}
TOPICS = ("rivers", "prime numbers", "bread", "volcanoes", "chess", "tides", "compilers", "bees")
VERBS = ("Explain", "Summarise", "Describe", "List facts about")


@dataclass
class DemoData:
    """What ``write_multimodal_demo`` wrote."""

    path: Path
    root: Path
    records: int
    planted: dict[int, str]  # 1-based line -> the reject kind it must produce
    corpus: list[str]  # texts to train the demo tokenizer on


def _draw(path: Path, color: tuple[int, int, int], shape: str, size: int = 32) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    box = [size // 5, size // 5, size - size // 5, size - size // 5]
    if shape == "circle":
        draw.ellipse(box, fill=color)
    elif shape == "square":
        draw.rectangle(box, fill=color)
    else:
        draw.polygon([(size // 2, box[1]), (box[2], box[3]), (box[0], box[3])], fill=color)
    image.save(path)


def _conversation(human: str, gpt: str) -> list[dict[str, str]]:
    return [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]


def write_multimodal_demo(root: Path, records: int = 3000, seed: int = 0) -> DemoData:
    """Write ``root/demo.jsonl`` and ``root/images/`` (see the module docstring)."""
    rng = random.Random(seed)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    pictures = []
    for color, rgb in COLORS.items():
        for shape in SHAPES:
            name = f"images/{color}_{shape}.png"
            _draw(root / name, rgb, shape)
            pictures.append((name, color, shape))
    good = (root / pictures[0][0]).read_bytes()
    (images / "broken.png").write_bytes(good[: len(good) // 2])  # header intact, pixels cut

    faults: dict[int, tuple[bytes, str]] = {
        records // 9: (b'{"id": "cut", "conversations": [{"from": "human", "valu', "bad_json"),
        records // 5: (b'{"id": "latin1", "text": "caf\xe9"}', "bad_utf8"),
        records // 4: (
            _json({"conversations": _conversation("hi", "hello")[::-1]}),
            "bad_role_order",
        ),
        records // 3: (
            _json({"conversations": _conversation("<image>\nWhat is this?", "A shape.")}),
            "image_placeholder_mismatch",
        ),
        records // 2: (
            _json(
                {
                    "image": "images/lost.png",
                    "conversations": _conversation("<image>\nColour?", "Red."),
                }
            ),
            "image_missing",
        ),
        (2 * records) // 3: (
            _json(
                {
                    "image": "images/broken.png",
                    "conversations": _conversation("<image>\nShape?", "A circle."),
                }
            ),
            "image_corrupt",
        ),
    }
    planted: dict[int, str] = {}
    corpus: list[str] = []
    with open(root / "demo.jsonl", "wb") as f:
        for i in range(records):
            if i in faults:
                raw, kind = faults[i]
                f.write(raw + b"\n")
                planted[i + 1] = kind
                continue
            record = _record(i, rng, pictures)
            corpus.extend(turn["value"] for turn in record["conversations"])
            f.write(_json(record) + b"\n")
    return DemoData(root / "demo.jsonl", root, records, planted, corpus)


def _record(i: int, rng: random.Random, pictures: list[tuple[str, str, str]]) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.6:
        name, color, shape = rng.choice(pictures)
        if rng.random() < 0.5:
            question, answer = "<image>\nWhat is in the picture?", f"A {color} {shape}."
        else:
            facts = " ".join([FACTS[shape]] * rng.randint(1, 10))
            question = "<image>\nDescribe the picture in detail."
            answer = f"The picture shows a {color} {shape} on a white background. {facts}"
        return {"id": i, "image": name, "conversations": _conversation(question, answer)}
    topic, verb = rng.choice(TOPICS), rng.choice(VERBS)
    words = " ".join(rng.choice(TOPICS) for _ in range(rng.randint(3, 90)))
    return {
        "id": i,
        "conversations": _conversation(f"{verb} {topic}.", f"{topic.capitalize()}: {words}."),
    }


def _json(obj: object) -> bytes:
    return orjson.dumps(obj)
