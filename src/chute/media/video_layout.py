"""How a video's tokens are laid out in the text, per model family.

Qwen2-VL and Qwen2.5-VL write one run of ``<|video_pad|>`` per video (the recipe's plain
expansion: ``count`` copies of the video token). Qwen3-VL writes a timestamp before each
temporal group, each group inside its own vision markers, as ``transformers``'
``Qwen3VLProcessor`` does (``replace_video_token``)::

    template   : ...<|vision_start|><|video_pad|><|vision_end|>What is she doing?...
    Qwen3-VL   : ...<|vision_start|><0.3 seconds><|vision_start|><|video_pad|> x per group
                    <|vision_end|><1.3 seconds><|vision_start|>...<|vision_end|><|vision_end|>...

The processor replaces only ``<|video_pad|>``, so the template's outer markers stay (the
pinned ``transformers`` 5.x; Qwen's processor in ``transformers`` 4.57 replaced them too). A
time is the group's mean frame time (``chute.media.video_rules.group_times``) written with one
decimal. The video entry records ``frame_spans`` (``[start, end)`` of each group's pad tokens,
relative to the expansion until the recipe places it) and ``timestamps``.

Example:
    >>> ids, spans = qwen3_video_ids(tok, [2, 4, 4], [0.5, 1.5], 8, 151656, {})  # doctest: +SKIP
    >>> spans  # doctest: +SKIP
    [[6, 10], [17, 21]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chute.errors import ConfigError, SampleError
from chute.tokenize.base import Tokenizer

__all__ = ["VISION_END", "VISION_START", "qwen3_video_ids", "video_layout"]

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"


def video_layout(family: str | None, video_tokens: Any) -> str | None:
    """The layout of a recipe's videos: ``qwen3-vl`` (timestamps per group) or ``None`` (plain).

    Raises:
        ConfigError: the ``qwen3-vl`` family with a fixed token count per video (a timestamp
            per frame group needs the frames' times and grid).
    """
    if family != "qwen3-vl":
        return None
    if isinstance(video_tokens, int) and not isinstance(video_tokens, bool):
        raise ConfigError(
            f"Qwen3-VL writes a timestamp before each frame group of a video, which a fixed "
            f"count of {video_tokens} tokens per video cannot lay out; pass video_tokens='fps' "
            f"(or a VideoFrames) so each video's frames are counted from its header",
            param="video_tokens",
        )
    return "qwen3-vl"


def qwen3_video_ids(
    tokenizer: Tokenizer,
    grid_thw: Sequence[int] | None,
    timestamps: Sequence[float] | None,
    count: int,
    token_id: int,
    stamps: dict[str, list[int]],
    where: str = "",
) -> tuple[np.ndarray, list[list[int]]]:
    """``(ids, frame_spans)`` of one video in Qwen3-VL's layout.

    Args:
        tokenizer: the recipe's tokenizer (encodes the timestamps, knows the vision markers).
        grid_thw: the video's ``(t, h, w)`` in patches.
        timestamps: one time in seconds per temporal group.
        count: the video's tokens (``t * h * w / merge**2``).
        token_id: the video token's id.
        stamps: a cache of encoded timestamp texts, filled here.
        where: the video, for messages.

    Raises:
        SampleError: ``video_unsupported`` when the grid or the times are unknown (a header
            without a frame count, or frames not grouped in time).
        ConfigError: the vocabulary lacks the vision markers.
    """
    if grid_thw is None or timestamps is None or len(timestamps) != int(grid_thw[0]):
        raise SampleError(
            "video_unsupported",
            f"{where}: Qwen3-VL writes each frame group's time before it, but the video's "
            f"frame times are unknown (a header without a frame count, or a transform that "
            f"does not group frames); use DynamicResolution frames of a video whose header "
            f"gives its frame count",
        )
    groups = int(grid_thw[0])
    start, end = tokenizer.token_to_id(VISION_START), tokenizer.token_to_id(VISION_END)
    if start is None or end is None:
        raise ConfigError(
            f"the Qwen3-VL video layout needs {VISION_START} and {VISION_END} in the "
            f"vocabulary; use Qwen3-VL's tokenizer, or image_tokens without the qwen3-vl family",
            param="image_tokens",
        )
    per = count // groups
    parts: list[np.ndarray] = []
    spans: list[list[int]] = []
    n = 0
    for time in timestamps:
        text = f"<{time:.1f} seconds>"
        ids = stamps.get(text)
        if ids is None:
            ids = stamps[text] = tokenizer.encode(text)
        parts.append(np.asarray([*ids, start], dtype=np.int32))
        parts.append(np.full(per, token_id, dtype=np.int32))
        parts.append(np.asarray([end], dtype=np.int32))
        n += len(ids) + 1
        spans.append([n, n + per])
        n += per + 1
    return np.concatenate(parts), spans
