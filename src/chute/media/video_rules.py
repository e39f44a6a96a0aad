"""Which frames of a video, at what size, and when: the Qwen frame-sampling rules, as arithmetic.

Everything here follows from a container's header (frame count, frame rate, frame size), so the
recipe counts a video's tokens without decoding it and the media stage decodes exactly the frames
it counted. Two references are reproduced:

* ``qwen-vl-utils``: Qwen's own preprocessing for Qwen2-VL and Qwen2.5-VL (``fetch_video``),
  also used for Qwen3-VL with 16-pixel patches;
* ``qwen3-vl``: ``transformers``' ``Qwen3VLVideoProcessor`` (its frame sampling and resize).

::

    frames at fps      qwen-vl-utils: n = total / video_fps * fps, clamped to [min_frames
                       rounded up to even, max_frames rounded down to even] and to total, then
                       rounded down to even
                       qwen3-vl: n = int(total / video_fps * fps), clamped to [min_frames,
                       max_frames] and to total
    fixed count        qwen-vl-utils: num_frames rounded to even; qwen3-vl and chute: num_frames
    which frames       round(linspace(0, total - 1, n))              (both)
    frame size         qwen-vl-utils: each frame's area in [frame_min, max(min(frame_max,
                       total_pixels / n * 2), 1.05 * frame_min)]
                       qwen3-vl: frames x area of the clip in [video_min, video_max]
    seconds per group  temporal_patch / (n / total * video_fps)       (Qwen2.5-VL's mRoPE)
    group time         mean of the first and last frame time of each group of temporal_patch
                       frames (the last frame repeated to fill it)    (Qwen3-VL's timestamps)

Sides are multiples of ``factor = patch_size * merge_size``; an aspect ratio above 200 is refused
by both references (``video_unsupported`` here).

Example:
    >>> frames_at_rate("qwen-vl-utils", total=243, video_fps=25.0, fps=2.0, min_frames=4,
    ...                max_frames=768)
    18
    >>> frame_indices(243, 6).tolist()
    [0, 48, 97, 145, 194, 242]
    >>> group_times([0, 30, 60, 90, 120, 149], 30.0, 2)
    [0.5, 2.5, 4.483333333333333]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from chute.errors import SampleError

__all__ = [
    "RULES",
    "clip_size",
    "fixed_frames",
    "frame_indices",
    "frame_size",
    "frames_at_rate",
    "group_times",
    "seconds_per_group",
]

RULES = ("qwen-vl-utils", "qwen3-vl")
MAX_RATIO = 200
_EVEN = 2  # qwen-vl-utils' FRAME_FACTOR: frame counts are multiples of it


def _floor(x: float, factor: int) -> int:
    return math.floor(x / factor) * factor


def _ceil(x: float, factor: int) -> int:
    return math.ceil(x / factor) * factor


def _round(x: float, factor: int) -> int:
    return round(x / factor) * factor  # Python's round: half to even, as both references


def frames_at_rate(
    rule: str, *, total: int, video_fps: float, fps: float, min_frames: int, max_frames: int
) -> int:
    """Frames sampled from a video of ``total`` frames at ``video_fps`` when sampling ``fps``.

    Raises:
        SampleError: ``video_unsupported`` when the rule leaves fewer than two frames
            (``qwen-vl-utils``) or none (``qwen3-vl``): a video of one frame.
    """
    wanted = total / video_fps * fps
    if rule == "qwen3-vl":
        n = min(max(int(wanted), min_frames), max_frames, total)
        if n < 1:
            raise SampleError("video_unsupported", f"{total} frames leave no frame to sample")
        return n
    low = _ceil(min_frames, _EVEN)
    high = _floor(min(max_frames, total), _EVEN)
    n = _floor(min(max(wanted, low), high, total), _EVEN)
    if not _EVEN <= n <= total:
        raise SampleError(
            "video_unsupported",
            f"{total} frame(s) leave {n} to sample; Qwen's rule needs at least {_EVEN}",
        )
    return n


def fixed_frames(rule: str | None, num_frames: int, total: int | None) -> int:
    """Frames sampled for a fixed ``num_frames`` (``qwen-vl-utils`` rounds it to even).

    Raises:
        SampleError: ``video_unsupported`` when ``qwen-vl-utils`` would sample more frames than
            the video has (it refuses to repeat frames).
    """
    if rule != "qwen-vl-utils":
        return num_frames
    n = max(_EVEN, _round(num_frames, _EVEN))
    if total is not None and n > total:
        raise SampleError(
            "video_unsupported",
            f"{total} frames, fewer than the {n} frames num_frames={num_frames} samples under "
            f"qwen-vl-utils' rule; lower num_frames, or sample at a rate (fps)",
        )
    return n


def frame_indices(total: int, n: int) -> np.ndarray:
    """The ``n`` frame indices (int64) spread evenly over ``[0, total - 1]``, ends included."""
    return np.rint(np.linspace(0, total - 1, n)).astype(np.int64)


def seconds_per_group(n: int, total: int, video_fps: float, temporal_patch_size: int) -> float:
    """Seconds one temporal group spans: ``temporal_patch_size`` over the sampling rate.

    The sampling rate is ``n / total * video_fps`` (qwen-vl-utils' ``sample_fps``; the
    ``sampled_fps`` of ``transformers``' video metadata); Qwen2.5-VL's ``second_per_grid_ts``.
    """
    return temporal_patch_size / (n / max(total, 1e-6) * video_fps)


def group_times(indices: Sequence[int], video_fps: float, temporal_patch_size: int) -> list[float]:
    """Each temporal group's time in seconds: the mean of its first and last frame's times.

    The last frame is repeated to fill the last group, as the patches are.
    """
    idx = [int(i) for i in indices]
    if len(idx) % temporal_patch_size:
        idx += [idx[-1]] * (temporal_patch_size - len(idx) % temporal_patch_size)
    times = [i / video_fps for i in idx]
    return [
        (times[g] + times[g + temporal_patch_size - 1]) / 2
        for g in range(0, len(times), temporal_patch_size)
    ]


def _ratio(height: int, width: int) -> None:
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_RATIO:
        raise SampleError(
            "video_unsupported",
            f"frames of {width}x{height} have an aspect ratio of {ratio:.0f}, above the "
            f"{MAX_RATIO} Qwen's vision processors accept",
        )


def frame_size(
    height: int,
    width: int,
    *,
    n: int,
    factor: int,
    frame_min_pixels: int,
    frame_max_pixels: int | None,
    total_pixels: float,
    frame_cap: int,
) -> tuple[int, int]:
    """``(height, width)`` of each frame under qwen-vl-utils' per-frame pixel budget.

    Args:
        height: the frames' height in the header.
        width: their width.
        n: frames sampled.
        factor: ``patch_size * merge_size``; both sides become multiples of it.
        frame_min_pixels: the smallest area of a frame.
        frame_max_pixels: a further cap on a frame's area (``None``: none).
        total_pixels: the video's budget: a frame gets at most ``total_pixels / n * 2``.
        frame_cap: the largest area of a frame (768 tokens' worth in the reference).

    Raises:
        SampleError: ``video_unsupported`` for an aspect ratio above 200.
    """
    _ratio(height, width)
    ceiling: float = max(min(frame_cap, total_pixels / n * _EVEN), int(frame_min_pixels * 1.05))
    if frame_max_pixels is not None:
        ceiling = min(frame_max_pixels, ceiling)
    h = max(factor, _round(height, factor))
    w = max(factor, _round(width, factor))
    if h * w > ceiling:
        beta = math.sqrt(height * width / ceiling)
        h, w = _floor(height / beta, factor), _floor(width / beta, factor)
    elif h * w < frame_min_pixels:
        beta = math.sqrt(frame_min_pixels / (height * width))
        h, w = _ceil(height * beta, factor), _ceil(width * beta, factor)
    return h, w


def clip_size(
    height: int,
    width: int,
    *,
    n: int,
    factor: int,
    temporal_patch_size: int,
    video_min_pixels: int,
    video_max_pixels: int,
) -> tuple[int, int]:
    """``(height, width)`` of each frame under the Qwen3-VL video processor's clip budget.

    The frames' total area ``t * height * width`` (``t``: ``n`` rounded to the temporal patch)
    lies in ``[video_min_pixels, video_max_pixels]``; frames smaller than ``factor`` on a side
    are first scaled up to it.

    Raises:
        SampleError: ``video_unsupported`` for an aspect ratio above 200.
    """
    if n < temporal_patch_size:
        raise SampleError(
            "video_unsupported",
            f"{n} frame(s), fewer than the temporal patch ({temporal_patch_size}) the Qwen3-VL "
            f"video processor needs",
        )
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    _ratio(height, width)
    h = _round(height, factor)
    w = _round(width, factor)
    t = _round(n, temporal_patch_size)
    if t * h * w > video_max_pixels:
        beta = math.sqrt(n * height * width / video_max_pixels)
        h = max(factor, _floor(height / beta, factor))
        w = max(factor, _floor(width / beta, factor))
    elif t * h * w < video_min_pixels:
        beta = math.sqrt(video_min_pixels / (n * height * width))
        h, w = _ceil(height * beta, factor), _ceil(width * beta, factor)
    return h, w
