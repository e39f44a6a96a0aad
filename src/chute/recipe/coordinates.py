"""The recipe's step that keeps coordinates in the text true to the pixels (issue 33).

Tokens are made from the text before any pixel is decoded, so boxes must move where the text
is still text: here, between the format reader and the template. What moves them is known from
the image's header and the sample's draw (``chute.media.augment.SampleDraw``: a pure function
of seed, epoch and sample id), so the media stage, drawing again from the same key, moves the
pixels the same way without any state passing between them::

    record ──► Conversation ──► move_coordinates(geometry, header sizes, draw) ──► template ...
                                    │ flip refused for "left"/"right" text: sample["no_flip"]
    media stage: draw.image(i, prepared size) ──► the same crop and flip on the pixels

Example:
    >>> from chute.sample.conversation import Conversation, Message
    >>> says_left_right(Conversation([Message("user", "What is on the left?")]))
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from chute.errors import SampleError
from chute.media.geometry import Geometry, ImageMap, prepared_map
from chute.media.paths import is_remote
from chute.media.sizes import image_size
from chute.media.timestamps import Clip, Timestamps
from chute.sample.conversation import Conversation, Message, Part

__all__ = ["move_coordinates", "move_timestamps", "objects_answer", "says_left_right"]

# Words whose meaning a horizontal flip reverses (English and Chinese: the shared data has both).
# "left" or "right" bounded by anything but a letter (so "top_left", "left_of", "left2" count
# and "leftover", "bright", "copyright" do not), in camelCase ("topLeft"), and a few
# unambiguous words of other languages
_LEFT_RIGHT = re.compile(
    r"(?i:(?<![a-z])(?:left|right)(?:most|wards?|-?hand(?:ed)?)?(?![a-z]))"
    r"|(?<=[a-z])(?:Left|Right)(?![a-z])"
    r"|(?i:gauche|izquierd[ao]|derecha|слева|справа|налево|направо)|左|右"
)


def _texts(conv: Conversation) -> list[str]:
    out = []
    for message in conv.messages:
        if isinstance(message.content, str):
            out.append(message.content)
        else:
            out += [p.value for p in message.content if p.kind == "text"]
    return out


def says_left_right(conv: Conversation) -> bool:
    """Whether any text of the conversation says left or right (a flip would falsify it)."""
    return any(_LEFT_RIGHT.search(text) for text in _texts(conv))


def move_coordinates(
    conv: Conversation,
    geometry: Geometry | None,
    media: Any,
    default_transform: Callable[[], Any],
    path: str | None,
    draw: Any = None,
    widest: bool = False,
) -> tuple[Conversation, bool]:
    """``(conversation with coordinates moved, whether a flip is allowed)``.

    ``media``: the recipe's ``MediaPlan`` (resolves image paths); ``default_transform``: makes
    the geometry used without a draw (the recipe's rule's transform; asked only when needed); ``draw``: the sample's
    ``SampleDraw`` (``None``: no augmentation, e.g. a lengths pass); ``widest``: write each
    coordinate at its widest form (``Geometry.rewrite``), for the lengths pass of a Loader that
    crops or flips: the planned length is then never below an augmented sample's.

    Raises:
        SampleError: ``flip_left_right`` (``Augment(left_right="reject")``), ``box_outside``,
            ``box_ambiguous``, ``box_invalid``.
    """
    flip_ok = True
    if draw is not None and draw.augment.flip > 0 and says_left_right(conv):
        if draw.augment.left_right == "reject":
            raise SampleError(
                "flip_left_right",
                "the text says left or right and the augmentation may flip the image "
                "(Augment(left_right='reject')); left_right='skip' keeps such samples unflipped",
            )
        flip_ok = False
    if geometry is None or geometry.convention == "none":
        return conv, flip_ok
    texts = _texts(conv)
    if not any(geometry.find(t) for t in texts):
        return conv, flip_ok  # nothing to move: no header is read
    images = [p for p in conv.media() if p.kind == "image"]
    transform = draw.transform if draw is not None and draw.transform else default_transform()
    if callable(getattr(transform, "for_images", None)):  # OneVision pads each of several
        transform = transform.for_images(len(images))
    geometry.check_transform(transform)
    maps = []
    for i, part in enumerate(images):
        resolved = media.resolve(part.value, path)
        if is_remote(resolved):
            raise SampleError(
                "url_not_allowed",
                f"{resolved}: moving the coordinates in the text needs the image's size, and "
                f"chute reads no URL's header",
            )
        w, h = image_size(resolved)
        image = prepared_map(transform, w, h)
        if draw is not None and not widest:
            height, width = image.size
            image = dataclasses.replace(image, draw=draw.image(i, height, width, flip_ok))
        maps.append(image)
    # under crops and flips every draw writes coordinates in one form: planned at its widest
    canonical = draw is not None and not widest and bool(getattr(draw.augment, "geometric", 0))
    messages = []
    for message in conv.messages:
        content: Any = message.content
        if isinstance(content, str):
            content = geometry.rewrite(content, maps, widest, canonical)
        else:
            content = [
                Part("text", geometry.rewrite(p.value, maps, widest, canonical))
                if p.kind == "text"
                else p
                for p in content
            ]
        messages.append(_with_content(message, content))
    return Conversation(messages, conv.tools, conv.kind), flip_ok


def objects_answer(
    conv: Conversation, data: Any, geometry: Geometry | None, media: Any, path: str | None
) -> Conversation:
    """The conversation answered from the record's ``objects`` (or ``bbox``) column.

    A grounding record may hold its boxes as data rather than text: ``"objects": [{"bbox":
    [x1, y1, x2, y2], "label": "dog"}, ...]`` or a top-level ``"bbox"`` (with an optional
    ``"label"``), corners in pixels of the original image; an object may be a point instead,
    ``{"point": [x, y]}`` (or ``"point_2d"``), written in ``qwen2.5-vl`` and ``qwen3-vl`` only. When the
    conversation ends with the user's turn (the record has no answer), the answer is those
    objects written in the ``geometry``'s convention, which the rewrite that follows then moves with the pixels, with
    the sample's own draw::

        qwen2.5-vl  [{"bbox_2d": [x1, y1, x2, y2], "label": "dog"}]
        qwen3-vl    [{"bbox_2d": [100, 250, 500, 750], "label": "dog"}]   (0-1000 of the image)
        qwen2-vl    <|object_ref_start|>dog<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)<|box_end|>
        normalized  [{"bbox": [0.1, 0.25, 0.5, 0.75], "label": "dog"}]   (llava: of the square)

    A record that has an answer keeps it: its columns are not read (the text is what the model
    reads, and it is rewritten itself).

    Raises:
        SampleError: ``box_invalid`` (a column that is not a list of four numbers),
            ``box_ambiguous`` (several images).
    """
    if geometry is None or geometry.convention == "none" or not isinstance(data, dict):
        return conv
    if "objects" in data:
        objects = data["objects"]
    elif "bbox" in data:
        objects = [{"bbox": data["bbox"], "label": data.get("label")}]
    else:
        return conv
    if not conv.messages or conv.messages[-1].role != "user":
        return conv  # answered in the text: the columns are not what the model reads
    images = [p for p in conv.media() if p.kind == "image"]
    if len(images) != 1:
        raise SampleError(
            "box_ambiguous",
            f"the record's objects are boxes of one image and the sample has {len(images)}",
        )
    if not isinstance(objects, list):
        raise SampleError("box_invalid", f"objects: expected a list, got {type(objects).__name__}")
    resolved = media.resolve(images[0].value, path)
    size = None if geometry.convention == "qwen2.5-vl" else image_size(resolved)
    rendered = [_render(geometry.convention, obj, size, k) for k, obj in enumerate(objects)]
    if geometry.convention == "qwen2-vl":
        answer = "\n".join(rendered)
    else:
        answer = "[" + ", ".join(rendered) + "]"
    return Conversation([*conv.messages, Message("assistant", answer)], conv.tools, conv.kind)


def _render(convention: str, obj: Any, size: tuple[int, int] | None, k: int) -> str:
    if isinstance(obj, dict) and "bbox" not in obj and ("point" in obj or "point_2d" in obj):
        return _render_point(convention, obj, size, k)
    box = obj.get("bbox") if isinstance(obj, dict) else None
    if not (
        isinstance(box, list)
        and len(box) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)
    ):
        raise SampleError(
            "box_invalid", f"objects[{k}].bbox: expected [x1, y1, x2, y2] in pixels, got {box!r}"
        )
    label = obj.get("label")
    x1, y1, x2, y2 = (float(v) for v in box)
    if convention == "qwen2.5-vl":
        return _labelled({"bbox_2d": [_num(v) for v in box]}, label)
    # the convention's numbers of the original image (llava: of its padded square)
    xs, ys = Geometry(convention).to_grid(
        np.array([x1, x2]), np.array([y1, y2]), ImageMap.of(size or (1, 1))
    )
    if convention in ("qwen2-vl", "qwen3-vl"):  # 0-1000, rounded outwards
        a, b, c, d = math.floor(xs[0]), math.floor(ys[0]), math.ceil(xs[1]), math.ceil(ys[1])
        if convention == "qwen3-vl":
            return _labelled({"bbox_2d": [a, b, c, d]}, label)
        ref = f"<|object_ref_start|>{label}<|object_ref_end|>" if label is not None else ""
        return f"{ref}<|box_start|>({a},{b}),({c},{d})<|box_end|>"
    body = [math.floor(xs[0] * 1000) / 1000, math.floor(ys[0] * 1000) / 1000]
    body += [math.ceil(xs[1] * 1000) / 1000, math.ceil(ys[1] * 1000) / 1000]
    return _labelled({"bbox": [round(v, 3) for v in body]}, label)


def _labelled(entry: dict[str, Any], label: Any) -> str:
    """An object's JSON: its coordinates, then its label where it has one."""
    return json.dumps({**entry, **({"label": label} if label is not None else {})})


def _render_point(
    convention: str, obj: dict[str, Any], size: tuple[int, int] | None, k: int
) -> str:
    """An object that is a point, ``{"point": [x, y]}`` (or ``point_2d``), in pixels.

    Written as Qwen2.5-VL's ``{"point_2d": [x, y]}`` (Qwen3-VL's: 0-1000 of the image); the
    other conventions write no points.
    """
    key = "point" if "point" in obj else "point_2d"
    point = obj[key]
    if not (
        isinstance(point, list)
        and len(point) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in point)
    ):
        raise SampleError(
            "box_invalid", f"objects[{k}].{key}: expected [x, y] in pixels, got {point!r}"
        )
    if convention not in ("qwen2.5-vl", "qwen3-vl"):
        raise SampleError(
            "box_invalid",
            f"objects[{k}].{key}: a point is written in qwen2.5-vl's or qwen3-vl's convention "
            f'only ("point_2d"), not {convention}\'s',
        )
    if convention == "qwen3-vl":
        gx, gy = Geometry(convention).to_grid(
            np.array([float(point[0])]), np.array([float(point[1])]), ImageMap.of(size or (1, 1))
        )
        return _labelled({"point_2d": [round(gx[0]), round(gy[0])]}, obj.get("label"))
    return _labelled({"point_2d": [_num(v) for v in point]}, obj.get("label"))


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def move_timestamps(
    conv: Conversation, timestamps: Timestamps | None, media: Any, path: str | None
) -> Conversation:
    """The conversation with the times in its text checked against its videos (and rewritten).

    Only samples with a video are read; a video's duration comes from its header (and, with
    ``snap``, its sampled frame groups' times from the recipe's ``video_tokens`` rule).

    Raises:
        SampleError: ``timestamp_outside``, ``timestamp_ambiguous``, the header's kinds.
    """
    if timestamps is None:
        return conv
    videos = [p for p in conv.media() if p.kind == "video"]
    if not videos or not any(Timestamps.find(t) for t in _texts(conv)):
        return conv
    from chute.media.video import probe_video  # PyAV: only for samples with videos and times

    clips = []
    for part in videos:
        resolved = media.resolve(part.value, path)
        if is_remote(resolved):
            raise SampleError(
                "url_not_allowed",
                f"{resolved}: checking the times in the text needs the video's header, and "
                f"chute reads no URL's header",
            )
        info = probe_video(resolved)
        duration = info.duration or (info.frames / info.fps if info.fps > 0 else 0.0)
        if duration <= 0:
            raise SampleError(
                "video_unsupported",
                f"{resolved}: the header gives no duration (nor frame count and rate), so the "
                f"times in the text cannot be checked against it; leave timestamps unset",
            )
        groups = None
        rule = media.video_tokens
        if timestamps.snap and callable(getattr(rule, "sampling", None)):
            groups = rule.sampling(resolved).timestamps
        clips.append(Clip(duration, groups))
    return _map_texts(conv, lambda text: timestamps.rewrite(text, clips))


def _map_texts(conv: Conversation, fn: Callable[[str], str]) -> Conversation:
    messages = []
    for message in conv.messages:
        content: Any = message.content
        if isinstance(content, str):
            content = fn(content)
        else:
            content = [Part("text", fn(p.value)) if p.kind == "text" else p for p in content]
        messages.append(_with_content(message, content))
    return Conversation(messages, conv.tools, conv.kind)


def _with_content(message: Message, content: Any) -> Message:
    out = Message.__new__(Message)
    for key in Message.__slots__:
        setattr(out, key, getattr(message, key))
    out.content = content
    return out
